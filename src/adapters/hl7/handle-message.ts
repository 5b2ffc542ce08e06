import {
  IsoInstant,
  type EligibilityCheck,
  type Identifier,
  type KnownAppointment,
  type KnownCoverage,
  type PatientInsuranceRecord,
  type PatientInsuranceStore,
  type PatientKey,
  type PayerResolver,
  type Provider,
} from '../../domain';
import { clinicTimeZone, resolveClinic, senderTimeZone, type ClinicRouting } from '../clinic-routing';
import { acknowledgements, type Ack, type AckOptions, type ApplicationAckCode } from './ack';
import { assembleChecks, dayInPlan, type CheckSourceFields } from './build-checks';
import { dayIn, sentEarlier } from './hl7-date';
import { describeProblem, problemAt, rejection, warningAt, type Hl7Problem } from './hl7-errors';
import { Hl7Message, readSegments } from './hl7-message';
import { headerOf, messageControlId, messageTypeOf, type MessageHeader } from './message-header';
import { eventActionFor, profileFor, type Hl7Mappings, type Hl7Profile } from './profile';
import { readAppointment, readAppointmentId, type AppointmentReading } from './read-appointment';
import { firstValue, groupsOf, holdsAny, whereFound, whereMissing } from './read-fields';
import { coveragesOfPatient, droppedMemberIds, keptPeriods, readInsurance, type InsuranceReading } from './read-insurance';
import { patientKey, readIdentifierList, readPatient, readPatientKey, type PatientDemographics } from './read-patient';
import { samePlainData } from './plain-data';
import { segmentLines } from './split-messages';

export interface Hl7HandlerOptions {
  mappings: Hl7Mappings;
  routing: ClinicRouting;
  store: PatientInsuranceStore;
  /** A payer catalog; when given, each check's coverage carries its resolution. */
  resolver?: PayerResolver | undefined;
  /** When the message arrived (ISO 8601 with offset); passed in so results are reproducible. */
  receivedAt: string;
}

/**
 * What a message did. Checks are to verify; keys named under replaced/cancel are to withdraw if
 * still pending (only those no other booked appointment of the patient holds). A cancellation
 * without a patient names no keys: withdraw by appointment id.
 */
export type Hl7Outcome =
  | {
      kind: 'book' | 'reschedule';
      appointmentId?: string;
      checks: EligibilityCheck[];
      replacedKeys: string[];
      /** The profile marks the patient's insurance as self-pay: nothing to verify. */
      selfPay: boolean;
      /** No insurance has been received for this patient yet (neither in this message nor before). */
      awaitingInsurance: boolean;
      /** The message carries an IN1 (even a self-pay or an empty one): it states the patient's insurance, rather than leaving it as on file. */
      insuranceReceived: boolean;
      patientKey: PatientKey;
      /** What the appointment's checks are built from, so they can be built again when insurance arrives. */
      appointment: AppointmentBasis;
      /**
       * The patient's record as this message leaves it, when it states other details than were on file
       * (or none were): their other appointments are built again from it. Absent when nothing changed.
       */
      record?: PatientInsuranceRecord;
      /** The member ids of plans on file that the record no longer lists: their Coverages in the chart may be ended (see droppedMemberIds). */
      droppedMemberIds?: string[];
    }
  | { kind: 'cancel'; appointmentId: string; keys: string[]; patientKey?: PatientKey }
  | {
      kind: 'record';
      coverageCount: number;
      insuranceReceived: boolean;
      patientKey: PatientKey;
      /** As a booking's: the record this message leaves, when it states other details than were on file. */
      record?: PatientInsuranceRecord;
      /** As a booking's. */
      droppedMemberIds?: string[];
    }
  | {
      kind: 'merge';
      /** One per patient group whose prior patient is another than the survivor, in message order. */
      merges: PatientMerge[];
    }
  | { kind: 'ignore'; reason: string }
  | { kind: 'reject'; problems: Hl7Problem[]; held?: HeldBooking };

/**
 * A booking refused for what it says of the patient alone (PID, IN1: a member id missing, a birth
 * date mistyped), its visit, office and patient known: the PMS sends the correction as an ADT, not
 * the booking again, so the pipeline keeps the visit waiting for the patient's record to be
 * corrected, as a booking without insurance waits for it.
 */
export interface HeldBooking {
  patientKey: PatientKey;
  appointmentId?: string;
  appointment: AppointmentBasis;
}

/** A prior patient (MRG) merged into the surviving one (PID). */
export interface PatientMerge {
  priorKey: PatientKey;
  patientKey: PatientKey;
  /** The prior patient's appointments as its record remembered them: the survivor's now. */
  appointmentIds: string[];
  /** Whose insurance the survivor's record holds: its own when it had stated any, else the prior's; none when neither had. */
  insuranceFrom: 'survivor' | 'prior' | 'none';
  /** The survivor's record as the merge leaves it: the prior's appointments are built again from it. */
  record: PatientInsuranceRecord;
  /** It states other details than the survivor's record did (or there was none): the survivor's own appointments are built again too. */
  changed: boolean;
}

/** An appointment as read from a SIU, without the insurance: its checks are this plus the patient's coverages. */
export interface AppointmentBasis {
  clinicId: string;
  dateOfService: string;
  provider?: Provider;
  source: CheckSourceFields;
  /** What the message was used despite (an invalid NPI, say); every check of the appointment carries them. */
  warnings?: string[];
}

export interface Hl7Result {
  /** Undefined when not even MSH-1 and MSH-2 could be read. */
  header: MessageHeader | undefined;
  ackCode: ApplicationAckCode;
  outcome: Hl7Outcome;
  /**
   * The id the message is known by: MSH-10, or `sha256:<hex>` derived from the content when MSH-10
   * is empty (see messageControlId). Checks carry it as source.messageControlId; key duplicate
   * detection and the store by it. The ACK's MSA-2 echoes MSH-10 as received.
   */
  messageControlId?: string;
  /** Flaws the message was used despite (AA), or listed beside its errors: ERRs of severity W. */
  warnings?: Hl7Problem[];
}

const SUPPORTED_VERSION = /^2\.(3(\.1)?|4|5(\.1)?|6|7(\.1)?|8(\.[12])?)$/;

/** Appointments remembered per patient, to name the keys a reschedule or cancellation replaces. */
const KEPT_APPOINTMENTS = 50;

/** How many merges in a row a patient's identifier is followed through (A into B, B into C); a loop a sender made ends here. */
const MERGES_FOLLOWED = 8;

/**
 * One HL7 v2 message in, what it means out. It reads and writes the patient insurance store but
 * does no other I/O, so a durable pipeline can call it, store the result and only then answer the
 * ACKs (ackFor). Problems with the data come back as a `reject` outcome, never as a throw; an
 * exception means a fault of ours (or the store's) and should be answered AR.
 */
export async function handleHl7Message(text: string, options: Hl7HandlerOptions): Promise<Hl7Result> {
  // The one datum of a result that is not read from the message: the caller's, checked here.
  if (!IsoInstant.safeParse(options.receivedAt).success) throw new TypeError('receivedAt must be an ISO 8601 date-time with offset');
  // Cut into segments once: the header is read from them and the message parsed from them.
  const lines = segmentLines(text);
  const header = headerOf(lines);
  const controlId = messageControlId(header, text);
  const warnings: Hl7Problem[] = [];
  const message = readSegments(lines, header?.delimiters);
  const problems = message instanceof Hl7Message ? headerProblems(header, warnings) : [message];
  const outcome = message instanceof Hl7Message && header && problems.length === 0 ? await dispatch({ message, header, controlId, warnings }, options) : rejected(problems);
  const ackCode = outcome.kind !== 'reject' ? 'AA' : outcome.problems.some((p) => p.ackCode === 'AR') ? 'AR' : 'AE';
  const result: Hl7Result = { header, messageControlId: controlId, ackCode, outcome };
  if (warnings.length > 0) result.warnings = warnings;
  return result;
}

/** Readers return what is wrong with a message rather than throw it: a throw costs a stack trace. */
function rejected(problems: Hl7Problem[], held?: HeldBooking): Hl7Outcome {
  return held ? { kind: 'reject', problems, held } : { kind: 'reject', problems };
}

/**
 * The acknowledgements for a result once it has been kept, in the order to send them: one in
 * original mode, what MSH-15 and MSH-16 ask for in enhanced mode. A message whose data cannot be
 * used is kept as a dead letter, so only an unreadable or unsupported one is not accepted (CR).
 */
export function ackFor(result: Hl7Result, options?: AckOptions): Ack[] {
  const problems = [...(result.outcome.kind === 'reject' ? result.outcome.problems : []), ...(result.warnings ?? [])];
  return acknowledgements(result.header, { commit: result.ackCode === 'AR' ? 'CR' : 'CA', application: result.ackCode, problems }, options);
}

function headerProblems(header: MessageHeader | undefined, warnings: Hl7Problem[]): Hl7Problem[] {
  if (!header) return [rejection({ segment: 'MSH', field: 2 }, 102, 'field separator or encoding characters are not usable')];
  const missing = (field: number, what: string) => rejection({ segment: 'MSH', field }, 101, `${what} missing`);
  const problems: Hl7Problem[] = [];
  if (!header.messageCode || !header.triggerEvent) problems.push(missing(9, 'message type or trigger event'));
  // Senders that leave MSH-10 empty still expect their message used; the ACK cannot echo an id.
  if (!header.controlId) warnings.push(warningAt({ segment: 'MSH', sequence: 1, field: 10 }, 101, 'message control id missing: known by a hash of its content'));
  if (!header.version) problems.push(missing(12, 'version'));
  else if (!SUPPORTED_VERSION.test(header.version)) {
    problems.push(rejection({ segment: 'MSH', field: 12 }, 203, `version ${header.version.slice(0, 10)} is not supported (2.3 to 2.8)`));
  }
  return problems;
}

/** A readable message with a supported header, as handleHl7Message hands it on. */
interface Received {
  message: Hl7Message;
  header: MessageHeader;
  /** MSH-10, or the id derived when it is empty. */
  controlId: string;
  /** Where readers put what the message is used despite. */
  warnings: Hl7Problem[];
}

interface Context extends Received {
  profile: Hl7Profile;
  options: Hl7HandlerOptions;
  /** MSH-3 and MSH-4, first components: the profile is chosen by the one, patients are keyed by the other. */
  sendingApplication: string;
  facility: string;
}

/** Not async itself: the events that touch the store are, and an extra promise per message shows. */
function dispatch(received: Received, options: Hl7HandlerOptions): Hl7Outcome | Promise<Hl7Outcome> {
  const { message, header, controlId, warnings } = received;
  const sendingApplication = message.header.value(3).trim();
  const profile = profileFor(options.mappings, sendingApplication);
  const type = messageTypeOf(header);
  const code = header.messageCode.toUpperCase();
  const action = eventActionFor(profile, header);
  if (action === undefined) {
    const knownType = Object.keys(profile.events).some((k) => k.startsWith(`${code}^`));
    return rejected([
      knownType
        ? rejection({ segment: 'MSH', field: 9 }, 201, `event ${header.triggerEvent.slice(0, 8)} is not supported`)
        : rejection({ segment: 'MSH', field: 9 }, 200, `message type ${header.messageCode.slice(0, 8)} is not supported`),
    ]);
  }
  const processingId = message.header.value(11).trim().toUpperCase();
  if (processingId === '') {
    warnings.push(warningAt({ segment: 'MSH', sequence: 1, field: 11 }, 101, `processing id missing: taken as ${profile.processingIds[0]}`));
  } else if (!profile.processingIds.includes(processingId)) {
    return rejected([rejection({ segment: 'MSH', field: 11 }, 202, `processing id ${processingId.slice(0, 3)} is not accepted here (${profile.processingIds.join(', ')})`)]);
  }
  const ctx: Context = { message, header, controlId, warnings, profile, options, sendingApplication, facility: message.header.value(4).trim() };
  switch (action) {
    case 'ignore':
      return { kind: 'ignore', reason: `${type} does not change eligibility` };
    case 'cancel':
      return cancel(ctx);
    case 'record':
      return record(ctx);
    case 'merge':
      return merge(ctx);
    case 'book':
    case 'reschedule':
      return holdsAny(message.segments, profile.appointment.cancelledWhen) ? cancel(ctx) : verify(ctx, action);
  }
}

async function verify(ctx: Context, kind: 'book' | 'reschedule'): Promise<Hl7Outcome> {
  const { message, profile, options } = ctx;
  const problems = [...missingSegments(message, 'SCH', 'PID'), ...repeatedSegments(message, 'SCH', 'PID')];
  if (problems.length > 0) return rejected(problems);
  const read = readPatient(message, profile, options.mappings.codeTables, problems);
  const ofPatient = problems.length;
  const appointment = readAppointment(message, profile, options.mappings.codeTables, problems, ctx.warnings);
  const ofAppointment = problems.length;
  // The clinic first: its time zone dates the plans' dates, as it does the visit. What it finds wrong is reported last, as before.
  const ofClinic: Hl7Problem[] = [];
  const clinicId = readClinic(ctx, ofClinic);
  const insurance = read && readInsurance(message, profile, options.mappings.codeTables, read, problems, ctx.warnings, clinicId && clinicTimeZone(options.routing, clinicId));
  const ofInsurance = problems.length;
  problems.push(...ofClinic);
  const named = read && patientKey(read.identifiers, ctx.facility);
  if (problems.length > 0) {
    // Only what the message says of the patient is wrong (the appointment and the office read): the visit waits for its correction.
    const patientOnly = ofAppointment === ofPatient && problems.length === ofInsurance;
    const heldKey = patientOnly ? (named ?? readPatientKey(message, profile, ctx.facility)) : undefined;
    if (!heldKey || !appointment || !clinicId) return rejected(problems);
    const found = await patientNamed(ctx, heldKey);
    const basis = basisOf(ctx, appointment, clinicId, dateOfVisit(ctx, appointment, clinicId));
    // Made before the record's last word, what it says of the patient would not be used (see fromRecord in ingest-hl7): no reason to refuse
    // it, as the ADT that corrected it came first (an engine's order, or a dead letter of a version that held no booking, replayed).
    if (found.known && olderThanRecord(ctx, found, { present: message.first('IN1') !== undefined })) {
      const { known } = found;
      const fromRecord = { patient: known.patient, coverages: known.coverages, insuranceKnown: insuranceKnownIn(known), stated: false };
      return booked(ctx, kind, found, fromRecord, appointment.appointmentId, basis);
    }
    return rejected(problems, held(found.key, appointment.appointmentId, basis));
  }
  if (!read || !appointment || !insurance || !clinicId || !named) throw new Error('readers returned nothing without a problem');

  const found = await patientNamed(ctx, named);
  const { key, known } = found;
  const { patient, stated } = saidOf(found, named, read, insurance.present);
  const coverages = stated ? keptPeriods(insurance, known?.coverages ?? []) : coveragesOfPatient(known?.coverages ?? [], patient);
  const insuranceKnown = stated || insuranceKnownIn(known);
  const dateOfService = dateOfVisit(ctx, appointment, clinicId);
  const unborn = olderThanRecord(ctx, found, insurance) ? [] : bornAfter(ctx, read, insurance, { date: dateOfService, said: `after the date of service, ${dateOfService}` });
  if (unborn.length > 0) return rejected(unborn, held(key, appointment.appointmentId, basisOf(ctx, appointment, clinicId, dateOfService)));
  if (stated) ctx.warnings.push(...notInForce({ ...insurance, coverages }, dateOfService));
  return booked(ctx, kind, found, { patient, coverages, insuranceKnown, stated }, appointment.appointmentId, basisOf(ctx, appointment, clinicId, dateOfService));
}

/** A booking's outcome: its checks built from `said` of the patient, the record kept with the appointment remembered. */
async function booked(
  ctx: Context,
  kind: 'book' | 'reschedule',
  { key, known }: Named,
  said: { patient: PatientDemographics; coverages: KnownCoverage[]; insuranceKnown: boolean; stated: boolean },
  appointmentId: string | undefined,
  basis: AppointmentBasis,
): Promise<Hl7Outcome> {
  const { patient, coverages, insuranceKnown, stated } = said;
  const { dateOfService } = basis;
  const checks = assembleChecks({ patient, coverages, resolver: ctx.options.resolver, ...basis });
  const keys = checks.map((c) => c.idempotencyKey);
  const earlier = appointmentId === undefined ? undefined : known?.appointments.find((a) => a.appointmentId === appointmentId);
  const appointments = appointmentId === undefined ? (known?.appointments ?? []) : remember(known?.appointments ?? [], { appointmentId, dateOfService, keys });
  const record = recordOf(ctx, patient, coverages, appointments, insuranceKnown);
  await ctx.options.store.put(key, record);
  return {
    kind,
    checks,
    replacedKeys: unheld(earlier?.keys ?? [], appointments),
    selfPay: insuranceKnown && checks.length === 0,
    awaitingInsurance: !insuranceKnown,
    insuranceReceived: stated,
    patientKey: key,
    appointment: basis,
    ...(appointmentId !== undefined && { appointmentId }),
    // Rebuilding the other visits' checks when nothing changed is not free: two visits that day share a
    // check but not a provider, so each rebuild would swap its provider and verify it again.
    ...(!sameDetails(known, record) && { record }),
    ...dropped(known?.coverages, coverages),
  };
}

/** What the appointment's checks are built from, but the patient and their plans. */
function basisOf(ctx: Context, appointment: AppointmentReading, clinicId: string, dateOfService: string): AppointmentBasis {
  // Spreads last, as readPatient says why.
  return {
    clinicId,
    dateOfService,
    source: source(ctx, appointment.appointmentId),
    ...(appointment.provider && { provider: appointment.provider }),
    ...(ctx.warnings.length > 0 && { warnings: ctx.warnings.map(describeProblem) }),
  };
}

function held(patientKey: PatientKey, appointmentId: string | undefined, appointment: AppointmentBasis): HeldBooking {
  return { patientKey, appointment, ...(appointmentId !== undefined && { appointmentId }) };
}

async function cancel(ctx: Context): Promise<Hl7Outcome> {
  const { message, profile, options } = ctx;
  const missing = [...missingSegments(message, 'SCH'), ...repeatedSegments(message, 'SCH')];
  if (missing.length > 0) return rejected(missing);
  const appointmentId = readAppointmentId(message, profile);
  if (!appointmentId) return rejected([problemAt(whereMissing(message.segments, profile.appointment.id), 101, 'appointment id missing')]);
  // The patient group is optional in a cancellation; without it the pipeline cancels by appointment id.
  const named = message.first('PID') ? readPatientKey(message, profile, ctx.facility) : undefined;
  const { key, known } = named ? await patientNamed(ctx, named) : { key: undefined, known: undefined };
  const entry = known?.appointments.find((a) => a.appointmentId === appointmentId);
  if (!key || !known || !entry) return { kind: 'cancel', appointmentId, keys: [], ...(key && { patientKey: key }) };
  const appointments = known.appointments.filter((a) => a !== entry);
  await options.store.put(key, { ...known, appointments });
  return { kind: 'cancel', appointmentId, keys: unheld(entry.keys, appointments), patientKey: key };
}

async function record(ctx: Context): Promise<Hl7Outcome> {
  const { message, profile, options } = ctx;
  const problems = [...missingSegments(message, 'PID'), ...repeatedSegments(message, 'PID')];
  if (problems.length > 0) return rejected(problems);
  const read = readPatient(message, profile, options.mappings.codeTables, problems);
  // No visit to date the plans' dates where its clinic is: where the sender is.
  const insurance = read && readInsurance(message, profile, options.mappings.codeTables, read, problems, ctx.warnings, senderZone(ctx));
  const named = read && patientKey(read.identifiers, ctx.facility);
  if (problems.length > 0) return rejected(problems);
  if (!read || !insurance || !named) throw new Error('readers returned nothing without a problem');
  const found = await patientNamed(ctx, named);
  const { key, known } = found;
  const tomorrow = new Date(Date.parse(options.receivedAt) + 86_400_000).toISOString().slice(0, 10);
  const unborn = olderThanRecord(ctx, found, insurance) ? [] : bornAfter(ctx, read, insurance, { date: tomorrow, said: 'in the future' });
  if (unborn.length > 0) return rejected(unborn);
  const { patient, stated } = saidOf(found, named, read, insurance.present);
  // A demographics update without IN1 says nothing about insurance: keep what is known.
  const coverages = stated ? keptPeriods(insurance, known?.coverages ?? []) : coveragesOfPatient(known?.coverages ?? [], patient);
  const updated = recordOf(ctx, patient, coverages, known?.appointments ?? [], stated || insuranceKnownIn(known));
  await options.store.put(key, updated);
  return {
    kind: 'record',
    coverageCount: coverages.length,
    insuranceReceived: stated,
    patientKey: key,
    ...(!sameDetails(known, updated) && { record: updated }),
    ...dropped(known?.coverages, coverages),
  };
}

/** The outcome's droppedMemberIds, where the record drops a plan on file. */
function dropped(onFile: readonly KnownCoverage[] | undefined, now: readonly KnownCoverage[]): { droppedMemberIds?: string[] } {
  const memberIds = droppedMemberIds(onFile, now);
  return memberIds.length > 0 ? { droppedMemberIds: memberIds } : {};
}

/**
 * A merge (A40, A34) or a change of identifier (A47): in each patient group (a PID up to the next
 * PID), the prior patient the MRG names becomes the one the PID names. A40 merges several pairs in
 * one message; a group whose MRG names the survivor itself changes nothing.
 */
async function merge(ctx: Context): Promise<Hl7Outcome> {
  const { message, profile, options } = ctx;
  const groups = groupsOf(message.segments, 'PID');
  if (groups.length === 0) return rejected(missingSegments(message, 'PID'));
  const problems: Hl7Problem[] = [];
  const pairs = groups.map((segments) => {
    const survivor = readPatient({ segments }, profile, options.mappings.codeTables, problems);
    const prior = readIdentifierList(segments, profile.merge.priorIdentifiers);
    if (prior.length === 0) problems.push(problemAt(whereMissing(segments, profile.merge.priorIdentifiers), 101, 'prior patient identifier missing'));
    return { survivor, prior };
  });
  if (problems.length > 0) return rejected(problems);
  const merges: PatientMerge[] = [];
  for (const { survivor, prior } of pairs) {
    if (!survivor) throw new Error('readers returned nothing without a problem');
    const done = await mergePatient(ctx, survivor, prior);
    if (done) merges.push(done);
  }
  return { kind: 'merge', merges };
}

/**
 * The survivor's record is kept or created as an ADT's would be, holding the insurance it has
 * stated, else the prior's, and the appointments of both. The prior's record is not removed but
 * left a tombstone naming the survivor (written for a prior never seen too): an engine that sends
 * on several connections or resends what it could not deliver brings, after the merge, a booking
 * or a cancellation made under the prior number before it, and the tombstone makes it the
 * survivor's, where a removed record would make the prior a patient again, with its checks and a
 * chart Patient under a number the PMS no longer has.
 */
async function mergePatient(ctx: Context, named: PatientDemographics, priorIds: Identifier[]): Promise<PatientMerge | undefined> {
  const { store } = ctx.options;
  const priorKey = patientKey(priorIds, ctx.facility);
  const survivorKey = patientKey(named.identifiers, ctx.facility);
  if (!priorKey || !survivorKey) throw new Error('readers returned nothing without a problem');
  const found = await patientNamed(ctx, survivorKey);
  const { key, known } = found;
  const prior = await store.get(priorKey);
  // A prior merged already (this merge resent under another control id) has nothing left to move.
  if (prior?.mergedInto !== undefined || samePlainData(priorKey, key)) return undefined;
  const { patient } = saidOf(found, survivorKey, named, false);
  const kept = insuranceKnownIn(known);
  const from = kept ? known : prior;
  const appointments = (prior?.appointments ?? []).reduce(remember, known?.appointments ?? []);
  const record: PatientInsuranceRecord = {
    ...recordOf(ctx, patient, coveragesOfPatient(from?.coverages ?? [], patient), appointments, insuranceKnownIn(from)),
    // The insurance keeps the time it was stated at, so a message stating it that was made before is still older.
    ...(from?.sentAt !== undefined && { sentAt: from.sentAt }),
  };
  await store.put(key, record);
  // Where the survivor's own insurance won, what the prior's number said before the merge lost with it; the tombstone's
  // time is the merge's then. Else it is the prior's, and a message of the prior's made after that still counts.
  const lostAt = kept && ctx.header.sentAt !== '' ? { sentAt: ctx.header.sentAt } : {};
  await store.put(priorKey, { ...recordOf(ctx, { ...patient, identifiers: priorIds }, [], [], false), mergedInto: key, ...lostAt });
  return {
    priorKey,
    patientKey: key,
    appointmentIds: (prior?.appointments ?? []).map((a) => a.appointmentId),
    insuranceFrom: kept ? 'survivor' : insuranceKnownIn(prior) ? 'prior' : 'none',
    record,
    changed: !sameDetails(known, record),
  };
}

/** A patient as a message's identifier finds it: under that identifier, or, for a tombstone, the survivor it forwards to. */
interface Named {
  key: PatientKey;
  known: PatientInsuranceRecord | undefined;
  /** The identifier is a merged patient's, and the message was made (MSH-7) before its tombstone's time: it tells of the duplicate. */
  outdated: boolean;
}

/**
 * The patient a message names, through merges in a row (A into B, B into C). A patient never
 * merged costs no more than the read of its record, as before merges.
 */
async function patientNamed(ctx: Context, named: PatientKey): Promise<Named> {
  const { store } = ctx.options;
  const stored = await store.get(named);
  if (stored?.mergedInto === undefined) return { key: named, known: stored, outdated: false };
  let key = stored.mergedInto;
  let known = await store.get(key);
  for (let hop = 1; known?.mergedInto !== undefined && hop < MERGES_FOLLOWED; hop++) {
    key = known.mergedInto;
    known = await store.get(key);
  }
  return { key, known, outdated: known !== undefined && stored.sentAt !== undefined && sentEarlier(ctx.header.sentAt, stored.sentAt, senderZone(ctx)) };
}

/**
 * What a message says of its patient as the record `found` takes it. Under a merged number it is the
 * survivor's, under the survivor's identifiers (its checks and chart Patient are the survivor's); made
 * before the merge that the survivor's own insurance won, it is the duplicate's as it was, which the
 * merge settled: the survivor keeps their details and insurance, as had it been delivered in time.
 */
function saidOf(found: Named, named: PatientKey, read: PatientDemographics, statesInsurance: boolean): { patient: PatientDemographics; stated: boolean } {
  const { key, known, outdated } = found;
  if (known && outdated) return { patient: known.patient, stated: false };
  return { patient: known && key !== named ? { ...read, identifiers: known.patient.identifiers } : read, stated: statesInsurance };
}

/**
 * The date of service: where the clinic is, when clinics.json names its time zone and the start was
 * written with an offset, as an engine that writes times in UTC sends them (a 5 pm visit in
 * California, 202406110000+0000, was dated the 11th); else as written, in the sender's local time.
 * A start written with the clinic's own offset is dated as written either way.
 */
function dateOfVisit(ctx: Context, appointment: AppointmentReading, clinicId: string): string {
  const timeZone = clinicTimeZone(ctx.options.routing, clinicId);
  if (timeZone === undefined) return appointment.dateOfService;
  // The start read again as written, for a clinic whose zone is known only: most practices name none.
  return dayIn(firstValue(ctx.message.segments, ctx.profile.appointment.start)?.value ?? '', timeZone) ?? appointment.dateOfService;
}

/** A W ERR for each plan this message states that is not in force on the day of the visit: it makes no check. */
function notInForce(insurance: InsuranceReading, dateOfService: string): Hl7Problem[] {
  const warnings: Hl7Problem[] = [];
  insurance.coverages.forEach((coverage, i) => {
    const place = dayInPlan(coverage, dateOfService);
    if (place === 'within') return;
    const where = { segment: 'IN1', sequence: insurance.sequences[i] ?? 1, field: place === 'ended' ? 13 : 12 };
    warnings.push(warningAt(where, 102, place === 'ended' ? 'plan ended before the date of service: not verified' : 'plan begins after the date of service: not verified'));
  });
  return warnings;
}

/**
 * An AE ERR for the patient's birth date and each subscriber's this message states that is after
 * `latest` (a booking's date of service; a record's day after it was received, so a newborn east
 * of UTC is not refused): a year mistyped (2062 for 1962) would spend a verification on a member
 * the portal cannot find, and the front desk would read "patient not found" instead of the typo;
 * kept on file from an ADT, every later booking would. The value is not quoted: the sender has
 * it, and an ACK's text may reach a log.
 */
function bornAfter(ctx: Context, patient: PatientDemographics, insurance: InsuranceReading, latest: { date: string; said: string }): Hl7Problem[] {
  const { message, profile } = ctx;
  const problems: Hl7Problem[] = [];
  const reason = (who: string) => `${who} birth date is ${latest.said}`;
  const stated = firstValue(message.segments, profile.patient.birthDate);
  if (stated && patient.birthDate > latest.date) problems.push(problemAt(whereFound(stated), 102, reason('patient')));
  const groups = groupsOf(message.segments, 'IN1');
  insurance.coverages.forEach(({ subscriber }, i) => {
    if (subscriber.relationship === 'self' || subscriber.birthDate === undefined || subscriber.birthDate <= latest.date) return;
    const group = groups.find((g) => g[0]?.sequence === insurance.sequences[i]) ?? [];
    const found = firstValue(group, profile.insurance.subscriberBirthDate);
    if (found) problems.push(problemAt(whereFound(found), 102, reason('subscriber')));
  });
  return problems;
}

/**
 * Whether the message was made before the record's last word on the patient (a merge's, or a
 * message stating insurance, which the pipeline orders by MSH-7): its PID and IN1 change nothing
 * then, and make no check, so a typo corrected since is no reason to refuse it.
 */
function olderThanRecord(ctx: Context, found: Named, insurance: Pick<InsuranceReading, 'present'>): boolean {
  return found.outdated || (insurance.present && found.known?.sentAt !== undefined && sentEarlier(ctx.header.sentAt, found.known.sentAt, senderZone(ctx)));
}

/** The time zone the sender's MSH-7 is read in, when clinics.json says (senderTimeZone). */
const senderZone = (ctx: Context): string | undefined => senderTimeZone(ctx.options.routing, ctx.facility);

function missingSegments(message: Hl7Message, ...names: string[]): Hl7Problem[] {
  return names.filter((name) => !message.first(name)).map((name) => problemAt({ segment: name, sequence: 1 }, 100, 'segment missing'));
}

/**
 * A second SCH or PID, where a message is read as one appointment of one patient: the readers take
 * the first's values, so a second appointment was answered AA and never booked, and a second
 * patient's IN1 was read as the first patient's plan (a check of it under their name, a Coverage in
 * their chart, and the plan kept on their record; from an ADT, the plan kept alone). SIU allows patient
 * groups to repeat; none is read. A cancellation goes by its SCH's appointment id alone, so a second PID
 * there is not refused.
 */
function repeatedSegments(message: Hl7Message, ...names: Array<keyof typeof REPEATED>): Hl7Problem[] {
  return names.flatMap((name) => (message.segments.some((s) => s.name === name && s.sequence === 2) ? [problemAt({ segment: name, sequence: 2 }, 100, REPEATED[name])] : []));
}

const REPEATED = {
  SCH: 'a second appointment in one message: not read, nor the first',
  PID: "a second patient in one message: not read, nor the first (each patient's IN1 would be taken for the first's)",
} as const;

function readClinic(ctx: Context, problems: Hl7Problem[]): string | undefined {
  const { message, profile, options } = ctx;
  // Every facility path counts (MSH-4 and the location's own facility, AIL-3.4), not just the first valued.
  const facilities: string[] = [];
  for (const path of profile.clinic.facility) {
    const found = firstValue(message.segments, [path]);
    if (found) facilities.push(found.value);
  }
  const location = firstValue(message.segments, profile.clinic.location);
  const clinicId = resolveClinic(options.routing, { hl7Facilities: facilities, hl7Location: location?.value });
  if (!clinicId) {
    const where = whereMissing(message.segments, profile.clinic.facility);
    problems.push(problemAt(where, 103, 'sending facility matches no clinic in mappings/clinics.json and there is no default'));
  }
  return clinicId;
}

function source(ctx: Context, appointmentId: string | undefined) {
  const { header, sendingApplication } = ctx;
  return {
    messageControlId: ctx.controlId,
    messageType: messageTypeOf(header),
    receivedAt: ctx.options.receivedAt,
    ...(sendingApplication && { sendingApplication }),
    ...(ctx.facility && { sendingFacility: ctx.facility }),
    ...(appointmentId !== undefined && { appointmentId }),
  };
}

function recordOf(
  ctx: Context,
  patient: PatientDemographics,
  coverages: KnownCoverage[],
  appointments: KnownAppointment[],
  insuranceKnown: boolean,
): PatientInsuranceRecord {
  return { patient, coverages, appointments, insuranceKnown, updatedAt: ctx.options.receivedAt, messageControlId: ctx.controlId };
}

/** Whether a record states what the one on file did of the patient and their insurance (appointments aside). */
function sameDetails(known: PatientInsuranceRecord | undefined, record: PatientInsuranceRecord): boolean {
  return (
    known !== undefined &&
    insuranceKnownIn(known) === record.insuranceKnown &&
    samePlainData(known.patient, record.patient) &&
    samePlainData(known.coverages, record.coverages)
  );
}

/** Records written before insuranceKnown existed knew insurance exactly when they held some. */
function insuranceKnownIn(record: PatientInsuranceRecord | undefined): boolean {
  return record?.insuranceKnown ?? (record !== undefined && record.coverages.length > 0);
}

/**
 * The keys no remembered appointment still holds: the ones to withdraw. Appointments of one
 * patient on one day share a key (one verification covers the day), so cancelling or moving one
 * of them must not withdraw the check the others still need.
 */
function unheld(keys: readonly string[], appointments: readonly KnownAppointment[]): string[] {
  if (keys.length === 0) return [];
  return keys.filter((k) => !appointments.some((a) => a.keys.includes(k)));
}

function remember(appointments: readonly KnownAppointment[], latest: KnownAppointment): KnownAppointment[] {
  return [...appointments.filter((a) => a.appointmentId !== latest.appointmentId), latest].slice(-KEPT_APPOINTMENTS);
}

