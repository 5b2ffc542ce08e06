import { hash } from 'node:crypto';
import * as z from 'zod';
import { IsoDate, IsoInstant, NonEmpty } from './primitives';
import { PayerResolution } from './payer';

/**
 * The hub type: every inbound adapter (HL7 v2, FHIR) produces EligibilityChecks and every
 * outbound step consumes them. One appointment with primary and secondary insurance gives two.
 */

export const Relationship = z.enum(['self', 'spouse', 'child', 'other']);
export type Relationship = z.infer<typeof Relationship>;

/** FHIR administrative-gender; adapters translate their own code tables into it. */
export const Gender = z.enum(['female', 'male', 'other', 'unknown']);
export type Gender = z.infer<typeof Gender>;

export const CoverageOrder = z.enum(['primary', 'secondary', 'tertiary']);
export type CoverageOrder = z.infer<typeof CoverageOrder>;

export const Identifier = z.strictObject({
  /** Assigning authority or FHIR identifier system, when the source names one. */
  system: z.string().optional(),
  /** HL7 table 0203 / FHIR identifier type code (MR, MB, SS, ...). */
  type: z.string().optional(),
  value: NonEmpty,
});
export type Identifier = z.infer<typeof Identifier>;

const PersonName = {
  firstName: NonEmpty,
  middleName: z.string().optional(),
  lastName: NonEmpty,
};

export const Patient = z.strictObject({
  ...PersonName,
  birthDate: IsoDate,
  gender: Gender.optional(),
  identifiers: z.array(Identifier),
  /** The patient's own member number where the plan issues one to dependents (HL7 IN2-61). */
  memberId: z.string().optional(),
});
export type Patient = z.infer<typeof Patient>;

export const Subscriber = z.strictObject({
  ...PersonName,
  birthDate: IsoDate.optional(),
  memberId: NonEmpty,
  relationship: Relationship,
});
export type Subscriber = z.infer<typeof Subscriber>;

/** The payer as the practice-management system names it; at least a name or an id. */
export const PayerAsNamed = z
  .strictObject({
    name: z.string().optional(),
    id: z.string().optional(),
  })
  .refine((p) => Boolean(p.name?.trim() || p.id?.trim()), { error: 'needs a payer name or id' });
export type PayerAsNamed = z.infer<typeof PayerAsNamed>;

/**
 * The days a plan is in force, both included, as the source states them; either bound may be
 * missing. Neither: the source deleted the dates it had stated (HL7's null, ""), and the chart's
 * Coverage loses its period, where a plan with no period at all leaves the Coverage's as it is.
 */
export const PlanPeriod = z.strictObject({ start: IsoDate.optional(), end: IsoDate.optional() });
export type PlanPeriod = z.infer<typeof PlanPeriod>;

/** Whether a period is one whose dates the source deleted (see PlanPeriod). */
export function datesDeleted(period: PlanPeriod | undefined): boolean {
  return period !== undefined && period.start === undefined && period.end === undefined;
}

/** Whether two periods state the same days (a FHIR Period's own id and extensions aside). */
export function samePeriod(a: PlanPeriod | undefined, b: PlanPeriod | undefined): boolean {
  return a?.start === b?.start && a?.end === b?.end;
}

export const CoverageInfo = z.strictObject({
  order: CoverageOrder,
  payer: PayerAsNamed,
  /** Present when a payer catalog was at hand during conversion. */
  resolution: PayerResolution.optional(),
  groupNumber: z.string().optional(),
  groupName: z.string().optional(),
  planName: z.string().optional(),
  /**
   * HL7 IN1-12 and IN1-13, written into the chart's Coverage.period: with next year's plan sent
   * beside this year's, the chart tells which is in force when. Not in the check's key nor its
   * fingerprint: a date the PMS corrects changes no verification. A FHIR source's Coverage is its
   * own and is not written, so its period stays there.
   */
  period: PlanPeriod.optional(),
});
export type CoverageInfo = z.infer<typeof CoverageInfo>;

export const Provider = z.strictObject({
  npi: z.string().optional(),
  taxId: z.string().optional(),
  firstName: z.string().optional(),
  lastName: z.string().optional(),
});
export type Provider = z.infer<typeof Provider>;

export const Hl7Source = z.strictObject({
  kind: z.literal('hl7'),
  messageControlId: NonEmpty,
  /** MSH-9's type and event in upper case, as the profile names them, e.g. SIU^S12. */
  messageType: NonEmpty,
  sendingApplication: z.string().optional(),
  sendingFacility: z.string().optional(),
  appointmentId: z.string().optional(),
  receivedAt: IsoInstant,
});

export const FhirSource = z.strictObject({
  kind: z.literal('fhir'),
  /** Relative references as the source server knows them, e.g. Appointment/123. */
  appointment: z.string().optional(),
  patient: NonEmpty,
  coverage: NonEmpty,
  /** The Coverage's payor Organization, when the server holds it: the insurer the response names. */
  insurer: z.string().optional(),
  receivedAt: IsoInstant,
});

export const CheckSource = z.discriminatedUnion('kind', [Hl7Source, FhirSource]);
export type CheckSource = z.infer<typeof CheckSource>;

export const EligibilityCheck = z.strictObject({
  idempotencyKey: NonEmpty,
  source: CheckSource,
  clinicId: NonEmpty,
  patient: Patient,
  subscriber: Subscriber,
  coverage: CoverageInfo,
  provider: Provider.optional(),
  dateOfService: IsoDate,
  /**
   * What the source got wrong that the check goes ahead without, one line each naming the field,
   * never its value: `AIP-3.1: provider NPI fails the check digit: verified without it`.
   */
  warnings: z.array(NonEmpty).optional(),
});
export type EligibilityCheck = z.infer<typeof EligibilityCheck>;

/**
 * A stable key: the same clinic, patient, coverage and date of service always give the same key,
 * so one appointment event received twice makes one verification, while a reschedule to another
 * day makes a new one. Hashed so the key carries no patient data in clear.
 */
export function idempotencyKey(check: Omit<EligibilityCheck, 'idempotencyKey' | 'source' | 'warnings'>): string {
  const patientIdentity = check.patient.identifiers[0]
    ? [check.patient.identifiers[0].system ?? '', check.patient.identifiers[0].value]
    : [check.patient.lastName.toUpperCase(), check.patient.firstName.toUpperCase(), check.patient.birthDate];
  const parts = [
    check.clinicId,
    ...patientIdentity,
    check.coverage.payer.id ?? check.coverage.payer.name?.toUpperCase() ?? '',
    check.subscriber.memberId,
    check.dateOfService,
  ];
  return `elig_${hash('sha256', JSON.stringify(parts), 'hex').slice(0, 32)}`;
}
