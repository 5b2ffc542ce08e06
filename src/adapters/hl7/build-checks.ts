import {
  EligibilityCheck,
  idempotencyKey,
  type KnownCoverage,
  type PayerResolver,
  type Provider,
} from '../../domain';
import type { PatientDemographics } from './read-patient';

export interface CheckSourceFields {
  messageControlId: string;
  messageType: string;
  sendingApplication?: string;
  sendingFacility?: string;
  appointmentId?: string;
  receivedAt: string;
}

export interface CheckParts {
  clinicId: string;
  patient: PatientDemographics;
  coverages: readonly KnownCoverage[];
  dateOfService: string;
  provider?: Provider | undefined;
  source: CheckSourceFields;
  resolver?: PayerResolver | undefined;
  /** The message's warnings, one line each; every check it makes carries them. */
  warnings?: readonly string[];
}

/**
 * One check per insurance, from parts that are valid already: the readers checked every datum
 * they cut from the message, so the types carry that and nothing is parsed twice (the corpus and
 * fuzz tests hold the result to the schema).
 */
export function assembleChecks(input: CheckParts): EligibilityCheck[] {
  return input.coverages.map(({ coverage, subscriber, patientMemberId }) => {
    const resolution = input.resolver?.resolve(coverage.payer);
    const body = {
      clinicId: input.clinicId,
      patient: { ...input.patient, ...(patientMemberId && { memberId: patientMemberId }) },
      subscriber,
      coverage: { ...coverage, ...(resolution && { resolution }) },
      ...(input.provider && { provider: input.provider }),
      dateOfService: input.dateOfService,
    };
    const warnings = input.warnings?.length ? { warnings: [...input.warnings] } : {};
    return { idempotencyKey: idempotencyKey(body), source: { kind: 'hl7' as const, ...input.source }, ...body, ...warnings };
  });
}

/**
 * assembleChecks for parts read back from storage (the pipeline builds an appointment's checks
 * again when insurance arrives): they crossed a boundary, so each check is validated.
 */
export function buildChecks(input: CheckParts): EligibilityCheck[] {
  return assembleChecks(input).map((check) => EligibilityCheck.parse(check));
}
