import { createHash } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import * as z from 'zod';
import type { ClinicRouting } from '../adapters/clinic-routing';
import { appointmentStatusRule, convertFromServer, verifiedStatuses, willNotHappenStatuses, type FhirReader } from '../adapters/fhir/in';
import { FhirInputError } from '../adapters/fhir/operation-outcome';
import { changeOf, resolveRefused } from './dead-letters';
import type { AppointmentRow, AppointmentStatus, JobStore, MessageRow, StoreTx } from './job-store';
import { chartCoverageOf, endGoneCoverages, fingerprints, firstDateToCome, scheduleAppointment, stillToCome, type SchedulePolicy } from './schedule';

export interface FhirIngestOptions {
  routing: ClinicRouting;
  now: () => Date;
  policy: SchedulePolicy;
}

/** The little of an Appointment the pipeline reads before the adapter: parsed permissively. */
const AppointmentHead = z.looseObject({
  id: z.string().optional(),
  status: z.string().optional(),
  start: z.string().optional(),
  meta: z.looseObject({ versionId: z.string().optional(), lastUpdated: z.string().optional() }).optional(),
  participant: z.array(z.looseObject({ actor: z.looseObject({ reference: z.string().optional(), type: z.string().optional(), identifier: z.unknown().optional() }).optional() })).optional(),
});

export interface FhirIngested {
  appointment: string;
  /** not-verified: a status that neither verifies nor withdraws; the store's appointments are as they were. */
  status: AppointmentStatus | 'not-verified';
  created: string[];
  withdrawn: string[];
  duplicate: boolean;
}

/**
 * An Appointment on the chart's FHIR server into the store: read it, its patient and their
 * coverages (network first, outside any transaction), then store the notification and schedule
 * its checks in one transaction. An appointment whose patient has no active coverage yet waits as
 * awaiting-insurance and is read again on the next poll or notification. One in a status
 * mappings/fhir/appointment-status.json neither verifies nor withdraws is not stored. A read
 * that yields what the store's appointment was last stored by changes nothing (a notification sent
 * twice, a poll of an unchanged appointment); one that yields what an earlier read did, the chart
 * having put back since what it changed (readOf), is stored again. Reads during which another read of
 * the appointment was stored are made again, so that what is stored last is what the chart has last.
 */
export async function ingestFhirAppointment(store: JobStore, reader: FhirReader, appointmentId: string, options: FhirIngestOptions & { raw?: string }): Promise<FhirIngested> {
  const key = `fhir|Appointment/${appointmentId}`;
  for (let read = 1; ; read++) {
    const before = await store.transaction((tx) => tx.getAppointment(key));
    // Stored only while the store's appointment is as it was before the reads: another read of it stored meanwhile (a
    // notification or a poll beside this one) may have found a later version than these reads did, and storing these
    // after it would put back what the chart changed since, a cancellation undone, which its resending, a duplicate, would not mend.
    const unchanged = async (tx: StoreTx) => {
      if (!isDeepStrictEqual(await tx.getAppointment(key), before)) throw new StoredMeanwhile();
    };
    try {
      return await readAndStore(store, reader, appointmentId, options, unchanged);
    } catch (err) {
      if (!(err instanceof StoredMeanwhile)) throw err;
      if (read === READS_WHILE_STORED) throw new Error(`Appointment/${appointmentId}: stored by ${READS_WHILE_STORED} other reads of it while it was read`);
    }
  }
}

/** How often an appointment is read again when another read of it is stored first, before it is left to be tried again. */
const READS_WHILE_STORED = 5;

/** Thrown in a transaction to roll it back: another read of the appointment was stored since this one began. */
class StoredMeanwhile extends Error {}

/** One read of an appointment and what it needs, stored if `unchanged` lets it (ingestFhirAppointment). */
async function readAndStore(store: JobStore, reader: FhirReader, appointmentId: string, options: FhirIngestOptions & { raw?: string }, unchanged: (tx: StoreTx) => Promise<void>): Promise<FhirIngested> {
  const receivedAt = options.now();
  const found = await reader.read('Appointment', appointmentId);
  const reference = `Appointment/${appointmentId}`;
  if (found === undefined) return withdrawGone(store, appointmentId, receivedAt, options, unchanged);
  const head = AppointmentHead.parse(found);
  const version = head.meta?.versionId ?? head.meta?.lastUpdated ?? digestOf(found);
  const rule = appointmentStatusRule(head.status);
  if (rule === 'neither') return passOver(store, reference, head.status ?? '', version, receivedAt, options, unchanged);
  // Keyed by id alone, as a Patient or Coverage changed later names it: a versioned reference is the same patient.
  const patient = head.participant?.map((p) => patientIdOf(p.actor?.reference)).find((id) => id !== undefined);
  if (!patient) {
    // A Patient named by identifier alone is named, but not as the chart can be read by: say which.
    const byIdentifier = head.participant?.some((p) => p.actor?.type === 'Patient' && p.actor.identifier !== undefined && p.actor.reference === undefined);
    const diagnostics = byIdentifier ? 'names its Patient by identifier only: give a reference (Patient/<id>) the chart can be read by' : 'names no Patient';
    throw new FhirInputError([{ expression: 'Appointment.participant', diagnostics, code: 'required' }]);
  }
  const cancelled = rule === 'withdraw';
  const conversion = cancelled ? undefined : await convertFromServer(reader, appointmentId, { routing: options.routing, receivedAt: receivedAt.toISOString() });
  const checks = conversion?.checks ?? [];
  const status: AppointmentStatus = cancelled ? 'cancelled' : checks.length > 0 ? 'booked' : 'awaiting-insurance';
  // Under the record a merged one was merged into: its Coverages and Patient changes name that one.
  const patientKey = `fhir|${conversion?.patient ?? `Patient/${patient}`}`;
  const dateOfService = conversion?.dateOfService ?? head.start?.slice(0, 10) ?? '';
  // Checks depend on the patient and coverages too: an unchanged appointment whose patient's insurance
  // arrived, or whose birth date or member id was corrected, is new work; so is what of the chart's Coverage
  // scheduling follows without a new verification (chartCoverageChanged: its order, its payor Organization),
  // and what the store keeps of the appointment beside its checks (one waiting for insurance has none): the
  // record its patient was merged into, its day and its clinic.
  const stored = [patientKey, dateOfService, conversion?.clinicId ?? ''].join('|');
  const dedupeKey = `${reference}|${version}|${status}|${stored}|${checks.map((c) => `${c.idempotencyKey}:${fingerprints(c).fingerprint}:${chartCoverageOf(c)}`).join(',')}`;

  return store.transaction(async (tx) => {
    await unchanged(tx);
    const held = await tx.getAppointment(`fhir|${reference}`);
    if (conversion?.coverages !== undefined) {
      // The plans it held and holds: a cancelled check of one, read from a Coverage the patient no longer has, serves neither.
      const memberIds = new Set(checks.map((c) => c.subscriber.memberId));
      for (const key of held?.checkKeys ?? []) {
        const was = await tx.getCheck(key);
        if (was) memberIds.add(was.check.subscriber.memberId);
      }
      await endGoneCoverages(tx, patientKey, conversion.coverages, [...memberIds], receivedAt.toISOString());
    }
    const duplicate = readOf(held) === dedupeKey;
    // Read and handled, as new or as it was handled before (the chart put back what it refused since, a member id
    // deleted and typed in again): a letter that refused it is moot.
    await resolveRefused(tx, { type: 'Appointment', id: appointmentId }, receivedAt);
    if (duplicate) return { appointment: reference, status, created: [], withdrawn: [], duplicate: true };
    const message = await keepRead(tx, reference, dedupeKey, receivedAt, options.raw);
    const done = await scheduleAppointment(
      tx,
      {
        key: `fhir|${reference}`,
        patientKey,
        dateOfService,
        status,
        checks,
        // Its clinic, whose zone tells when the visit is over (stillToCome).
        basis: { reference, ...(conversion?.clinicId !== undefined && { clinicId: conversion.clinicId }), read: dedupeKey },
      },
      { now: receivedAt, policy: options.policy },
    );
    // What the chart got wrong that the checks go ahead without (an invalid NPI, a second patient): an HL7 sender hears it in its ACK.
    const warnings = [...new Set(checks.flatMap((c) => c.warnings ?? []))];
    await tx.updateMessage(message.id, { status: 'handled', detail: `${status}: ${checks.length} checks${warnings.length > 0 ? `; warnings: ${warnings.join('; ')}` : ''}` });
    return { appointment: reference, status, ...done, duplicate: false };
  });
}

/** What a notification names (a poll, an appointment): the road one resource is read by, and a dead letter's replay. */
export interface FhirChange {
  type: 'Appointment' | PersonChanged;
  id: string;
}

/** A resource whose change is read under appointments already booked (appointmentsOfChanged). */
export type PersonChanged = 'Patient' | 'Coverage' | 'RelatedPerson';

/**
 * One resource a notification names, read and ingested: an appointment; or, for a patient whose
 * details or coverages changed, their appointments held still to come (appointmentsOfChanged).
 * Says what was done, in words that begin with the resource. `readAbove`: appointments the same
 * notification names itself, read on their own; `ingested` hears of each appointment read.
 */
export async function ingestFhirChange(
  store: JobStore,
  reader: FhirReader,
  change: FhirChange,
  options: FhirIngestOptions & { raw?: string; readAbove?: readonly string[]; ingested?: (done: FhirIngested) => void },
): Promise<string> {
  const ingest = async (id: string) => {
    const done = await ingestFhirAppointment(store, reader, id, options);
    options.ingested?.(done);
    return `${done.appointment}: ${done.status}`;
  };
  if (change.type === 'Appointment') return ingest(change.id);
  const { patient, appointments } = await appointmentsOfChanged(store, reader, { type: change.type, id: change.id }, { now: options.now(), policy: options.policy });
  const reference = `${change.type}/${change.id}`;
  // A RelatedPerson is not read: only the Coverages naming it as subscriber are.
  const gone = patient || change.type === 'RelatedPerson' ? '' : 'the server no longer has it';
  const whose = change.type === 'RelatedPerson' ? 'verifying a Coverage it is the subscriber of' : `of ${patient}`;
  const read: string[] = [];
  for (const id of appointments) read.push(options.readAbove?.includes(id) ? `Appointment/${id}: read above` : await ingest(id));
  // It and each appointment of it read and handled (none, for a patient with no visit to come): what a letter naming the patient or coverage refused is so no more.
  await store.transaction((tx) => resolveRefused(tx, change, options.now()));
  if (appointments.length === 0) return `${reference}: ${gone || `no appointment ${whose} held from today on`}`;
  return `${reference}: ${gone ? `${gone}; ` : ''}${read.join(', ')}`;
}

/**
 * A proposed, waitlisted or fulfilled appointment: no visit to verify for yet (or any more), and
 * none called off. The notification is kept as handled, saying why nothing was done; the
 * appointment is not stored, since awaiting-insurance would have the poll read it every time and
 * `jobs` list it as waiting for insurance, and what the store holds for it stays as it was, but
 * for one awaiting insurance: it stops waiting (stored as cancelled, as a cancellation of it is;
 * it holds no checks to withdraw), else every poll would read it again for nothing. Booked
 * again, it comes back as a new booking.
 */
async function passOver(store: JobStore, reference: string, status: string, version: string, receivedAt: Date, options: FhirIngestOptions & { raw?: string }, unchanged: (tx: StoreTx) => Promise<void>): Promise<FhirIngested> {
  return store.transaction(async (tx) => {
    await unchanged(tx);
    const dedupeKey = `${reference}|${version}|not-verified`;
    const earlier = await tx.getAppointment(`fhir|${reference}`);
    const waiting = earlier?.status === 'awaiting-insurance';
    // One waiting is new work however often this read was kept before (waiting again since); any other is left as it was,
    // a duplicate once kept.
    const { message, duplicate } = waiting ? { message: await keepRead(tx, reference, dedupeKey, receivedAt, options.raw), duplicate: false } : await keepNotification(tx, reference, dedupeKey, receivedAt, options.raw);
    if (duplicate) return { appointment: reference, status: 'not-verified', created: [], withdrawn: [], duplicate };
    if (waiting) await scheduleAppointment(tx, { ...earlier, status: 'cancelled', checks: [], basis: storedBy(earlier.basis, dedupeKey) }, { now: receivedAt, policy: options.policy });
    const detail = `not-verified: status ${status.slice(0, 40)} is neither verified nor withdrawn (mappings/fhir/appointment-status.json)${waiting ? '; no longer awaiting insurance' : ''}`;
    await tx.updateMessage(message.id, { status: 'handled', detail });
    return { appointment: reference, status: 'not-verified', created: [], withdrawn: [], duplicate };
  });
}

/** The notification as received (the reference alone for a poll's read), or the one already kept under its key. */
function keepNotification(tx: StoreTx, reference: string, dedupeKey: string, receivedAt: Date, raw: string | undefined) {
  return tx.addMessage({ kind: 'fhir-notification', dedupeKey, receivedAt: receivedAt.toISOString(), raw: raw ?? JSON.stringify({ reference }), status: 'received' });
}

/**
 * The dedupe key of the read the store's appointment was last stored by: a read whose key it is
 * finds what it would store there already (FhirIngested's duplicate). An earlier read's key, kept
 * as a notification, is not: the chart may have put back since what it changed after it (a birth
 * date corrected and restored, a visit moved and moved back). Undefined for an appointment never
 * stored, or stored before the key was kept with it.
 */
function readOf(held: AppointmentRow | undefined): string | undefined {
  return StoredRead.safeParse(held?.basis).data?.read;
}
const StoredRead = z.looseObject({ read: z.string() });

/** The basis of an appointment stored again by a read that builds no checks (passOver, withdrawGone): the read it was stored by. */
function storedBy(basis: unknown, read: string): object {
  return { ...(basis as object), read };
}

/**
 * The read kept as its notification: under its dedupe key, or, where an earlier read of what the
 * chart has put back since kept that key, under the key numbered on, a notification of its own.
 */
async function keepRead(tx: StoreTx, reference: string, dedupeKey: string, receivedAt: Date, raw: string | undefined): Promise<MessageRow> {
  for (let n = 1; ; n++) {
    const { message, duplicate } = await keepNotification(tx, reference, n === 1 ? dedupeKey : `${dedupeKey}#${n}`, receivedAt, raw);
    if (!duplicate) return message;
  }
}

/** A resource as it reads now, for a server that gives it no versionId. */
function digestOf(resource: unknown): string {
  return createHash('sha256').update(JSON.stringify(resource)).digest('hex').slice(0, 16);
}

/**
 * An appointment the server no longer has (404, 410: deleted) is one that will not happen: when
 * the store holds it, it is cancelled and its checks withdrawn, as a cancellation would be. One
 * the store never knew names nothing to do, and is refused.
 */
async function withdrawGone(store: JobStore, appointmentId: string, receivedAt: Date, options: FhirIngestOptions & { raw?: string }, unchanged: (tx: StoreTx) => Promise<void>): Promise<FhirIngested> {
  const reference = `Appointment/${appointmentId}`;
  const key = `fhir|${reference}`;
  return store.transaction(async (tx) => {
    await unchanged(tx);
    // Refused before anything is written: the transaction leaves no trace.
    const earlier = await tx.getAppointment(key);
    if (!earlier) throw new FhirInputError([{ expression: 'Appointment', diagnostics: `the server has no Appointment with id ${appointmentId}`, code: 'not-found' }]);
    const dedupeKey = `${reference}|gone`;
    if (readOf(earlier) === dedupeKey) return { appointment: reference, status: 'cancelled', created: [], withdrawn: [], duplicate: true };
    const message = await keepRead(tx, reference, dedupeKey, receivedAt, options.raw);
    const done = await scheduleAppointment(
      tx,
      { key, patientKey: earlier.patientKey, dateOfService: earlier.dateOfService, status: 'cancelled', checks: [], basis: storedBy(earlier.basis, dedupeKey) },
      { now: receivedAt, policy: options.policy },
    );
    await tx.updateMessage(message.id, { status: 'handled', detail: 'cancelled: the server no longer has it' });
    return { appointment: reference, status: 'cancelled', ...done, duplicate: false };
  });
}

/** The little of a Coverage the pipeline reads to find whose it is. */
const CoverageHead = z.looseObject({
  id: z.string().optional(),
  beneficiary: z.looseObject({ reference: z.string().optional() }).optional(),
  subscriber: z.looseObject({ reference: z.string().optional() }).optional(),
});
/** A Patient reference, relative or absolute, versioned (`/_history/n`) or not. */
const PATIENT_REF = /(?:^|\/)Patient\/([A-Za-z0-9\-.]{1,64})(?:\/_history\/[^/]+)?$/;
const patientIdOf = (reference: string | undefined) => (reference === undefined ? undefined : PATIENT_REF.exec(reference)?.[1]);

/** A Coverage's subscriber as `Patient/<id>` or `RelatedPerson/<id>`, from a reference relative or absolute, versioned or not. */
const SUBSCRIBER_REF = /(?:^|\/)((?:Patient|RelatedPerson)\/[A-Za-z0-9\-.]{1,64})(?:\/_history\/[^/]+)?$/;
const subscriberOf = (reference: string | undefined) => (reference === undefined ? undefined : SUBSCRIBER_REF.exec(reference)?.[1]);

/** The id of the Patient a Coverage is for, when its beneficiary names one. */
function beneficiaryOf(coverage: unknown): string | undefined {
  return patientIdOf(CoverageHead.safeParse(coverage).data?.beneficiary?.reference);
}

/** The time the store's appointments are to come or over at, and where their clinics are. */
interface Present {
  now: Date;
  policy: SchedulePolicy;
}

const FHIR_APPOINTMENT = 'fhir|Appointment/';
/** The id of a FHIR appointment the store holds under `key`; undefined for one from HL7. */
const fhirAppointmentId = (key: string) => (key.startsWith(FHIR_APPOINTMENT) ? key.slice(FHIR_APPOINTMENT.length) : undefined);

/**
 * The appointments booked still to come whose checks verify this Coverage, found by their checks:
 * one the server no longer has names no patient, and one the chart moved to another patient
 * names the other (the first patient's appointments are read again too, so its checks are
 * withdrawn there, and the second's verify it).
 */
async function appointmentsVerifying(store: JobStore, coverage: string, at: Present): Promise<string[]> {
  const held = await store.transaction((tx) => tx.appointmentsVerifying(coverage));
  return held.flatMap((a) => {
    const id = fhirAppointmentId(a.key);
    return id !== undefined && stillToCome(a, at.now, at.policy) ? [id] : [];
  });
}

/** Whether the store holds this FHIR appointment, not cancelled. */
async function stillHeld(store: JobStore, id: string): Promise<boolean> {
  const held = await store.transaction((tx) => tx.getAppointment(`${FHIR_APPOINTMENT}${id}`));
  return held !== undefined && held.status !== 'cancelled';
}

/** The patient's appointments the store holds still to come, not cancelled, by id. */
async function heldAppointments(store: JobStore, patient: string, at: Present): Promise<string[]> {
  const held = await store.transaction((tx) => tx.appointmentsOfPatient(`fhir|${patient}`));
  return held.flatMap((a) => {
    const id = fhirAppointmentId(a.key);
    return id !== undefined && a.status !== 'cancelled' && stillToCome(a, at.now, at.policy) ? [id] : [];
  });
}

/**
 * The patient's appointments the chart has from today on, in a status verified, that a dead letter
 * says the chart refused for their data (a Coverage without a member id, a birth date after the
 * visit): the store does not hold them, and a correction of the patient or a coverage is how the
 * chart fixes them, so they are read again with the patient's own (before, only `jobs replay`
 * did). One search, made only while such letters are kept (`refused`: refusedAppointments, read once a poll); a chart that refuses it, or fails it
 * (slow, out of reach), has them read by `jobs replay` alone, as before: else the search would fail
 * the whole poll, no appointment polled, and a Patient notification that reads nothing else.
 */
async function refusedOfPatient(reader: FhirReader, patient: string, refused: ReadonlySet<string>, at: Present): Promise<string[]> {
  if (refused.size === 0) return [];
  let found: unknown[];
  try {
    found = await reader.search('Appointment', { patient, status: verifiedStatuses().join(','), date: `ge${firstDateToCome(at.now, undefined)}`, _count: '100' });
  } catch {
    return [];
  }
  return found.flatMap((a) => {
    const id = AppointmentHead.safeParse(a).data?.id;
    return id !== undefined && refused.has(id) ? [id] : [];
  });
}

/**
 * How many subscribers one search for the Coverages they subscribe to names: a poll's changed patients go
 * in several. Each subscribes to their own Coverage at least, so this many fill a page of a chart that
 * pages by 20 whatever _count asks (HAPI's default), and a few more the next.
 */
const SUBSCRIBERS_PER_SEARCH = 20;

/**
 * The pages one such search may take: what SUBSCRIBERS_PER_SEARCH patients subscribe to. A chart that
 * ignores the parameter, as R4 lets one that does not know it, would give every Coverage it has
 * instead, page after page, at each Patient changed.
 */
const SUBSCRIBER_SEARCH_PAGES = 2;

/**
 * The appointments held still to come whose checks verify a Coverage these subscribers (`Patient/<id>`,
 * `RelatedPerson/<id>`) are the subscriber of, not its beneficiary (a parent's plan that covers a child,
 * the parent a patient of the practice or kept as a RelatedPerson): those checks carry the subscriber's
 * name and birth date, so a correction of them is new work there too, where the patient's own
 * appointments (heldAppointments) do not reach. Found by Coverage's `subscriber`
 * search parameter (R4's), its answers kept to those naming one of them as subscriber, in case a
 * chart ignores the parameter. A chart that refuses the search, fails it or pages past
 * SUBSCRIBER_SEARCH_PAGES has them read by a notification of the appointment or the Coverage alone,
 * as before, as refusedOfPatient's search is left: else the search would fail the whole poll and
 * each Patient notification, where the patient's own appointments are read all the same.
 */
async function appointmentsSubscribedBy(store: JobStore, reader: FhirReader, subscribers: readonly string[], at: Present): Promise<string[]> {
  const found: string[] = [];
  const beneficiaries = new Set<string>();
  for (let i = 0; i < subscribers.length; i += SUBSCRIBERS_PER_SEARCH) {
    const asked = subscribers.slice(i, i + SUBSCRIBERS_PER_SEARCH);
    let coverages: unknown[];
    try {
      coverages = await reader.search('Coverage', { subscriber: asked.join(','), _count: '100' }, { maxPages: SUBSCRIBER_SEARCH_PAGES });
    } catch {
      break;
    }
    for (const coverage of coverages) {
      const head = CoverageHead.safeParse(coverage).data;
      const subscriber = subscriberOf(head?.subscriber?.reference);
      if (head?.id === undefined || subscriber === undefined || !asked.includes(subscriber)) continue;
      found.push(...(await appointmentsVerifying(store, `Coverage/${head.id}`, at)));
      const beneficiary = beneficiaryOf(coverage);
      if (beneficiary !== undefined && !subscribers.includes(`Patient/${beneficiary}`)) beneficiaries.add(beneficiary);
    }
  }
  // Those the chart refused for the subscriber's data (a birth date after the visit) are not held: the beneficiary's refused
  // ones are read again, as a change of the beneficiary has them (a patient changed has their own read by the caller).
  const refused = beneficiaries.size > 0 ? await refusedAppointments(store) : new Set<string>();
  for (const beneficiary of beneficiaries) found.push(...(await refusedOfPatient(reader, `Patient/${beneficiary}`, refused, at)));
  return found;
}

/** The ids of the appointments dead letters say the chart refused (refusedOfPatient). */
async function refusedAppointments(store: JobStore): Promise<Set<string>> {
  const letters = await store.transaction((tx) => tx.deadLettersNaming('Appointment/'));
  return new Set(letters.flatMap((l) => changeOf(l.detail)?.id ?? []));
}

/**
 * The appointments to read again when a patient's details or coverages changed in the chart under
 * appointments already booked (a secondary plan added, a member id or birth date corrected): the
 * patient's appointments the store holds still to come at their clinics (stillToCome), booked or waiting for
 * insurance. Read again, one whose checks come out the same is a duplicate and changes nothing. A
 * Coverage names its patient as beneficiary; the appointments whose checks verify it are read
 * again too, so a Coverage moved to another patient leaves the first patient's visits, and one the
 * server no longer has (deleted) the visits it served (a poll does not see deletions). A
 * RelatedPerson is no patient: the appointments whose checks verify a Coverage it is the
 * subscriber of are read again (a parent kept so, their birth date corrected), no patient named,
 * and those of the Coverage's beneficiary the chart refused (refusedOfPatient), as for a Patient.
 */
export async function appointmentsOfChanged(
  store: JobStore,
  reader: FhirReader,
  changed: { type: PersonChanged; id: string },
  at: Present,
): Promise<{ patient: string | undefined; appointments: string[] }> {
  if (changed.type === 'RelatedPerson') return { patient: undefined, appointments: await appointmentsSubscribedBy(store, reader, [`RelatedPerson/${changed.id}`], at) };
  let patientId: string | undefined = changed.id;
  if (changed.type === 'Coverage') {
    const coverage = await reader.read('Coverage', changed.id);
    if (coverage === undefined) return { patient: undefined, appointments: await appointmentsVerifying(store, `Coverage/${changed.id}`, at) };
    patientId = beneficiaryOf(coverage);
    if (!patientId) throw new FhirInputError([{ expression: 'Coverage.beneficiary', diagnostics: 'names no Patient', code: 'required' }]);
  }
  const patient = `Patient/${patientId}`;
  // A Coverage's own appointments; a Patient's as subscriber of another's Coverage.
  const verifying = changed.type === 'Coverage' ? await appointmentsVerifying(store, `Coverage/${changed.id}`, at) : await appointmentsSubscribedBy(store, reader, [patient], at);
  return { patient, appointments: [...new Set([...(await heldAppointments(store, patient, at)), ...verifying, ...(await refusedOfPatient(reader, patient, await refusedAppointments(store), at))])] };
}

/**
 * Where a search by meta.lastUpdated got to: the newest instant the server gave, and the versions
 * it gave at that instant (id/versionId, or id/digest without one).
 */
const Mark = z.object({ lastUpdated: z.string().optional(), seen: z.array(z.string()).optional() });
type Mark = z.infer<typeof Mark>;

/**
 * What the poll keeps between polls: the appointments' mark, the last day the window reached, and
 * the marks of the Coverages, Patients and RelatedPersons read for changes under appointments already
 * booked (a cursor from before RelatedPersons were has none: its first search looks back a day, as a first poll's).
 */
const PollCursor = Mark.extend({ horizon: z.string().optional(), coverages: Mark.optional(), patients: Mark.optional(), relatedPersons: Mark.optional() });
type PollCursor = z.infer<typeof PollCursor>;

/** A cursor as stored; a bare timestamp is one from before the window was kept. */
function readCursor(text: string | undefined): PollCursor {
  if (!text) return {};
  if (!text.startsWith('{')) return { lastUpdated: text };
  const parsed = PollCursor.safeParse(JSON.parse(text));
  return parsed.success ? parsed.data : {};
}

const Head = z.looseObject({ id: z.string().optional(), meta: z.looseObject({ versionId: z.string().optional(), lastUpdated: z.string().optional() }).optional() });

/**
 * What a search from a mark's instant on found that the last poll had not taken, and the mark
 * after it. From the instant on, not after it: a server that keeps whole seconds, or makes a
 * change visible after a later one, can give a change that instant once the mark holds it. The
 * versions seen at that instant are known, and only they are passed over.
 */
function sinceMark(found: readonly unknown[], previous: Mark): { fresh: Array<{ id: string; resource: unknown }>; mark: Mark } {
  const fresh: Array<{ id: string; resource: unknown }> = [];
  let { lastUpdated } = previous;
  let seen = new Set(previous.seen);
  const since = previous.lastUpdated === undefined ? Number.NaN : Date.parse(previous.lastUpdated);
  for (const resource of found) {
    const head = Head.safeParse(resource);
    if (!head.success || !head.data.id) continue;
    const updated = head.data.meta?.lastUpdated;
    const at = updated === undefined ? Number.NaN : Date.parse(updated);
    // A server that gives no versionId: the resource as it reads now stands for its version.
    const version = `${head.data.id}/${head.data.meta?.versionId ?? digestOf(resource)}`;
    if (at === since && previous.seen?.includes(version)) continue;
    fresh.push({ id: head.data.id, resource });
    const newest = lastUpdated === undefined ? Number.NaN : Date.parse(lastUpdated);
    if (Number.isNaN(at)) continue;
    if (Number.isNaN(newest) || at > newest) (lastUpdated = updated), (seen = new Set([version]));
    else if (at === newest) seen.add(version);
  }
  return { fresh, mark: { lastUpdated, seen: [...seen] } };
}

/** How far back a first poll reads Coverages and Patients for changes: all of them would be the whole chart. */
const FIRST_CHANGES_MS = 86_400_000;

/**
 * Appointments in the next `days` days in a status verified or one that will not happen
 * (mappings/fhir/appointment-status.json) since the last poll, those verified the window
 * reached since then (booked long ahead, they changed before they were in it), those still
 * waiting for insurance, whose coverages may have arrived since, and those held still to come of
 * patients whose Coverage or Patient changed since the last poll, and of those whose Coverage's
 * subscriber, a Patient or RelatedPerson, did (a first poll looks back a day).
 * The cursor holds the newest meta.lastUpdated the server gave, so the FHIR server's clock, not
 * ours, decides what changed.
 */
export async function appointmentsToPoll(
  store: JobStore,
  reader: FhirReader,
  options: Present & { days: number; since: string | undefined },
): Promise<{ ids: string[]; cursor: string; unread: Array<{ resourceType: PersonChanged; err: unknown }> }> {
  // The search's first day is the earliest any clinic may be at: which clinic an appointment is at is read with it.
  const from = firstDateToCome(options.now, undefined);
  const until = new Date(options.now.getTime() + options.days * 86_400_000).toISOString().slice(0, 10);
  const previous = readCursor(options.since);
  const window = { status: verifiedStatuses().join(','), date: [`ge${from}`, `le${until}`], _count: '100' };
  const ids = new Set<string>();
  // What changed includes what will not happen any more, so its checks are withdrawn.
  const changedWindow = { ...window, status: [...verifiedStatuses(), ...willNotHappenStatuses()].join(',') };
  // Since the last poll, past the window too: one held that was moved beyond it leaves its day, whose
  // checks would be verified again for a visit no longer there. One booked beyond it waits for the window.
  const changed = await reader.search('Appointment', previous.lastUpdated ? { ...changedWindow, date: `ge${from}`, _lastUpdated: `ge${previous.lastUpdated}` } : changedWindow);
  const appointments = sinceMark(changed, previous);
  // Past the window is a day past its last in UTC: the search of the days it reaches next finds one by the
  // server's reading of a date, in a zone of its own (Medplum's UTC: 1 AM on the 9th at +13:00 is on the
  // 8th), and one the window's last day holds for the server is found by no later search.
  const pastWindow = Date.parse(`${until}T00:00:00Z`) + 2 * 86_400_000;
  for (const { id, resource } of appointments.fresh) {
    const start = Date.parse(AppointmentHead.safeParse(resource).data?.start ?? '');
    if (Number.isNaN(start) || start < pastWindow || (await stillHeld(store, id))) ids.add(id);
  }
  if (previous.horizon && previous.horizon < until) {
    const reached = await reader.search('Appointment', { ...window, date: [`gt${previous.horizon}`, `le${until}`] });
    for (const found of reached) {
      const head = AppointmentHead.safeParse(found);
      if (head.success && head.data.id) ids.add(head.data.id);
    }
  }
  for (const waiting of await store.listAppointments('awaiting-insurance')) {
    const id = fhirAppointmentId(waiting.key);
    if (id !== undefined && stillToCome(waiting, options.now, options.policy)) ids.add(id);
  }
  const firstLook = new Date(options.now.getTime() - FIRST_CHANGES_MS).toISOString();
  const unread: Array<{ resourceType: PersonChanged; err: unknown }> = [];
  const changesOf = async (type: PersonChanged, mark: Mark | undefined) => {
    try {
      const found = await reader.search(type, { _lastUpdated: `ge${mark?.lastUpdated ?? firstLook}`, _count: '100' });
      return sinceMark(found, mark ?? {});
    } catch (err) {
      // A chart that will not search them by _lastUpdated alone (some want a patient) still has its
      // appointments polled; the mark stays, so what changed is read once the search answers.
      unread.push({ resourceType: type, err });
      return { fresh: [], mark };
    }
  };
  const coverages = await changesOf('Coverage', previous.coverages);
  const patients = await changesOf('Patient', previous.patients);
  const relatedPersons = await changesOf('RelatedPerson', previous.relatedPersons);
  const changedPatients = new Set([...patients.fresh.map((p) => p.id), ...coverages.fresh.flatMap((c) => beneficiaryOf(c.resource) ?? [])]);
  const refused = changedPatients.size > 0 ? await refusedAppointments(store) : new Set<string>();
  for (const patient of changedPatients) {
    for (const id of await heldAppointments(store, `Patient/${patient}`, options)) ids.add(id);
    for (const id of await refusedOfPatient(reader, `Patient/${patient}`, refused, options)) ids.add(id);
  }
  // A Patient changed who is the subscriber of another's Coverage, or a RelatedPerson who is: the appointments verifying it too.
  const subscribers = [...patients.fresh.map((p) => `Patient/${p.id}`), ...relatedPersons.fresh.map((r) => `RelatedPerson/${r.id}`)];
  for (const id of await appointmentsSubscribedBy(store, reader, subscribers, options)) ids.add(id);
  // A Coverage moved to another patient: the first's appointments verifying it are read again too.
  for (const { id: coverage } of coverages.fresh) {
    for (const id of await appointmentsVerifying(store, `Coverage/${coverage}`, options)) ids.add(id);
  }
  const cursor: PollCursor = { ...appointments.mark, horizon: until, coverages: coverages.mark, patients: patients.mark, relatedPersons: relatedPersons.mark };
  return { ids: [...ids], cursor: JSON.stringify(cursor), unread };
}
