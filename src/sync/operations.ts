import { externalIdFor } from './schedule';
import type { CheckRow, JobStore } from './job-store';
import { ingestHl7, type Hl7IngestOptions } from './ingest-hl7';

/** States a person may send back to work: what waits for them, what gave up, what was withdrawn. */
export const RETRYABLE_STATES: readonly CheckRow['state'][] = ['needs-attention', 'dead', 'cancelled', 'written'];

/**
 * Sends a check to the service again as a new verification (a new round and externalId: the
 * service keeps the old one's answer under the old id), due now.
 */
export async function retryCheck(store: JobStore, key: string, now: Date): Promise<CheckRow> {
  return store.transaction(async (tx) => {
    const row = await tx.getCheck(key);
    if (!row) throw new OperationError(`no check with key ${key}`);
    if (!RETRYABLE_STATES.includes(row.state)) throw new OperationError(`check ${key} is ${row.state}; a check is retried when it is ${RETRYABLE_STATES.join(', ')}`);
    const round = row.round + 1;
    // The last round's result goes with it: until the new one comes, the check has none (jobs list showed the old outcome).
    const { correlationId: _c, lastError: _e, submittedAt: _s, reusedFrom: _r, result: _result, resultAt: _at, ...rest } = row;
    const next: CheckRow = { ...rest, state: 'received', round, externalId: externalIdFor(row.key, row.fingerprint, round), attempts: 0, dueAt: now.toISOString(), updatedAt: now.toISOString() };
    await tx.putCheck(next);
    return next;
  });
}

/**
 * Handles a stored HL7 message again, as if it had just arrived (after a mapping was fixed, say):
 * a dead letter gets its chance, and the earlier copy is marked as replayed.
 */
export async function replayMessage(store: JobStore, id: number, options: Hl7IngestOptions): Promise<{ ackCodes: string[] }> {
  const message = await store.getMessage(id);
  if (!message) throw new OperationError(`no message with id ${id}`);
  if (message.kind !== 'hl7') throw new OperationError(`message ${id} is a ${message.kind}; only HL7 messages are replayed (a webhook is delivered again by the service)`);
  const done = await ingestHl7(store, message.raw, { ...options, replayOf: id });
  return { ackCodes: done.acks.map((a) => a.code) };
}

/** A request an operator made that cannot be done; its message names the key or id, never patient data. */
export class OperationError extends Error {}
