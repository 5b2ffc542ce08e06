import type { CoverageEligibilityRequest, Reference } from 'fhir/r4';
import type { EligibilityCheck } from '../../../domain';
import { FhirInputError } from '../operation-outcome';
import { systemUrl } from '../systems';
import { categoryConcept } from './codes';
import { insurerReference, relativeReference } from './references';
import { defined, fhirDateTime, prune } from './values';

export interface RequestRefs {
  /** Patient/<id>; defaults to the check's FHIR source. */
  patient?: string | undefined;
  /** Coverage/<id>; defaults to the check's FHIR source. */
  coverage?: string | undefined;
  /** Organization/<id>; absent: a logical reference by the payer the check names. */
  insurer?: string | undefined;
  /** Practitioner/<id>; absent: a logical reference by the provider's NPI. */
  provider?: string | undefined;
  /** Location/<id>; absent: a logical reference by the verification-service clinicId. */
  facility?: string | undefined;
}

export interface RequestOptions {
  created?: string | undefined;
  /** Once the service has answered: lets the response's logical request reference find this request. */
  correlationId?: string | undefined;
}

/**
 * The CoverageEligibilityRequest a verification answers: dental-care benefits and validation
 * for the check's coverage on its date of service, identified by the check's idempotency key.
 */
export function toCoverageEligibilityRequest(check: EligibilityCheck, refs: RequestRefs = {}, options: RequestOptions = {}): CoverageEligibilityRequest {
  const source = check.source.kind === 'fhir' ? check.source : undefined;
  const resolved = check.coverage.resolution?.status === 'resolved' ? check.coverage.resolution : undefined;
  const provider = check.provider;
  const request: CoverageEligibilityRequest = {
    resourceType: 'CoverageEligibilityRequest',
    identifier: defined([
      { system: systemUrl('eligibilityCheck'), value: check.idempotencyKey },
      options.correlationId ? { system: systemUrl('correlationId'), value: options.correlationId } : undefined,
    ]),
    status: 'active',
    purpose: ['validation', 'benefits'],
    patient: relativeReference('Patient', required(refs.patient ?? source?.patient, 'patient'), 'patient'),
    servicedDate: check.dateOfService,
    created: fhirDateTime(options.created, 'created') ?? new Date().toISOString(),
    provider: refs.provider
      ? relativeReference('Practitioner', refs.provider, 'provider')
      : provider?.npi
        ? { type: 'Practitioner', identifier: { system: systemUrl('npi'), value: provider.npi }, display: providerName(provider) }
        : undefined,
    insurer: insurerReference(refs.insurer, resolved ? { name: resolved.name, id: resolved.commonPayerId } : check.coverage.payer),
    facility: refs.facility ? relativeReference('Location', refs.facility, 'facility') : clinicReference(check.clinicId),
    insurance: [{ focal: true, coverage: relativeReference('Coverage', required(refs.coverage ?? source?.coverage, 'coverage'), 'coverage') }],
    item: [{ category: categoryConcept(undefined) }],
  };
  return prune(request);
}

function required(value: string | undefined, field: string): string {
  if (value === undefined) throw new FhirInputError([{ expression: field, diagnostics: 'required: the check has no FHIR source to take it from', code: 'required' }]);
  return value;
}

function providerName(p: NonNullable<EligibilityCheck['provider']>): string | undefined {
  return [p.firstName, p.lastName].filter(Boolean).join(' ') || undefined;
}

function clinicReference(clinicId: string): Reference {
  return { type: 'Location', identifier: { system: systemUrl('clinicId'), value: clinicId } };
}
