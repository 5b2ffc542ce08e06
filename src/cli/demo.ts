import { readFile, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import * as path from 'node:path';
import type { Command } from 'commander';
import type { Bundle } from 'fhir/r4';
import { mappedConcept } from '../adapters/fhir/out/codes';
import { dollarsText } from '../adapters/fhir/out/values';
import { splitMessages } from '../adapters/hl7';
import { projectRoot } from '../mapping-files';
import { serve, type Serving } from '../service/serve';
import { NOTIFICATION_PATH } from '../service/http-server';
import type { CheckRow } from '../sync/job-store';
import { frame, MllpDecoder } from '../service/mllp-framing';
import { toOutcome } from '../verification/outcome';
import { entries } from '../verification/wire';
import type { CliIo } from './io';
import { formatTable } from './table';
import { httpOrigin } from '../url-checks';

const CHART = path.join(projectRoot, 'fixtures', 'fhir', 'primary-secondary.bundle.json');
const APPOINTMENT = 'appt-4004';
/** A PMS's day: two insurances on one booking, insurance sent by ADT before the booking, a sync-only payer, a booking with no insurance yet. */
const HL7_FILES = ['molarpms-siu-s12-two-insurances', 'carepoint-adt-a04-then-siu-s12', 'molarpms-siu-s12-member-id-in-zsegment', 'carepoint-siu-s12-no-insurance-known'].map((name) =>
  path.join(projectRoot, 'fixtures', 'hl7', `${name}.hl7`),
);
const DATA_DIR = path.join('.dental-elig', 'demo');
const FINAL: ReadonlySet<CheckRow['state']> = new Set(['written', 'needs-attention', 'dead', 'cancelled']);
const WAIT_MS = 45_000;
const ORDER = ['primary', 'secondary', 'tertiary'];

/**
 * `dental-elig demo` (`npm start`): the sidecar on its embedded defaults, fed as a practice would
 * feed it: HL7 over the real MLLP socket and a FHIR notification over HTTP. The sandbox stands in
 * for the verification service (its seeded practice, credentials already stored) and the
 * embedded FHIR server for the chart; the job store is a SQLite file under .dental-elig/demo.
 */
export function registerDemo(program: Command, io: CliIo): void {
  program
    .command('demo')
    .description('Run serve on the embedded sandbox and FHIR server, feed it HL7 and a FHIR notification, show what was written to the chart (what `npm start` runs)')
    .option('--keep-running', 'leave serve running afterwards, until Ctrl-C')
    .action(async (opts: { keepRunning?: boolean }) => runDemo(io, Boolean(opts.keepRunning)));
}

async function runDemo(io: CliIo, keepRunning: boolean): Promise<void> {
  const say = (stage: string, text: string) => io.stdout.write(`${stage.padEnd(8)}${text}\n`);
  await rm(DATA_DIR, { recursive: true, force: true });
  const serving = await serve(
    { dataDir: DATA_DIR, host: '127.0.0.1', mllpPort: 0, httpPort: 0, webhook: { scheme: 'standard-webhooks' }, logLevel: 'warn', settings: { idleMs: 100, pollAfterMs: 1000 } },
    { line: (text) => say('serve', text) },
  );
  try {
    say('chart', `${await seedChart(serving)} resources of ${path.relative(projectRoot, CHART)} put on the FHIR server ${serving.fhirUrl}`);

    const notified = await fetch(`${httpOrigin(serving.http.host, serving.http.port)}${NOTIFICATION_PATH}`, {
      method: 'POST',
      headers: { 'content-type': 'application/fhir+json' },
      body: JSON.stringify({ resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: `${serving.fhirUrl}/Appointment/${APPOINTMENT}` }] }),
    });
    say('fhir', `notification for Appointment/${APPOINTMENT} -> HTTP ${notified.status}`);

    for (const file of HL7_FILES) {
      const messages = splitMessages(await readFile(file, 'utf8'));
      const acks = await sendMllp(serving.mllp.port, messages);
      say('hl7', `${path.basename(file)}: ${messages.length} message(s) over MLLP -> ACK ${acks.join(', ')}`);
    }

    const checks = await settle(serving);
    const waiting = await serving.sync.store.listAppointments('awaiting-insurance');
    io.stdout.write(`\n${table(checks)}\n`);
    if (waiting.length > 0) io.stdout.write(`\n${waiting.length} booking(s) awaiting the patient's insurance (an ADT with IN1 will start their checks)\n`);
    const written = checks.filter((c) => c.written).length;
    io.stdout.write(
      `\n${written} of ${checks.length} checks written to the chart as CoverageEligibilityResponse.\n` +
        `Look next:  curl ${serving.fhirUrl}/CoverageEligibilityResponse    (while --keep-running)\n` +
        `            npx dental-elig jobs list --data-dir ${DATA_DIR}\n`,
    );
    if (keepRunning) {
      io.stdout.write(`\nstill running: MLLP 127.0.0.1:${serving.mllp.port}, HTTP http://127.0.0.1:${serving.http.port} (/healthz, /metrics, /fhir). Ctrl-C stops.\n`);
      await new Promise<void>((resolve) => {
        if (io.signal) io.signal.addEventListener('abort', () => resolve(), { once: true });
        process.once('SIGINT', resolve).once('SIGTERM', resolve);
      });
    }
  } finally {
    await serving.close();
  }
}

/** The EHR's chart as it already stands (its resources under their own ids; real charts are not all valid R4). */
async function seedChart(serving: Serving): Promise<number> {
  const bundle = JSON.parse(await readFile(CHART, 'utf8')) as Bundle;
  const resources = (bundle.entry ?? []).flatMap((e) => (e.resource ? [e.resource] : []));
  if (!serving.embeddedChart) throw new Error('the demo writes into the embedded FHIR server; unset DENTAL_ELIG_FHIR_URL');
  await serving.embeddedChart.seed(resources);
  return resources.length;
}

/** Sends messages on one connection and reads one ACK each; returns the ACK codes. */
function sendMllp(port: number, messages: readonly string[]): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const decoder = new MllpDecoder(1 << 20);
    const codes: string[] = [];
    socket.on('error', reject);
    socket.on('data', (chunk) => {
      for (const f of decoder.push(chunk)) if (f.kind === 'message') codes.push(/\rMSA\|(\w\w)/.exec(f.payload.toString('utf8'))?.[1] ?? '?');
      if (codes.length >= messages.length) {
        socket.end();
        resolve(codes);
      }
    });
    for (const m of messages) socket.write(frame(m));
  });
}

async function settle(serving: Serving): Promise<CheckRow[]> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const checks = await serving.sync.store.listChecks();
    if (checks.every((c) => FINAL.has(c.state)) || Date.now() > deadline) return checks;
    await new Promise((r) => setTimeout(r, 200));
  }
}

function table(checks: readonly CheckRow[]): string {
  return formatTable(
    [...checks].sort((a, b) => a.createdAt.localeCompare(b.createdAt) || ORDER.indexOf(a.check.coverage.order) - ORDER.indexOf(b.check.coverage.order)),
    [
      ['PATIENT', (c) => `${c.check.patient.firstName[0]}.${c.check.patient.lastName[0]}.`],
      ['PAYER', (c) => c.check.coverage.payer.name ?? c.check.coverage.payer.id],
      ['ORDER', (c) => c.check.coverage.order],
      ['MODE', (c) => c.mode],
      ['OUTCOME', (c) => outcomeOf(c)],
      ['ANNUAL MAX LEFT', (c) => annualMaximumLeft(c)],
      ['STATE', (c) => c.state],
    ],
  );
}

function outcomeOf(c: CheckRow): string {
  if (c.result === undefined) return '';
  const outcome = toOutcome(c.result);
  return outcome.kind === 'failed' ? `failed (${outcome.failure.kind})` : outcome.kind;
}

/**
 * What is left of the patient's own annual maximum in network, for dental care as a whole: not an
 * orthodontic one listed first, nor a lifetime one where the result gives no annual one.
 */
export function annualMaximumLeft(c: Pick<CheckRow, 'result'>): string {
  if (c.result === undefined) return '';
  const outcome = toOutcome(c.result);
  if (outcome.kind !== 'completed' && outcome.kind !== 'partial') return '';
  const maximums = entries(outcome.result.data?.maximums, (m) => m);
  // Annual as the chart codes it (benefit-codes.json's term): a CalendarYear or BenefitYear maximum is the plan's annual one too.
  const annual = maximums.find((m) => mappedConcept('term', m.type)?.coding?.[0]?.code === 'annual' && !/family/i.test(m.scope ?? '') && !/out/i.test(m.network ?? '') && /^(general|dental( care)?)?$/i.test(m.category?.trim() ?? ''));
  return typeof annual?.remainingAmount === 'number' ? dollarsText(annual.remainingAmount) : '';
}
