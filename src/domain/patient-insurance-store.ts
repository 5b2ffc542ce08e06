import * as z from 'zod';
import { IsoDate, IsoInstant, NonEmpty } from './primitives';
import { CoverageInfo, Identifier, Patient, PlanPeriod, Subscriber } from './eligibility-check';

/**
 * What the plugin knows about a patient from earlier messages. Many PMSs send insurance only in
 * registration messages (HL7 ADT) and appointments without it (SIU), so an appointment uses the
 * latest insurance known for its patient. The checks issued for each appointment are kept too, so
 * a reschedule or cancellation can name the keys it replaces.
 */

/** A patient as one sender identifies them: the sending facility plus the patient's identifier there. */
export const PatientKey = z.strictObject({
  facility: z.string(),
  identifier: Identifier.pick({ system: true, value: true }),
});
export type PatientKey = z.infer<typeof PatientKey>;

/** One insurance as last received, before any payer catalog looked at it (the catalog may change). */
export const KnownCoverage = z.strictObject({
  coverage: CoverageInfo.omit({ resolution: true, period: true }),
  subscriber: Subscriber,
  /** The patient's own member number on this plan, where the plan issues one to dependents. */
  patientMemberId: z.string().optional(),
  /** The days the plan is in force, as the sender states them (HL7 IN1-12 and IN1-13): a visit outside them makes no check. */
  period: PlanPeriod.optional(),
});
export type KnownCoverage = z.infer<typeof KnownCoverage>;

export const KnownAppointment = z.strictObject({
  appointmentId: NonEmpty,
  dateOfService: IsoDate,
  /**
   * Idempotency keys of the checks this appointment made, in coverage order. Another appointment
   * of the patient on the same day holds the same keys, so a key is withdrawn only when no
   * remembered appointment holds it any more.
   */
  keys: z.array(NonEmpty),
});
export type KnownAppointment = z.infer<typeof KnownAppointment>;

export const PatientInsuranceRecord = z.strictObject({
  patient: Patient.omit({ memberId: true }),
  /** Empty when the patient is known to pay for themselves, or no insurance has been received yet. */
  coverages: z.array(KnownCoverage),
  /** Whether any message has said what the patient's insurance is (an IN1, even a self-pay one). */
  insuranceKnown: z.boolean().optional(),
  appointments: z.array(KnownAppointment),
  updatedAt: IsoInstant,
  /** The message that last changed the record, for tracing. */
  messageControlId: NonEmpty,
  /** When its sender says that message was made (MSH-7 as sent): one made before it changes the record no more. */
  sentAt: z.string().optional(),
  /**
   * The patient this one was merged into (ADT^A40, A34, A47): the record is a tombstone, holding no
   * insurance or appointments, and what a later message says under this patient's identifier is
   * the survivor's.
   */
  mergedInto: PatientKey.optional(),
});
export type PatientInsuranceRecord = z.infer<typeof PatientInsuranceRecord>;

/**
 * Kept in memory by the HL7 adapter; the service provides a durable one. A put replaces the whole
 * record; callers serialise messages per patient (the MLLP listener handles a connection's
 * messages in order), so the store needs no merge logic of its own.
 */
export interface PatientInsuranceStore {
  get(key: PatientKey): Promise<PatientInsuranceRecord | undefined>;
  put(key: PatientKey, record: PatientInsuranceRecord): Promise<void>;
}
