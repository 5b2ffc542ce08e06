import { createHash } from 'node:crypto';
import { FHIR_ID } from '../adapters/fhir/in/bundle-index';
import type { FhirChange } from './ingest-fhir';
import type { JobStore, MessageKind } from './job-store';

/**
 * Keeps what arrived but could not be used (an unreadable HL7 frame, webhook or notification),
 * raw, with what was wrong: never lost, visible in `jobs messages --dead`, replayable. Each is
 * its own row, even when the same bytes come again, but for one kept `once` under a key: what a
 * poll meets at every round is one letter, not one a round. False when that one was kept before.
 */
export async function deadLetter(store: JobStore, letter: { kind: MessageKind; raw: string; reason: string; receivedAt: Date; once?: string }): Promise<boolean> {
  const at = letter.receivedAt.toISOString();
  const digest = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 16);
  const dedupeKey = letter.once === undefined ? `dead:${at}:${digest(`${letter.raw}${process.hrtime.bigint()}`)}` : `dead:once:${digest(letter.once)}`;
  return store.transaction(async (tx) => {
    const { message, duplicate } = await tx.addMessage({ kind: letter.kind, dedupeKey, receivedAt: at, raw: letter.raw, status: 'dead' });
    if (duplicate) return false;
    await tx.updateMessage(message.id, { status: 'dead', detail: letter.reason });
    return true;
  });
}

/**
 * The reason a FHIR letter keeps for a resource the chart refused (a notification's, a poll's
 * appointment): it names the resource first, as the one its replay reads again.
 */
export function refusedOn(change: FhirChange, err: Error): string {
  return `${change.type}/${change.id}: ${err.message}`;
}

const NAMED_CHANGE = /^(Appointment|Patient|Coverage)\/([^:/]+): /;

/**
 * A FHIR letter's detail for a log line: the id it names left out wherever it stands, as a chart's
 * ids may be made of what they are of (pat-marco) and a log takes no patient data, as the checks'
 * keys in it are hashes; jobs messages --dead has the detail whole.
 */
export function detailForLog(detail: string): string {
  const id = NAMED_CHANGE.exec(detail)?.[2];
  if (!id) return detail;
  // The id alone, not the same characters inside a longer word or number (an id 1 in a status 401).
  return detail.replace(new RegExp(`(?<![A-Za-z0-9.-])${id.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?![A-Za-z0-9.-])`, 'g'), '(id)');
}

/** The resource a FHIR letter's detail names first (refusedOn), which `jobs replay` reads again; none for one the chart refused nothing of. */
export function changeOf(detail: string | undefined): FhirChange | undefined {
  const named = NAMED_CHANGE.exec(detail ?? '');
  // An id the chart could not be read by (`.`, a path) names nothing to read again.
  return named && FHIR_ID.test(named[2] as string) ? { type: named[1] as FhirChange['type'], id: named[2] as string } : undefined;
}
