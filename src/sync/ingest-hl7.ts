import { createHash } from 'node:crypto';
import type { PatientInsuranceRecord, PatientInsuranceStore, PatientKey } from '../domain';
import {
  ackFor,
  buildChecks,
  handleHl7Message,
  describeProblem,
  describeProblems,
  messageControlId,
  readMessageHeader,
  resendIdentity,
  sentEarlier,
  type Ack,
  type AppointmentBasis,
  type HeldBooking,
  type Hl7Mappings,
  type Hl7Outcome,
  type Hl7Result,
  type PatientMerge,
} from '../adapters/hl7';
import { senderTimeZone, type ClinicRouting } from '../adapters/clinic-routing';
import type { AppointmentRow, JobStore, MessageRow, StoreTx } from './job-store';
import { endDroppedPlans, scheduleAppointment, stillToCome, type AppointmentEvent, type ScheduleContext } from './schedule';

export interface Hl7IngestOptions {
  mappings: Hl7Mappings;
  routing: ClinicRouting;
  now: () => Date;
  policy: ScheduleContext['policy'];
  /** Handle a stored message again (jobs replay): it is stored anew, and the earlier copy says so. */
  replayOf?: number;
}

export interface Hl7Ingested {
  /** The stored message's id (`jobs messages`, `jobs replay`). */
  messageId: number;
  acks: Ack[];
  /** Undefined for a repeat of a message already handled: it was answered as before and not applied again. */
  result: Hl7Result | undefined;
  created: string[];
  withdrawn: string[];
}

/**
 * One HL7 message into the store: the message as received, its effects on the patient's
 * insurance, the appointment and the checks, and the ACKs it was answered with all commit in one
 * transaction, before the ACKs are sent. A failed commit changes nothing, so the sender's resend
 * works; a resend of a message already committed gets the same ACKs and changes nothing.
 * Transactions run one at a time, so messages for one patient apply in the order they arrived,
 * whatever connection brought them; an appointment's own messages in the order they were sent (MSH-7).
 */
export function ingestHl7(store: JobStore, text: string, options: Hl7IngestOptions): Promise<Hl7Ingested> {
  const receivedAt = options.now();
  return store.transaction(async (tx) => {
    const received = (dedupeKey: string) => tx.addMessage({ kind: 'hl7', dedupeKey, receivedAt: receivedAt.toISOString(), raw: text, status: 'received' });
    let { message, duplicate } = await received(options.replayOf === undefined ? dedupeKeyOf(text) : `replay:${options.replayOf}:${receivedAt.toISOString()}`);
    // Compared only for a control id seen before: most messages are new, and this runs on each.
    const identity = duplicate ? resendIdentity(text) : undefined;
    if (identity !== undefined && resendIdentity(message.raw) !== identity) {
      // The sender reused a control id for a different message: it is kept under a key of its own,
      // by which a resend of it is known too.
      ({ message, duplicate } = await received(`${message.dedupeKey}#${digest(identity).slice(0, 16)}`));
    }
    if (duplicate && message.answer !== undefined) {
      return { messageId: message.id, acks: JSON.parse(message.answer) as Ack[], result: undefined, created: [], withdrawn: [] };
    }
    const patients = patientStore(tx);
    const result = await handleHl7Message(text, {
      mappings: options.mappings,
      routing: options.routing,
      store: patients,
      receivedAt: receivedAt.toISOString(),
    });
    const facility = result.header?.sendingFacility.split(result.header.delimiters.component)[0]?.trim() ?? '';
    const sent = { facility, sentAt: result.header?.sentAt ?? '', timeZone: senderTimeZone(options.routing, facility) };
    const appointmentId = appointmentIdOf(result.outcome);
    const last = appointmentId === undefined ? undefined : await tx.getAppointment(appointmentKey(facility, appointmentId));
    const superseded = supersededBy(last, sent);
    // A message older than the appointment's last one changes nothing; one older than the patient's last, not the patient's record.
    const stale = superseded ? undefined : await patients.commit(statesInsurance(result) ? sent.sentAt : undefined, sent.timeZone);
    const outcome = stale ? fromRecord(result.outcome, stale) : result.outcome;
    const { created, withdrawn } = superseded ? { created: [], withdrawn: [] } : await apply(tx, outcome, sent, last, { now: receivedAt, policy: options.policy }, message);
    const acks = ackFor(result, { now: receivedAt });
    const rejected = result.outcome.kind === 'reject';
    // What the ACK warned of is kept with it: a booking that made no check (its plan ended before the visit) says why, not only `self-pay`.
    const warned = result.warnings?.length ? `; warned: ${result.warnings.map(describeProblem).join('; ')}` : '';
    const detail =
      (superseded ? `${describe(result.outcome)}; not applied: sent (MSH-7) before the appointment's last message`
      : stale ? `${describe(outcome)}; the patient's details and insurance not applied: sent (MSH-7) before the message that last changed them`
      : describe(result.outcome)) + (!superseded && holdsVisit(outcome, last) ? HELD : '') + warned;
    // A refusal the appointment's later message overtook leaves a person nothing to do: the visit is that message's.
    await tx.updateMessage(message.id, { status: rejected && !superseded ? 'dead' : 'handled', detail, answer: JSON.stringify(acks) });
    if (options.replayOf !== undefined) await tx.updateMessage(options.replayOf, { status: 'handled', detail: `replayed as message ${message.id}` });
    return { messageId: message.id, acks, result, created, withdrawn };
  });
}

/** The appointment a message names, whose row says what was applied to it last. */
function appointmentIdOf(outcome: Hl7Outcome): string | undefined {
  if (outcome.kind === 'book' || outcome.kind === 'reschedule' || outcome.kind === 'cancel') return outcome.appointmentId;
  return outcome.kind === 'reject' ? outcome.held?.appointmentId : undefined;
}

/** A sender's message is known by its application, facility and control id (derived from its content when MSH-10 is empty). */
function dedupeKeyOf(text: string): string {
  const header = readMessageHeader(text);
  return [header?.sendingApplication ?? '', header?.sendingFacility ?? '', messageControlId(header, text)].join('|');
}

/** Where a message came from and when its sender says it was made: an appointment's messages are applied in that order. */
interface Sent {
  facility: string;
  sentAt: string;
  /** The zone the sender's clock keeps (senderTimeZone), when known: its MSH-7 without an offset is read in it. */
  timeZone: string | undefined;
}

/** What an appointment's row keeps of the last message applied to it, beside what its checks are built from. */
interface Stamped {
  sentAt?: string;
  /** An appointment awaiting correction: the letter of the booking refused (its id, and its key, by which the store finds it). */
  heldBy?: { messageId: number; dedupeKey: string };
}

/** The message id of the letter a booking awaiting correction is held by (jobs messages). */
export function heldLetterOf(appointment: AppointmentRow): number | undefined {
  return appointment.status === 'awaiting-correction' ? (appointment.basis as Stamped).heldBy?.messageId : undefined;
}

/**
 * A booking held for a correction by a message sent (MSH-7) after `sent`: what `sent` says of the
 * patient was said before the booking was refused, so corrects nothing of it (an ADT an engine
 * delivered late), whether it changes the record or restates it.
 */
function heldSince(appointment: AppointmentRow, sent: Sent): boolean {
  const heldSentAt = (appointment.basis as Stamped).sentAt;
  return appointment.status === 'awaiting-correction' && heldSentAt !== undefined && sent.sentAt !== '' && sentEarlier(sent.sentAt, heldSentAt, sent.timeZone);
}

/** Said after a held booking's reason, in its letter. */
const HELD = "; its visit is held: booked from the patient's record once an ADT corrects it";

/**
 * Whether a booking refused for the patient's details holds its visit: one not booked before, held
 * already, or cancelled (booked again: it has no checks to keep). A booked visit keeps its checks,
 * as a message refused changes nothing of it.
 */
function holdsVisit(outcome: Hl7Outcome, last: AppointmentRow | undefined): outcome is Extract<Hl7Outcome, { kind: 'reject' }> & { held: HeldBooking } {
  return outcome.kind === 'reject' && outcome.held !== undefined && (last === undefined || last.status === 'awaiting-correction' || last.status === 'cancelled');
}

/**
 * The letter of a held booking let go of, handled, once its visit no longer waits for it (booked
 * from a corrected record, booked, moved, cancelled or refused again by a later message): it stood
 * in dental_elig_dead_letters, an alert firing, for what the PMS has since done.
 */
async function releaseHeld(tx: StoreTx, appointment: AppointmentRow | undefined, why: string): Promise<void> {
  // Any status: one corrected into awaiting-insurance keeps its letter until booked (rebuildAppointments).
  const by = (appointment?.basis as Stamped | undefined)?.heldBy;
  const letter = by && (await tx.findMessage('hl7', by.dedupeKey));
  if (letter?.id !== by?.messageId || letter?.status !== 'dead') return;
  await tx.updateMessage(letter.id, { status: 'handled', detail: `${letter.detail ?? ''}; handled: ${why}` });
}

/**
 * Whether the message was sent (MSH-7) before the last one applied to its appointment (`last`, as
 * stored): a move or a booking that arrives after the cancellation or the move that followed it,
 * from an engine that sends on several connections or resends what it could not deliver.
 */
function supersededBy(last: AppointmentRow | undefined, sent: Sent): boolean {
  const lastSentAt = (last?.basis as Stamped | undefined)?.sentAt;
  return sent.sentAt !== '' && lastSentAt !== undefined && sentEarlier(sent.sentAt, lastSentAt, sent.timeZone);
}

/**
 * What the message does to the store; `last` is its appointment as stored before it, when it
 * names one, and `letter` the message as stored (a held booking's row names it).
 */
async function apply(
  tx: StoreTx,
  outcome: Hl7Outcome,
  sent: Sent,
  last: AppointmentRow | undefined,
  ctx: ScheduleContext,
  letter: Pick<MessageRow, 'id' | 'dedupeKey'>,
): Promise<{ created: string[]; withdrawn: string[] }> {
  const { facility } = sent;
  const stamp: Stamped = sent.sentAt === '' ? {} : { sentAt: sent.sentAt };
  const nextMessage = `the visit's next message came at ${ctx.now.toISOString()}`;
  switch (outcome.kind) {
    case 'book':
    case 'reschedule': {
      await releaseHeld(tx, last, nextMessage);
      const basis: AppointmentBasis & Stamped = { ...outcome.appointment, ...stamp };
      const status = outcome.awaitingInsurance ? 'awaiting-insurance' : outcome.selfPay ? 'self-pay' : 'booked';
      const event = appointmentEvent(facility, outcome.patientKey, basis, outcome.appointmentId);
      const own = await scheduleAppointment(tx, { ...event, status, checks: outcome.checks }, ctx);
      // What a booking says of the patient (a corrected name, a new member id) is the record now, as after an ADT:
      // their other appointments to come are verified with it, not with what was said when they were booked.
      if (!outcome.record) return own;
      const others = await reevaluateAppointments(tx, outcome, outcome.record, sent, ctx, event.key);
      return { created: [...own.created, ...others.created], withdrawn: [...own.withdrawn, ...others.withdrawn] };
    }
    case 'cancel': {
      await releaseHeld(tx, last, nextMessage);
      if (last) return scheduleAppointment(tx, { ...last, basis: { ...(last.basis as object), ...stamp }, status: 'cancelled', checks: [] }, ctx);
      const key = appointmentKey(facility, outcome.appointmentId);
      // A cancellation that overtook its booking is kept, so the booking, sent before it, books nothing when it comes.
      // One without PID names no patient: the appointment's key is enough for that, and a booking sent after it takes the row.
      if (stamp.sentAt !== undefined) {
        const patientKey = patientKeyText(outcome.patientKey ?? { facility, identifier: { value: '' } });
        await tx.putAppointment({ key, patientKey, dateOfService: '', status: 'cancelled', checkKeys: [], basis: stamp, updatedAt: ctx.now.toISOString() });
      }
      return { created: [], withdrawn: [] };
    }
    case 'record':
      if (outcome.record) return reevaluateAppointments(tx, outcome, outcome.record, sent, ctx);
      // An ADT restating what is on file (an A08 sent for a new phone number) changes no appointment's checks, but that of a
      // booking refused for the patient's details since, which the record, as the PMS states it after, corrects.
      return rebuildHeld(tx, outcome.patientKey, sent, ctx);
    case 'merge': {
      const created: string[] = [];
      const withdrawn: string[] = [];
      for (const merge of outcome.merges) {
        const done = await mergeAppointments(tx, merge, ctx);
        created.push(...done.created);
        withdrawn.push(...done.withdrawn);
      }
      return { created, withdrawn };
    }
    case 'reject': {
      if (!holdsVisit(outcome, last)) return { created: [], withdrawn: [] };
      await releaseHeld(tx, last, nextMessage);
      const { held } = outcome;
      const basis: AppointmentBasis & Stamped = { ...held.appointment, ...stamp, heldBy: { messageId: letter.id, dedupeKey: letter.dedupeKey } };
      const event = appointmentEvent(facility, held.patientKey, basis, held.appointmentId);
      return scheduleAppointment(tx, { ...event, status: 'awaiting-correction', checks: [] }, ctx);
    }
    case 'ignore':
      return { created: [], withdrawn: [] };
  }
}

/** The patient's bookings held for a correction, sent before `sent`, built from their record as it stands. */
async function rebuildHeld(tx: StoreTx, key: PatientKey, sent: Sent, ctx: ScheduleContext) {
  const patientKey = patientKeyText(key);
  const held = (await tx.appointmentsOfPatient(patientKey)).filter((a) => a.status === 'awaiting-correction' && !heldSince(a, sent));
  const record = held.length > 0 ? await tx.getPatient(patientKey) : undefined;
  return record ? rebuildAppointments(tx, held, key, record, ctx) : { created: [], withdrawn: [] };
}

/**
 * The patient's record changed (an ADT, or a booking that states other details): their future
 * appointments, but `except`, are evaluated again, so a booking that waited for insurance gets its
 * checks and a corrected member id or name a new verification; and a plan it drops that no visit
 * to come was verifying has its Coverage ended all the same (endDroppedPlans).
 */
async function reevaluateAppointments(
  tx: StoreTx,
  { patientKey: key, droppedMemberIds }: { patientKey: PatientKey; droppedMemberIds?: readonly string[] },
  record: PatientInsuranceRecord,
  sent: Sent,
  ctx: ScheduleContext,
  except?: string,
) {
  const appointments = (await tx.appointmentsOfPatient(patientKeyText(key), except)).filter((a) => !heldSince(a, sent));
  const done = await rebuildAppointments(tx, appointments, key, record, ctx);
  if (droppedMemberIds) await endDroppedPlans(tx, patientKeyText(key), record, droppedMemberIds, ctx.now.toISOString());
  return done;
}

/**
 * A merge: the prior patient's appointments become the survivor's, those to come verified under
 * the survivor (their checks under the prior's identifiers withdrawn while pending, as a move
 * withdraws them; written ones stay in the chart as they are); the survivor's own too when the
 * merge changed its record (the prior's insurance, say, for a survivor that had none).
 */
async function mergeAppointments(tx: StoreTx, merge: PatientMerge, ctx: ScheduleContext) {
  const own = merge.changed ? await tx.appointmentsOfPatient(patientKeyText(merge.patientKey)) : [];
  const moved = await tx.appointmentsOfPatient(patientKeyText(merge.priorKey));
  return rebuildAppointments(tx, [...own, ...moved], merge.patientKey, merge.record, ctx);
}

/** Appointments of the patient `key` names, to come and not cancelled, built again from their record; the others are only kept under `key`. */
async function rebuildAppointments(tx: StoreTx, appointments: AppointmentRow[], key: PatientKey, record: PatientInsuranceRecord, ctx: ScheduleContext) {
  const patientKey = patientKeyText(key);
  const created: string[] = [];
  const withdrawn: string[] = [];
  for (const appointment of appointments) {
    if (appointment.status === 'cancelled' || !stillToCome(appointment, ctx.now, ctx.policy)) {
      if (appointment.patientKey !== patientKey) await tx.putAppointment({ ...appointment, patientKey });
      continue;
    }
    const { checks, status } = checksFromRecord(appointment.basis as AppointmentBasis, record);
    const done = await scheduleAppointment(tx, { ...appointment, patientKey, status, checks }, ctx);
    // A record still without insurance (a PID-only A08 correcting a first booking's birth date) has not the insurance
    // the refused booking carried: its letter stays for a person until insurance comes, the PMS taking it for sent.
    if (status !== 'awaiting-insurance') await releaseHeld(tx, appointment, `booked from the patient's record, corrected at ${ctx.now.toISOString()}`);
    created.push(...done.created);
    withdrawn.push(...done.withdrawn);
  }
  return { created, withdrawn };
}

function appointmentEvent(facility: string, patientKey: PatientKey, basis: AppointmentBasis, appointmentId: string | undefined): Omit<AppointmentEvent, 'status' | 'checks'> {
  return {
    key: appointmentKey(facility, appointmentId ?? `message:${basis.source.messageControlId}`),
    patientKey: patientKeyText(patientKey),
    dateOfService: basis.dateOfService,
    basis,
  };
}

function appointmentKey(facility: string, appointmentId: string): string {
  return `hl7|${facility}|${appointmentId}`;
}

export function patientKeyText(key: PatientKey): string {
  return `hl7|${key.facility}|${key.identifier.system ?? ''}|${key.identifier.value}`;
}

/**
 * The adapter's view of the patient insurance store, inside this message's transaction. What the
 * message says of the patient is kept once it is known to apply (commit), stamped with when the
 * message was sent: a message sent before the appointment's last one leaves the record as that
 * one did, and one sent before the message that last changed the record leaves it too (an A08
 * an engine delivered after the A08 that followed it). commit returns that record, then.
 */
function patientStore(tx: StoreTx): PatientInsuranceStore & { commit(sentAt: string | undefined, timeZone: string | undefined): Promise<PatientInsuranceRecord | undefined> } {
  const said = new Map<string, PatientInsuranceRecord>();
  // What the store held, as the handler read it: commit compares with it rather than read it again.
  const stored = new Map<string, PatientInsuranceRecord | undefined>();
  const read = async (key: string) => (stored.has(key) ? stored.get(key) : stored.set(key, await tx.getPatient(key)).get(key));
  return {
    get: async (key) => said.get(patientKeyText(key)) ?? read(patientKeyText(key)),
    put: async (key, record) => void said.set(patientKeyText(key), record),
    async commit(sentAt, timeZone) {
      // A message stating no insurance (a cancellation, a booking without IN1) keeps the record's time as it was.
      if (sentAt === undefined) {
        for (const [key, record] of said) {
          // A merge's record keeps the time of the insurance it took (the prior's, say); any other keeps the stored one's.
          const sentAt = record.sentAt ?? (await read(key))?.sentAt;
          await tx.putPatient(key, sentAt === undefined ? record : { ...record, sentAt });
        }
        return undefined;
      }
      for (const key of said.keys()) {
        const last = await read(key);
        if (last?.sentAt !== undefined && sentEarlier(sentAt, last.sentAt, timeZone)) return last;
      }
      // A message without MSH-7 leaves no time to order the next one against.
      for (const [key, { sentAt: _former, ...record }] of said) await tx.putPatient(key, sentAt === '' ? record : { ...record, sentAt });
      return undefined;
    },
  };
}

/**
 * Whether the message states the patient's insurance (a booking, a move or an ADT with an IN1, even
 * a self-pay or an empty one), and so is ordered against the record's last by MSH-7. One without (a
 * booking on a scheduling feed that never carries IN1, an A08 for a new phone number) applies as it
 * arrives and leaves the record's time as it was: stamping it would refuse an A08 with the corrected
 * member id, made before it on the ADT feed and delivered after it.
 */
function statesInsurance({ outcome, header }: Hl7Result): boolean {
  return header !== undefined && (outcome.kind === 'book' || outcome.kind === 'reschedule' || outcome.kind === 'record') && outcome.insuranceReceived;
}

/**
 * What a message whose details of the patient are older than the record's still does: a booking
 * books its appointment, its checks built from the record (as an ADT rebuilds them) rather than
 * from the older insurance it carries; nothing else re-evaluates, the record being unchanged.
 */
function fromRecord(outcome: Hl7Outcome, record: PatientInsuranceRecord): Hl7Outcome {
  if (outcome.kind === 'record') {
    const { record: _older, ...rest } = outcome;
    return rest;
  }
  if (outcome.kind !== 'book' && outcome.kind !== 'reschedule') return outcome;
  const { record: _older, ...rest } = outcome;
  const { checks, status } = checksFromRecord(outcome.appointment, record);
  return { ...rest, checks, awaitingInsurance: status === 'awaiting-insurance', selfPay: status === 'self-pay' };
}

/** An appointment's checks built from the patient's record, and the appointment's status with them. */
function checksFromRecord(basis: AppointmentBasis, record: PatientInsuranceRecord): { checks: ReturnType<typeof buildChecks>; status: 'awaiting-insurance' | 'self-pay' | 'booked' } {
  // Stated when the record was, not the booking: the chart's Coverage keeps the later statement (coverage-stated-at).
  const checks = buildChecks({ ...basis, source: { ...basis.source, receivedAt: record.updatedAt }, patient: record.patient, coverages: record.coverages });
  return { checks, status: !record.insuranceKnown ? 'awaiting-insurance' : checks.length === 0 ? 'self-pay' : 'booked' };
}

function describe(outcome: Hl7Outcome): string {
  switch (outcome.kind) {
    case 'book':
    case 'reschedule':
      return `${outcome.kind}: ${outcome.checks.length} checks${outcome.awaitingInsurance ? ', awaiting insurance' : outcome.selfPay ? ', self-pay' : ''}`;
    case 'cancel':
      return 'cancel';
    case 'record':
      return `record: ${outcome.coverageCount} coverages`;
    case 'merge':
      return `merge: ${outcome.merges.length} patients, ${outcome.merges.reduce((n, m) => n + m.appointmentIds.length, 0)} appointments moved`;
    case 'ignore':
      return `ignored: ${outcome.reason}`;
    case 'reject':
      return `rejected: ${describeProblems(outcome.problems)}`;
  }
}

function digest(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
