import { readFile } from 'node:fs/promises';
import * as path from 'node:path';
import type { Command } from 'commander';
import type { Bundle } from 'fhir/r4';
import type { EligibilityCheck } from '../domain';
import { loadClinicRouting } from '../adapters/clinic-routing';
import { checksFromServer } from '../adapters/fhir/in';
import { fhirKitReader } from '../sync/fhir-reader';
import { handleHl7Message, InMemoryPatientInsuranceStore, loadHl7Mappings, splitMessages } from '../adapters/hl7';
import { projectRoot } from '../mapping-files';
import { generateWebhookSecret, startSandbox } from '../sandbox';
import { startFhirServer } from '../sandbox/fhir-server';
import { VerificationClient } from '../verification/client';
import type { VerificationOutcome } from '../verification/outcome';
import { PayerCatalog } from '../verification/payer-catalog';
import { requestFromCheck } from '../verification/request-from-check';
import { fhirWriter } from '../sync/write-back';
import { startWebhookServer } from '../verification/webhook';
import { FEATURE_ASYNC } from '../verification/wire';
import type { CliIo } from './io';

const CHART = path.join(projectRoot, 'fixtures', 'fhir', 'primary-secondary.bundle.json');
const APPOINTMENT = 'appt-4004';
const HL7_MESSAGE = path.join(projectRoot, 'fixtures', 'hl7', 'molarpms-siu-s12-member-id-in-zsegment.hl7');
const WEBHOOK_WAIT_MS = 15_000;

/**
 * `dental-elig demo`: the whole flow on embedded defaults, with nothing but this repository.
 * The sandbox stands in for the verification service and an in-process FHIR server for the
 * EHR. A chart is loaded, its appointment becomes checks, each is verified (asynchronously by
 * webhook where the payer takes it, otherwise synchronously), and the CoverageEligibilityRequest
 * and Response are validated and written back; then an HL7 SIU takes the same road.
 */
export function registerDemo(program: Command, io: CliIo): void {
  program
    .command('demo')
    .description('Run the whole flow on the embedded sandbox and FHIR server (what `npm start` runs)')
    .option('--keep-running', 'leave the sandbox and FHIR server up afterwards, until Ctrl-C')
    .action(async (opts: { keepRunning?: boolean }) => runDemo(io, Boolean(opts.keepRunning)));
}

async function runDemo(io: CliIo, keepRunning: boolean): Promise<void> {
  const say = (stage: string, text: string) => io.stdout.write(`${stage.padEnd(10)}${text}\n`);
  const secret = generateWebhookSecret();
  const arrived = new Map<string, (o: VerificationOutcome) => void>();

  const sandbox = await startSandbox({ seed: true, timing: { asyncCompletionMs: 400, validationMs: 400 } });
  const fhir = await startFhirServer({ validate: true });
  const receiver = await startWebhookServer({
    auth: { scheme: 'standard-webhooks', secret },
    isKnownCorrelationId: (id) => arrived.has(id),
    onDelivery: async (d) => arrived.get(d.outcome.verification.correlationId)?.(d.outcome),
  });
  sandbox.configureWebhook({ url: receiver.url, secret });
  const client = new VerificationClient({ baseUrl: sandbox.url, apiKey: sandbox.apiKey });

  try {
    say('start', `sandbox ${sandbox.url} (simulated verification service, in memory)`);
    say('start', `FHIR server ${fhir.url} (the chart; writes are validated)`);
    say('start', `webhook receiver ${receiver.url} (Standard Webhooks signatures)`);

    // Setup, as an integrator does it once per practice.
    const catalog = await PayerCatalog.sync(client);
    const asyncCount = catalog.payers.filter((p) => p.features?.[FEATURE_ASYNC]?.supported).length;
    say('setup', `payer catalog: ${catalog.payers.length} payers, ${asyncCount} take asynchronous verification`);
    const clinic = await client.getClinic('cln_sandbox_main');
    const validation = await client.requestCredentialsValidation({ clinicId: clinic.clinicId, portalId: 'deltadentalins' });
    const validated = await client.waitForCredentialsValidation(validation.correlationId, { firstDelayMs: 500, maxDelayMs: 1000 });
    say('setup', `credentials of ${clinic.name ?? clinic.clinicId} on deltadentalins: ${validated.status}`);

    // The chart: an EHR's patient, coverages and appointment.
    const chart = JSON.parse(await readFile(CHART, 'utf8')) as Bundle;
    await fhir.seed((chart.entry ?? []).flatMap((e) => (e.resource ? [e.resource] : [])));
    say('chart', `${chart.entry?.length ?? 0} resources loaded into the FHIR server from ${path.relative(projectRoot, CHART)}`);

    const routing = loadClinicRouting();
    const reader = await fhirKitReader(fhir.url);
    const fhirChecks = await checksFromServer(reader, APPOINTMENT, { routing, resolver: catalog, receivedAt: new Date().toISOString() });
    say('fhir in', `Appointment/${APPOINTMENT} -> ${fhirChecks.length} checks (${fhirChecks.map(describe).join('; ')})`);
    const writer = await fhirWriter(fhir.url);
    for (const check of fhirChecks) {
      const outcome = await verify(client, check, arrived, say);
      const written = await writer.write(check, outcome);
      const items = (written.response.insurance ?? []).reduce((n, i) => n + (i.item?.length ?? 0), 0);
      say('write', `CoverageEligibilityRequest/${written.requestId} + CoverageEligibilityResponse/${written.responseId} (outcome ${written.response.outcome}, ${items} benefit items): validated, written`);
    }

    // The same road from HL7 v2.
    const store = new InMemoryPatientInsuranceStore();
    const mappings = loadHl7Mappings();
    for (const message of splitMessages(await readFile(HL7_MESSAGE, 'utf8'))) {
      const result = await handleHl7Message(message, { mappings, routing, store, resolver: catalog, receivedAt: new Date().toISOString() });
      const checks = result.outcome.kind === 'book' || result.outcome.kind === 'reschedule' ? result.outcome.checks : [];
      say('hl7 in', `${result.header ? `${result.header.messageCode}^${result.header.triggerEvent} ${result.header.controlId}` : 'message'} -> ACK ${result.ackCode}, ${checks.length} check (${checks.map(describe).join('; ')})`);
      for (const check of checks) await verify(client, check, arrived, say);
    }
    say('done', 'every check verified and every eligibility response validated against FHIR R4');

    if (keepRunning) {
      io.stdout.write(`\nstill running; point DENTAL_ELIG_BASE_URL at ${sandbox.url} (key ${sandbox.apiKey}). Ctrl-C stops.\n`);
      await new Promise<void>((resolve) => {
        if (io.signal) io.signal.addEventListener('abort', () => resolve(), { once: true });
        process.once('SIGINT', resolve).once('SIGTERM', resolve);
      });
    }
  } finally {
    await client.close();
    await receiver.close();
    await sandbox.close();
    await fhir.close();
  }
}

function describe(check: EligibilityCheck): string {
  const r = check.coverage.resolution;
  return `${check.coverage.order}: ${r?.status === 'resolved' ? r.name : (check.coverage.payer.name ?? check.coverage.payer.id)}`;
}

/** Asynchronously where the payer takes it (the result arrives by webhook, polled as a fallback), otherwise synchronously. */
async function verify(
  client: VerificationClient,
  check: EligibilityCheck,
  arrived: Map<string, (o: VerificationOutcome) => void>,
  say: (stage: string, text: string) => void,
): Promise<VerificationOutcome> {
  const r = check.coverage.resolution;
  const useAsync = r?.status === 'resolved' && r.supportsAsync;
  let outcome: VerificationOutcome;
  if (useAsync) {
    const accepted = await client.requestVerification(requestFromCheck(check, { mode: 'async' }));
    const byWebhook = new Promise<VerificationOutcome>((resolve) => arrived.set(accepted.correlationId, resolve));
    const timeout = new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), WEBHOOK_WAIT_MS).unref());
    outcome = (await Promise.race([byWebhook, timeout])) ?? (await client.waitForVerification(accepted.correlationId));
  } else {
    outcome = await client.verify(requestFromCheck(check, { mode: 'sync' }));
  }
  say('verify', `${describe(check)}: ${useAsync ? 'asynchronous, by webhook' : 'synchronous'} -> ${outcome.verification.status} (${outcome.verification.correlationId})`);
  return outcome;
}
