import { createHash } from 'node:crypto';
import { FHIR_ID } from '../adapters/fhir/in/bundle-index';
import type { FhirChange } from './ingest-fhir';
import type { JobStore, MessageKind, StoreTx } from './job-store';

/**
 * Keeps what arrived but could not be used (an unreadable HL7 frame, webhook or notification),
 * raw, with what was wrong: never lost, visible in `jobs messages --dead`, replayable. Each is
 * its own row, even when the same bytes come again, but for one kept `once` under a key: what a
 * poll meets at every round is one letter, not one a round. False when that one was kept before.
 */
export async function deadLetter(store: JobStore, letter: { kind: MessageKind; raw: string; reason: string; receivedAt: Date; once?: string }): Promise<boolean> {
  const at = letter.receivedAt.toISOString();
  const dedupeKey = letter.once === undefined ? `dead:${at}:${digest(`${letter.raw}${process.hrtime.bigint()}`)}` : onceKey(letter.once);
  return store.transaction(async (tx) => {
    const { message, duplicate } = await tx.addMessage({ kind: letter.kind, dedupeKey, receivedAt: at, raw: letter.raw, status: 'dead' });
    if (duplicate) return false;
    await tx.updateMessage(message.id, { status: 'dead', detail: letter.reason });
    return true;
  });
}

const digest = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 16);
const onceKey = (once: string) => `dead:once:${digest(once)}`;

/** What a notification answered 500 is kept once under: a day's tries of the same path and body (an id-only one's are the same at the next change). */
const unhandledOnce = (day: string, url: string, raw: string) => `${day}|${url}|${raw}`;
/** Said after the reason of a letter a resend was handled for. */
const HANDLED_WHEN_SENT_AGAIN = '; handled when sent again at ';

/**
 * A FHIR notification answered 500 (the chart out of reach), the sender asked to send it again:
 * kept as a dead letter in case it never does, once a day for the same path and body, and dead
 * again should one a resend resolved (resolveResent) or a person dismissed fail anew. False when
 * kept before and still dead.
 */
export async function keepUnhandled(store: JobStore, letter: { url: string; raw: string; kept: string; reason: string; receivedAt: Date }): Promise<boolean> {
  const at = letter.receivedAt.toISOString();
  const dedupeKey = onceKey(unhandledOnce(at.slice(0, 10), letter.url, letter.raw));
  return store.transaction(async (tx) => {
    const { message, duplicate } = await tx.addMessage({ kind: 'fhir-notification', dedupeKey, receivedAt: at, raw: letter.kept, status: 'dead' });
    // Let go of (a person dismissed it too, as a check is, once its outage seemed over): a try failing since is news no one
    // has seen, which the sender may never send again; kept as the letter before it was, it had no letter and no error line.
    if (duplicate && message.status === 'dead') return false;
    await tx.updateMessage(message.id, { status: 'dead', detail: letter.reason });
    return true;
  });
}

/**
 * A notification handled that was answered 500 earlier, today or yesterday (a sender tries again
 * for hours): its letter is moot, and handled, saying so. Else each notification of a chart's
 * outage would stay in dental_elig_dead_letters, an alert firing, until a person dismissed it,
 * though nothing is left to do. How many were.
 */
export async function resolveResent(store: JobStore, sent: { url: string; raw: string; handledAt: Date }): Promise<number> {
  const at = sent.handledAt.toISOString();
  const days = [at.slice(0, 10), new Date(sent.handledAt.getTime() - 86_400_000).toISOString().slice(0, 10)];
  return store.transaction(async (tx) => {
    let resolved = 0;
    for (const day of days) {
      const letter = await tx.findMessage('fhir-notification', onceKey(unhandledOnce(day, sent.url, sent.raw)));
      if (letter?.status !== 'dead') continue;
      await tx.updateMessage(letter.id, { status: 'handled', detail: `${letter.detail ?? ''}${HANDLED_WHEN_SENT_AGAIN}${at}` });
      resolved++;
    }
    return resolved;
  });
}

/** Said after the reason of a letter whose resource was read again and handled. */
const HANDLED_WHEN_READ_AGAIN = '; handled when read again at ';

/**
 * The letters that refused a FHIR resource (refusedOn names it first), dead still, once it is
 * read again and handled (the chart's data corrected, and a change of the patient or a coverage,
 * a later notification or a poll read it): moot, and handled, saying so, as a replay of them
 * would have left them. Else each stayed in dental_elig_dead_letters, an alert firing, until a
 * person dismissed it. How many were.
 */
export async function resolveRefused(tx: StoreTx, change: FhirChange, handledAt: Date): Promise<number> {
  const letters = await tx.deadLettersNaming(`${change.type}/${change.id}: `);
  for (const letter of letters) await tx.updateMessage(letter.id, { status: 'handled', detail: `${letter.detail ?? ''}${HANDLED_WHEN_READ_AGAIN}${handledAt.toISOString()}` });
  return letters.length;
}

/**
 * The reason a FHIR letter keeps for a resource the chart refused (a notification's, a poll's
 * appointment): it names the resource first, as the one its replay reads again.
 */
export function refusedOn(change: FhirChange, err: Error): string {
  return `${change.type}/${change.id}: ${err.message}`;
}

const NAMED_CHANGE = /^(Appointment|Patient|Coverage|RelatedPerson)\/([^:/]+): /;

/**
 * A FHIR letter's detail for a log line: the id it names left out wherever it stands, as a chart's
 * ids may be made of what they are of (pat-marco) and a log takes no patient data, as the checks'
 * keys in it are hashes; jobs messages --dead has the detail whole.
 */
export function detailForLog(detail: string): string {
  const id = NAMED_CHANGE.exec(detail)?.[2];
  // The id alone, not the same characters inside a longer word or number (an id 1 in a status 401).
  const named = id ? detail.replace(new RegExp(`(?<![A-Za-z0-9.-])${id.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?![A-Za-z0-9.-])`, 'g'), '(id)') : detail;
  // And every other of a patient's resources it names: a notification's Appointment the chart could
  // not be read into names the Patient it lacks ('references Patient/pat-ellen, which the bundle does not hold'),
  // and one of its Coverages wrong names that one by its id in a FHIRPath (`Coverage.where(id='cov-ellen').period`).
  return named.replace(PATIENTS_REFERENCE, '$1/(id)').replace(WHERE_ID, ".where(id='(id)')");
}

/** A reference to a resource of a patient's, its id made of what it is of as often as not. */
const PATIENTS_REFERENCE = /\b(Appointment|Patient|RelatedPerson|Coverage)\/[A-Za-z0-9\-.]{1,64}(?![A-Za-z0-9\-.])/g;
/** A resource named by its id in a FHIRPath, as BundleIndex.pathOf names a Coverage wrong. */
const WHERE_ID = /\.where\(id='[^']*'\)/g;

/** The resource a FHIR letter's detail names first (refusedOn), which `jobs replay` reads again; none for one the chart refused nothing of. */
export function changeOf(detail: string | undefined): FhirChange | undefined {
  const named = NAMED_CHANGE.exec(detail ?? '');
  // An id the chart could not be read by (`.`, a path) names nothing to read again.
  return named && FHIR_ID.test(named[2] as string) ? { type: named[1] as FhirChange['type'], id: named[2] as string } : undefined;
}
