import * as path from 'node:path';
import type { Command } from 'commander';
import { DatabaseError } from 'pg';
import { loadClinicRouting } from '../adapters/clinic-routing';
import { loadHl7Mappings } from '../adapters/hl7';
import { chartReader, schedulePolicy, SyncSettings } from '../service/eligibility-sync';
import { type ConfigFile, readConfigFile } from '../service/config-file';
import { ConfigError } from '../config-error';
import { chartSettings, dataDirSetting, storeLocation } from '../service/serve-config';
import { CheckState, dismissed, FOR_A_PERSON, type AppointmentRow, type CheckRow, type JobStore } from '../sync/job-store';
import { heldLetterOf } from '../sync/ingest-hl7';
import { dismissCheck, dismissMessage, noCheck, notReplayed, OperationError, RETRYABLE_STATES, replayMessage, retryCheck } from '../sync/operations';
import { openJobStore } from '../sync/open-store';
import { clinicOf } from '../sync/schedule';
import { failureKinds } from '../verification/failure-kinds';
import { failureKindIn, outcomeKindOf, storedOutcome } from '../verification/outcome';
import { CliError, whole, type CliIo } from './io';
import { ENV, readsEnvironment, type EnvVar } from './service-context';
import { printRecord, printRows } from './table';

/** What `jobs replay` reads beyond the store: the chart serve reads, for a FHIR letter, and the mappings an HL7 one is handled by. */
const REPLAY_ENV: readonly EnvVar[] = [
  ENV.fhirUrl,
  ENV.fhirToken,
  ENV.fhirClientId,
  ENV.fhirKeyFile,
  [ENV.insecure[0], '1, true or yes allows a plain http:// chart URL for a host other than this machine'],
  ENV.mappings,
];

/** A booking's states, not a check's: the rows jobs list shows for bookings waiting on the PMS. */
const WAITING = ['awaiting-insurance', 'awaiting-correction'] as const;
type Waiting = (typeof WAITING)[number];
const isWaiting = (status: string): status is Waiting => (WAITING as readonly string[]).includes(status);

/** What such a booking waits for. */
function waitingFor(booking: AppointmentRow): string {
  if (booking.status === 'awaiting-correction') {
    const letter = heldLetterOf(booking);
    return `its booking was refused for the patient's details (AE${letter === undefined ? '' : `, message ${letter}`}): booked once an ADT corrects them`;
  }
  // None received, or only plans ended before the visit (or not yet begun on its day), as a Coverage whose period ended is.
  return "no insurance in force on the visit's date received for the patient yet";
}

interface JobsOpts {
  dataDir?: string;
  store?: string;
  json?: boolean;
}

/**
 * `dental-elig jobs`: what the job store holds, for the person looking after the service: each
 * check's state, what it waits for and its last error; retry a check; replay a stored message.
 * Rows carry ids and states, not patient names (`--json` on `show` gives the whole check).
 */
export function registerJobs(program: Command, io: CliIo): void {
  const jobs = program.command('jobs').description('Inspect and act on the job store of `serve` (reads DENTAL_ELIG_DATA_DIR, DENTAL_ELIG_STORE and the config file serve reads)');
  const common = (c: Command, reads: readonly EnvVar[] = []) =>
    readsEnvironment(c, [ENV.dataDir, ENV.store, ENV.config, ...reads])
      .option('--data-dir <dir>', 'the data dir serve runs on (default .dental-elig/data)')
      .option('--store <location>', 'the job store serve uses: a SQLite file or postgres://user@host/db (password from PGPASSWORD or DENTAL_ELIG_STORE)')
      .option('--json', 'print JSON');

  // The failureKind column classifies a failed result by mappings/failure-kinds.json.
  common(jobs.command('list').description('Every check with its state, and the bookings awaiting the patient\'s insurance or a correction of their details'), [ENV.mappings])
    .option('--state <state>', `only checks in this state (${CheckState.options.join(', ')}), or a booking's: ${WAITING[0]} (the patient's insurance) or ${WAITING[1]} (a correction of the patient's details)`)
    .option('--for-a-person', 'only checks needing attention or dead that no person has dismissed (what dental_elig_checks_for_a_person counts)')
    .option('--clinic <clinicId>', "only this clinic's checks")
    .action(async (opts: JobsOpts & { state?: string; forAPerson?: boolean; clinic?: string }, command: Command) => {
      if (opts.forAPerson && opts.state !== undefined) throw new CliError('jobs list: give --state or --for-a-person, not both', 2);
      // Read before the store, as serve reads it at start: a copy of mappings/ it cannot use is said, not a blank column.
      failureKinds();
      return withStore(io, opts, command, async (store) => {
        const onlyWaiting = opts.state !== undefined && isWaiting(opts.state);
        const states = opts.forAPerson ? [...FOR_A_PERSON] : opts.state === undefined || onlyWaiting ? undefined : [parseState(opts.state, [...WAITING])];
        const listed = onlyWaiting ? [] : await store.listChecks(states ? { states } : {});
        // Which office each check is for: a group's offices share one serve, each with its own credentials.
        const checks = listed.filter((c) => !(opts.forAPerson && dismissed(c)) && (opts.clinic === undefined || c.check.clinicId === opts.clinic));
        const waitingIn = states !== undefined ? [] : opts.state !== undefined && isWaiting(opts.state) ? [opts.state] : WAITING;
        const waiting = (await Promise.all(waitingIn.map((status) => store.listAppointments(status)))).flat().filter((a) => opts.clinic === undefined || clinicOf(a) === opts.clinic);
        if (checks.length === 0 && waiting.length === 0) await refuseUnknown(store, opts);
        const rows = [
          ...checks.map((c) => ({ job: c.key, state: c.state as string, ...(dismissed(c) && { dismissed: true }), clinic: c.check.clinicId, payer: payerOf(c), dateOfService: c.check.dateOfService, attempts: c.attempts, due: c.dueAt, outcome: outcomeOf(c), failureKind: failureKindOfCheck(c), lastError: c.lastError })),
          ...waiting.map((a) => ({ job: a.key, state: a.status as string, clinic: clinicOf(a), payer: undefined, dateOfService: a.dateOfService, attempts: 0, due: undefined, outcome: undefined, failureKind: undefined, lastError: waitingFor(a) })),
        ];
        printRows(io, rows, [
          ['JOB', (r) => r.job],
          ['STATE', (r) => ('dismissed' in r ? `${r.state} (dismissed)` : r.state)],
          ['CLINIC', (r) => r.clinic],
          ['PAYER', (r) => r.payer],
          ['DATE OF SERVICE', (r) => r.dateOfService],
          ['ATTEMPTS', (r) => r.attempts],
          ['OUTCOME', (r) => (r.failureKind ? `${r.outcome} (${r.failureKind})` : r.outcome)],
          ['NEXT', (r) => r.due],
          ['LAST ERROR', (r) => r.lastError],
        ], Boolean(opts.json));
      });
    });

  common(jobs.command('show').argument('<job>', 'a check key (elig_…) from jobs list').description('One check: state, attempts, verification, chart resources'))
    .action(async (key: string, opts: JobsOpts, command: Command) =>
      withStore(io, opts, command, async (store) => {
        const { row, booking, why } = await store.transaction(async (tx) => {
          const check = await tx.getCheck(key);
          if (check) return { row: check };
          const appointment = await tx.getAppointment(key);
          return appointment && isWaiting(appointment.status) ? { booking: appointment } : { why: await noCheck(tx, key) };
        });
        // A booking awaiting insurance is listed by jobs list under its own key: shown as listed, what it waits for.
        if (booking) {
          const shown = { job: booking.key, state: booking.status, clinic: clinicOf(booking), dateOfService: booking.dateOfService, waitingFor: waitingFor(booking), updated: booking.updatedAt };
          return printRecord(io, opts.json ? { ...shown, checks: booking.checkKeys } : shown, Boolean(opts.json));
        }
        if (!row) throw new CliError(`jobs show: ${why?.message ?? `no check with key ${key}`}`);
        if (opts.json) return printRecord(io, row as unknown as Record<string, unknown>, true);
        printRecord(io, {
          job: row.key,
          state: row.state,
          clinic: row.check.clinicId,
          payer: payerOf(row),
          order: row.check.coverage.order,
          dateOfService: row.check.dateOfService,
          round: row.round,
          externalId: row.externalId,
          mode: row.mode,
          portal: row.portalId,
          correlationId: row.correlationId,
          reusedFrom: row.reusedFrom,
          attempts: row.attempts,
          outcome: outcomeOf(row),
          resultAt: row.resultAt,
          written: row.written ? `CoverageEligibilityRequest/${row.written.requestId}, CoverageEligibilityResponse/${row.written.responseId}` : undefined,
          next: row.dueAt,
          lastError: row.lastError,
          dismissed: dismissed(row) ? row.dismissedAt : undefined,
          warnings: row.check.warnings?.join('; '),
          created: row.createdAt,
          updated: row.updatedAt,
        }, false);
      }),
    );

  common(jobs.command('retry').argument('[job...]', 'check keys from jobs list').description(`Verify checks again now (${RETRYABLE_STATES.join(', ')}): the ones named, or every one in a state`), [ENV.mappings])
    .option('--state <state>', `instead of naming checks: every check in this state (${RETRYABLE_STATES.join(', ')})`)
    .option('--failure-kind <kind>', 'with --state: only those whose result failed with this kind, e.g. InvalidCredentials after the portal credentials were fixed (mappings/failure-kinds.json)')
    .option('--portal <portalId>', 'with --state: only those sent to this portal')
    .option('--clinic <clinicId>', "with --state: only this clinic's (stored credentials are a clinic's on a portal)")
    .action(async (keys: string[], opts: JobsOpts & RetrySelection, command: Command) =>
      withStore(io, opts, command, async (store) => {
        if (keys.length > 0 && (opts.state ?? opts.failureKind ?? opts.portal ?? opts.clinic) !== undefined) throw new CliError('jobs retry: name the checks or select them with --state, not both', 2);
        const selected = keys.length > 0 ? keys : await retrySelection(store, opts);
        if (selected.length === 0) await refuseUnknown(store, opts);
        const { done: retried, refused } = await eachAlone(selected, (key) => retryCheck(store, key, storeTime(store)));
        if (opts.json) io.stdout.write(`${JSON.stringify(retried.map((row) => ({ job: row.key, state: row.state, round: row.round, externalId: row.externalId })), null, 2)}\n`);
        else for (const row of retried) io.stdout.write(`${row.key}: ${row.state === 'result-stored' ? 'its result, which the chart refused, to be written again' : 'received again'} (round ${row.round}); a running serve picks it up\n`);
        if (keys.length === 0 && !opts.json) io.stdout.write(`${retried.length} ${retried.length === 1 ? 'check' : 'checks'} retried\n`);
        if (refused.length > 0) throw refusal(refused);
      }),
    );

  common(jobs.command('replay').argument('<message>', 'a message id (jobs messages / jobs list --json)', whole('message')).description('Handle a stored message again: an HL7 one (a dead letter after a mapping fix), or a FHIR dead letter once the chart allows what it refused'), REPLAY_ENV)
    .action(async (id: number, opts: JobsOpts, command: Command) =>
      withStore(io, opts, command, async (store, fromFile) => {
        // Scheduled as serve schedules it: its freshness and re-verification settings, from the same config file.
        const routing = loadClinicRouting();
        const policy = schedulePolicy(fromFile.settings ?? SyncSettings.parse({}), routing);
        // The chart as serve reads it, for a FHIR letter only: an HL7 replay needs none.
        const reader = async () => {
          const chart = chartSettings(io.env, fromFile);
          if (!chart) throw new ConfigError("DENTAL_ELIG_FHIR_URL: not set (nor fhirUrl in the config file); a FHIR letter's replay reads the chart serve reads");
          return chartReader(chart);
        };
        const done = await replayMessage(store, id, { mappings: loadHl7Mappings(), routing, now: () => storeTime(store), policy, reader });
        if (done.kind === 'hl7') {
          if (opts.json) printRecord(io, { message: id, acks: done.ackCodes }, true);
          else io.stdout.write(`message ${id}: handled again, ACK ${done.ackCodes.join('+')}\n`);
          // Refused again: a script replaying dead letters after a mapping fix must see that this one is not fixed.
          const refused = done.ackCodes.filter((code) => code !== 'AA' && code !== 'CA');
          if (refused.length > 0) throw new CliError(`jobs replay: message ${id} was answered ${refused.join('+')} again; its replay is kept as a dead letter (jobs messages --dead)`);
          return;
        }
        if ('refused' in done) throw new CliError(`jobs replay: message ${id} was refused again (${done.refused}); it is kept as a dead letter (jobs messages --dead)`);
        if (opts.json) printRecord(io, { message: id, read: done.read, fresh: done.fresh }, true);
        else io.stdout.write(`message ${id}: replayed, ${done.read}${done.fresh ? '' : ' (nothing new: handled before)'}\n`);
      }),
    );

  common(
    jobs
      .command('dismiss')
      .argument('<item...>', 'dead letters by message id (jobs messages --dead), checks needing attention or dead by key (elig_…, jobs list)')
      .description(
        'Let go of what a person has dealt with: a dead letter they will not replay becomes handled (the store prunes it once received more than retentionDays ago); a check needing attention or dead no longer waits for a person until it changes',
      ),
  ).action(async (items: string[], opts: JobsOpts, command: Command) =>
    withStore(io, opts, command, async (store) => {
      // A booking's key (hl7|…, fhir|…), as jobs list gives one awaiting insurance, is told why it is not dismissed.
      const bad = items.find((item) => !/^\d+$/.test(item) && !item.startsWith('elig_') && !/^(hl7|fhir)\|/.test(item));
      if (bad !== undefined) throw new CliError('jobs dismiss: give message ids (whole numbers, jobs messages --dead) or check keys (elig_…, jobs list)', 2);
      const now = storeTime(store);
      // Message ids as numbers, check keys as text, as jobs messages and jobs list give them.
      const { done, refused } = await eachAlone(items, async (item): Promise<number | string> =>
        /^\d+$/.test(item) ? (await dismissMessage(store, Number(item)), Number(item)) : (await dismissCheck(store, item, now)).key,
      );
      if (opts.json) io.stdout.write(`${JSON.stringify(done)}\n`);
      else for (const item of done) io.stdout.write(`${typeof item === 'number' ? `message ${item}` : item}: dismissed\n`);
      if (refused.length > 0) throw refusal(refused);
    }),
  );

  common(jobs.command('messages').description('Messages as received (HL7, webhooks, FHIR notifications), and whether jobs replay takes them; dead letters first'))
    .option('--dead', 'only dead letters')
    .action(async (opts: JobsOpts & { dead?: boolean }, command: Command) =>
      withStore(io, opts, command, async (store) => {
        const messages = await store.listMessages(opts.dead ? { status: 'dead' } : {});
        const rows = messages.map(({ raw: _raw, answer: _answer, ...m }) => ({ ...m, replayable: notReplayed(m) === undefined }));
        printRows(io, rows, [
          ['ID', (m) => m.id],
          ['KIND', (m) => m.kind],
          ['STATUS', (m) => m.status],
          ['REPLAY', (m) => (m.replayable ? 'yes' : 'no')],
          ['RECEIVED', (m) => m.receivedAt],
          ['DETAIL', (m) => m.detail],
        ], Boolean(opts.json));
      }),
    );
}

/**
 * `act` on each of `items` in a transaction of its own: one serve moved on meanwhile (an
 * OperationError) is refused alone, the others done.
 */
async function eachAlone<T, R>(items: readonly T[], act: (item: T) => Promise<R>): Promise<{ done: R[]; refused: string[] }> {
  const done: R[] = [];
  const refused: string[] = [];
  for (const item of items) {
    try {
      done.push(await act(item));
    } catch (err) {
      if (!(err instanceof OperationError)) throw err;
      refused.push(err.message);
    }
  }
  return { done, refused };
}

/** The command's failure once the rest is done: the first refusal, and how many more. */
function refusal(refused: readonly string[]): CliError {
  return new CliError(`jobs: ${refused[0]}${refused.length > 1 ? ` (and ${refused.length - 1} more refused)` : ''}`);
}

/**
 * Why a store did not open: a system's or SQLite's code says it in a word (ECONNREFUSED,
 * SQLITE_NOTADB). PostgreSQL's is an SQLSTATE (28P01, 3D000), which says nothing to an operator
 * who mistyped the password or the database, so its message is given, as serve gives it
 * ('database "eligibilty" does not exist'); it names no password.
 */
function whyNotOpened(err: unknown): string | undefined {
  const code = err instanceof DatabaseError ? undefined : (err as NodeJS.ErrnoException).code;
  return code ?? (err instanceof Error ? err.message.split('\n')[0] : 'unreadable');
}

/**
 * Opens the job store serve runs on: the data dir and store from the options, the environment,
 * or the config file serve reads (`--config`, DENTAL_ELIG_CONFIG, ./dental-elig.config.json), in
 * that order, as serve takes them.
 */
async function withStore(io: CliIo, opts: JobsOpts, command: Command, run: (store: JobStore, fromFile: ConfigFile) => Promise<void>): Promise<void> {
  let fromFile: ConfigFile;
  let store: JobStore;
  try {
    fromFile = readConfigFile(io.env, command.optsWithGlobals<{ config?: string }>().config);
    // Empty, it was the working folder, where serve refuses it.
    const dir = path.resolve(dataDirSetting(io.env, opts.dataDir, fromFile)[1]);
    store = await openJobStore(storeLocation(io.env, opts.store, fromFile.store), dir, { create: false });
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new CliError(`jobs: cannot open the job store (${whyNotOpened(err)})`);
  }
  try {
    await run(store, fromFile);
  } catch (err) {
    if (err instanceof OperationError) throw new CliError(`jobs: ${err.message}`);
    throw err;
  } finally {
    await store.close();
  }
}

interface RetrySelection {
  state?: string;
  failureKind?: string;
  portal?: string;
  clinic?: string;
}

/**
 * The checks `jobs retry --state` names: every one in that state, narrowed by failure kind, portal
 * and clinic. A group's offices each have their own credentials on a portal: retrying the portal's
 * whole InvalidCredentials once one office's are fixed would log in again with another's still wrong.
 */
async function retrySelection(store: JobStore, opts: RetrySelection): Promise<string[]> {
  if (opts.state === undefined) {
    const narrowing = opts.failureKind !== undefined ? '--failure-kind' : opts.portal !== undefined ? '--portal' : opts.clinic !== undefined ? '--clinic' : undefined;
    throw new CliError(narrowing ? `jobs retry: ${narrowing} narrows --state; give --state too` : 'jobs retry: name the checks to retry, or give --state to retry every check in a state', 2);
  }
  const state = parseState(opts.state);
  if (!RETRYABLE_STATES.includes(state)) throw new CliError(`--state: ${state} checks are not retried (${RETRYABLE_STATES.join(', ')})`, 2);
  const rows = await store.listChecks({ states: [state] });
  const kind = opts.failureKind;
  // Each result read once: a failed one is a verification body, parsed to find its kind.
  const kinds = kind === undefined ? [] : rows.map(failureKindOfCheck);
  // A kind the table does not list may still be one the service sent (kept as given): refused only when no check failed with it either.
  if (kind !== undefined && !(kind in failureKinds()) && !kinds.includes(kind)) {
    throw new CliError(`--failure-kind: ${kind.slice(0, 40)} is no kind in mappings/failure-kinds.json, and no ${state} check failed with it`, 2);
  }
  return rows
    .filter((row, i) => (opts.portal === undefined || row.portalId === opts.portal) && (opts.clinic === undefined || row.check.clinicId === opts.clinic) && (kind === undefined || kinds[i] === kind))
    .map((row) => row.key);
}

/**
 * A --clinic or --portal that selected nothing is refused when nothing in the store names it (nor,
 * for a clinic, mappings/clinics.json): a typo would list "(none)", or retry "0 checks", and exit 0,
 * and the person on call would take the night's failures of that office for cleared.
 */
async function refuseUnknown(store: JobStore, opts: { clinic?: string; portal?: string }): Promise<void> {
  if (opts.clinic === undefined && opts.portal === undefined) return;
  const checks = await store.listChecks({});
  if (opts.clinic !== undefined) {
    const { clinic } = opts;
    const routing = loadClinicRouting();
    const known =
      routing.defaultClinicId === clinic ||
      routing.routes.some((r) => r.clinicId === clinic) ||
      checks.some((c) => c.check.clinicId === clinic) ||
      (await store.listAppointments()).some((a) => clinicOf(a) === clinic);
    if (!known) throw new CliError(`--clinic: ${clinic.slice(0, 40)} is no clinic of mappings/clinics.json nor of any check in the job store`, 2);
  }
  if (opts.portal !== undefined && !checks.some((c) => c.portalId === opts.portal)) {
    throw new CliError(`--portal: no check in the job store was sent to ${opts.portal.slice(0, 40)} (jobs show names a check's portal)`, 2);
  }
}

/** `also`: what the option takes beside a check's state, named with them when the text is neither. */
function parseState(text: string, also: string[] = []): CheckState {
  const parsed = CheckState.safeParse(text);
  if (!parsed.success) throw new CliError(`--state: ${text.slice(0, 30)} is not a state (${[...CheckState.options, ...also].join(', ')})`, 2);
  return parsed.data;
}

function payerOf(row: CheckRow): string | undefined {
  return row.check.coverage.payer.name ?? row.check.coverage.payer.id;
}

function outcomeOf(row: CheckRow): string | undefined {
  const status = (row.result as { status?: unknown } | undefined)?.status;
  return typeof status === 'string' ? outcomeKindOf(status) : undefined;
}

/** Now by the clock serve's instances go by: a retry made due by this machine's, behind the database's, would wait for it. */
function storeTime(store: JobStore): Date {
  return store.now?.() ?? new Date();
}

/** The kind of a check's failed result (InvalidCredentials, PatientNotFound, …), as the worker classified it. */
function failureKindOfCheck(row: CheckRow): string | undefined {
  if (outcomeOf(row) !== 'failed') return undefined;
  // A result kept as the service sent it, unreadable, has no kind to match.
  const outcome = storedOutcome(row.result);
  return outcome && failureKindIn(outcome);
}
