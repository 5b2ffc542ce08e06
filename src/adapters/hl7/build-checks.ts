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

/** One check per insurance, validated before it leaves the adapter. */
export function buildChecks(input: {
  clinicId: string;
  patient: PatientDemographics;
  coverages: readonly KnownCoverage[];
  dateOfService: string;
  provider?: Provider | undefined;
  source: CheckSourceFields;
  resolver?: PayerResolver | undefined;
  /** The message's warnings, one line each; every check it makes carries them. */
  warnings?: readonly string[];
}): EligibilityCheck[] {
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
    return EligibilityCheck.parse({ idempotencyKey: idempotencyKey(body), source: { kind: 'hl7', ...input.source }, ...body, ...warnings });
  });
}
