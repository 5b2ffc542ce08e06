import type { FhirReader } from '../adapters/fhir/in';
import { FhirInputError } from '../adapters/fhir/operation-outcome';
import { externalIdAgain } from './schedule';
import { CHART_REFUSED } from './chart-errors';
import { changeOf, refusedOn } from './dead-letters';
import { errorText } from './error-text';
import { dismissed, FOR_A_PERSON, resultKindOf, type CheckRow, type JobStore, type MessageRow, type StoreTx } from './job-store';
import { ingestFhirChange, type FhirChange, type FhirIngested } from './ingest-fhir';
import { ingestHl7, type Hl7IngestOptions } from './ingest-hl7';

/** States a person may send back to work: what waits for them, what gave up, what was withdrawn. */
export const RETRYABLE_STATES: readonly CheckRow['state'][] = ['needs-attention', 'dead', 'cancelled', 'written'];

/**
 * Sends a check to the service again as a new verification (a new round and externalId: the
 * service keeps the old one's answer under the old id; but for one given up unverified, which goes
 * under its round's, externalIdAgain), due now; but one whose result (not a
 * failure: refusedByChart) the chart refused, a token expired or a permission, has that result
 * written again: it is as good as when it came, and verified again it would cost a verification a
 * check, for every check of the chart's outage.
 */
export async function retryCheck(store: JobStore, key: string, now: Date): Promise<CheckRow> {
  return store.transaction(async (tx) => {
    const row = await tx.getCheck(key);
    if (!row) throw await noCheck(tx, key);
    if (!RETRYABLE_STATES.includes(row.state)) throw new OperationError(`check ${key} is ${row.state}; a check is retried when it is ${RETRYABLE_STATES.join(', ')}`);
    const next = refusedByChart(row) ? writeAgain(row, now) : nextRound(row, now);
    await tx.putCheck(next);
    return next;
  });
}

/**
 * Retries a check the worker read, if it is still as read (its state and round): one retried
 * since (by an operator's jobs retry, or by another instance), or moved on, is left as it is, not
 * sent a second time; nor one whose visit no longer needs it, withdrawn while its failure was on
 * its way to the chart (withdrawnBecause). Whether it was retried.
 */
export async function retryAsRead(store: JobStore, read: Pick<CheckRow, 'key' | 'state' | 'round'>, now: Date): Promise<boolean> {
  return store.transaction(async (tx) => {
    const row = await tx.getCheck(read.key);
    if (row?.state !== read.state || row.round !== read.round || row.withdrawnBecause !== undefined) return false;
    await tx.putCheck(nextRound(row, now));
    return true;
  });
}

/**
 * Whether the check waits for a person because the chart refused its result, which it still holds
 * and is worth writing again: a verification's answer. A failure is verified again as before: this
 * plugin's own (NotVerified: the service was out) verified nothing, and one of the service's is what
 * `--failure-kind` names to send again once it is fixed (the credentials, say); written again, the
 * front desk would read that failure after the fix, and the check would wait for a second retry.
 */
function refusedByChart(row: CheckRow): boolean {
  return row.state === 'needs-attention' && row.result !== undefined && resultKindOf(row) !== 'failed' && (row.lastError?.startsWith(`${CHART_REFUSED}: `) ?? false);
}

/** The check with its result to write again, due now. */
function writeAgain(row: CheckRow, now: Date): CheckRow {
  const { lastError: _e, dismissedAt: _d, ...rest } = row;
  return { ...rest, state: 'result-stored', attempts: 0, dueAt: now.toISOString(), updatedAt: now.toISOString() };
}

/** The check as a new verification, due now; one given up unverified is sent under its round's externalId (externalIdAgain). */
function nextRound(row: CheckRow, now: Date): CheckRow {
  const round = row.round + 1;
  // The last round's result goes with it: until the new one comes, the check has none (jobs list showed the old outcome).
  const { correlationId: _c, lastError: _e, submittedAt: _s, reusedFrom: _r, result: _result, resultAt: _at, dismissedAt: _d, ...rest } = row;
  return { ...rest, state: 'received', round, externalId: externalIdAgain(row, round, now), attempts: 0, dueAt: now.toISOString(), updatedAt: now.toISOString() };
}

export interface ReplayOptions extends Omit<Hl7IngestOptions, 'replayOf'> {
  /** The chart, read again for a FHIR letter: opened only for one. */
  reader?: () => Promise<FhirReader>;
  /** Hears of each appointment a FHIR letter's replay read (a running sync kicks its worker). */
  ingested?: (done: FhirIngested) => void;
}

/** An HL7 message's ACK codes; a FHIR letter's words for what was read, or why the chart refused it again. */
export type Replayed = { kind: 'hl7'; ackCodes: string[] } | { kind: 'fhir-notification'; read: string; fresh: boolean } | { kind: 'fhir-notification'; refused: string };

/**
 * Handles a stored message again, as if it had just arrived: an HL7 message after a mapping was
 * fixed, say (a dead letter gets its chance, and the earlier copy is marked as replayed); a FHIR
 * letter once the chart lets the resource it refused be read (a key, a permission fixed): that
 * resource is read again as its notification or poll read it, and the letter marked handled.
 */
export async function replayMessage(store: JobStore, id: number, options: ReplayOptions): Promise<Replayed> {
  const message = await store.getMessage(id);
  if (!message) throw new OperationError(`no message with id ${id}`);
  if (message.kind === 'hl7') {
    const done = await ingestHl7(store, message.raw, { ...options, replayOf: id });
    return { kind: 'hl7', ackCodes: done.acks.map((a) => a.code) };
  }
  const change = message.kind === 'fhir-notification' ? changeOf(message.detail) : undefined;
  if (!change) throw new OperationError(`message ${id} ${notReplayed(message)}`);
  return replayFhirLetter(store, message, change, options);
}

/** Why `jobs replay` does not take this message; undefined when it does. */
export function notReplayed(message: Pick<MessageRow, 'kind' | 'detail'>): string | undefined {
  if (message.kind === 'webhook') return 'is a webhook; the service delivers it again';
  if (message.kind === 'fhir-notification' && changeOf(message.detail) === undefined) {
    return 'is a FHIR notification that names no resource the chart refused (one unreadable, or one the sender was asked to send again)';
  }
  return undefined;
}

/**
 * The resource a FHIR letter names, read again through the road its notification took: what was
 * handled meanwhile (a later notification, the poll) is a duplicate and verifies nothing again.
 * Refused again, the letter stays, with the chart's latest answer; the chart out of reach, it
 * stays as it was.
 */
async function replayFhirLetter(store: JobStore, letter: MessageRow, change: FhirChange, options: ReplayOptions): Promise<Replayed> {
  if (!options.reader) throw new OperationError(`message ${letter.id} is a FHIR notification, whose replay reads the chart: no FHIR reader was given`);
  let fresh = false;
  const ingested = (done: FhirIngested) => {
    fresh ||= !done.duplicate;
    options.ingested?.(done);
  };
  const reader = await options.reader();
  let read: string;
  try {
    read = await ingestFhirChange(store, reader, change, { ...options, raw: letter.raw, ingested });
  } catch (err) {
    if (!(err instanceof FhirInputError)) throw new OperationError(`message ${letter.id} was not replayed (${errorText(err)}); it is kept: replay it once the chart answers`);
    const refused = refusedOn(change, err);
    await store.transaction((tx) => tx.updateMessage(letter.id, { detail: refused }));
    return { kind: 'fhir-notification', refused };
  }
  // Its detail still names the resource first: replayed again, it is read again (a duplicate, once handled).
  await store.transaction((tx) => tx.updateMessage(letter.id, { status: 'handled', detail: `${read} (replayed)` }));
  return { kind: 'fhir-notification', read, fresh };
}

/**
 * A person lets go of a dead letter they will not replay (a message type the PMS should not send,
 * a test message): handled, its detail saying so, the store's prune takes it once it was received
 * more than the retention period ago (at the next prune, for one as old as that already). A check
 * is dismissed otherwise (dismissCheck).
 */
export async function dismissMessage(store: JobStore, id: number): Promise<void> {
  const message = await store.getMessage(id);
  if (!message) throw new OperationError(`no message with id ${id}`);
  if (message.status !== 'dead') throw new OperationError(`message ${id} is ${message.status}; a message is dismissed when it is a dead letter`);
  await store.transaction((tx) => tx.updateMessage(id, { status: 'handled', detail: `dismissed by a person (jobs dismiss): ${message.detail ?? 'a dead letter'}` }));
}

/**
 * A person has dealt with a check left to them (needs-attention or dead: the patient's benefits
 * verified by phone, say) and dismisses it: it stays as it is for the pipeline (a late result is
 * still applied, the next message for its visit handled as before, the prune takes it with its
 * visit), and it no longer counts as waiting for a person (dental_elig_checks_for_a_person, jobs
 * list) until it changes: a new round or result that fails again waits for a person anew.
 */
export async function dismissCheck(store: JobStore, key: string, now: Date): Promise<CheckRow> {
  return store.transaction(async (tx) => {
    const row = await tx.getCheck(key);
    if (!row) throw await noCheck(tx, key);
    if (!FOR_A_PERSON.includes(row.state)) throw new OperationError(`check ${key} is ${row.state}; a check is dismissed when it is ${FOR_A_PERSON.join(' or ')}`);
    if (dismissed(row)) throw new OperationError(`check ${key} is dismissed already`);
    const at = now.toISOString();
    const next = { ...row, dismissedAt: at, updatedAt: at };
    await tx.putCheck(next);
    return next;
  });
}

/** A request an operator made that cannot be done; its message names the key or id, never patient data. */
export class OperationError extends Error {}

/**
 * Why a key names no check: jobs list lists the bookings awaiting the patient's insurance beside
 * the checks, under their own keys (hl7|TSD-CHI|APT-20), and an operator takes a key from that
 * list to the next command; such a booking has no check yet to retry, dismiss or show.
 */
export async function noCheck(tx: StoreTx, key: string): Promise<OperationError> {
  const booking = await tx.getAppointment(key);
  if (booking?.status === 'awaiting-insurance') {
    return new OperationError(`${key} is a booking awaiting the patient's insurance, not a check: its checks are made once insurance in force on its date comes (an ADT or another booking from the PMS)`);
  }
  if (booking?.status === 'awaiting-correction') {
    return new OperationError(`${key} is a booking refused for the patient's details, not a check: its checks are made once an ADT from the PMS corrects them`);
  }
  return new OperationError(booking ? `${key} is a booking (${booking.status}), not a check: jobs list names its checks` : `no check with key ${key}`);
}
