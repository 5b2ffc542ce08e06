import type { EligibilityCheck } from '../../../../src/domain';
import { toCoverageEligibilityRequest, toCoverageEligibilityResponse } from '../../../../src/adapters/fhir/out';
import { validateR4 } from '../../../../src/adapters/fhir/validate';
import { toOutcome } from '../../../../src/verification/outcome';
import { bundleNames, checksOf, convertFixture, CREATED, readResult, RESULT_REFS, testPayers } from '../corpus';

/** Every check the FHIR fixtures make, as the request it is verified for. */
const checks = bundleNames().flatMap((name) => checksOf(convertFixture(name, testPayers)).map((check) => ({ name, check })));
const [self] = checks.filter((c) => c.name === 'self').map((c) => c.check) as [EligibilityCheck];

describe('toCoverageEligibilityRequest', () => {
  it('makes a valid R4 request for every check of the corpus (chart references given where the source has none)', () => {
    expect(checks.length).toBeGreaterThanOrEqual(5);
    for (const { check } of checks) {
      const refs = check.source.kind === 'fhir' && check.source.patient.startsWith('Patient/') ? {} : { patient: 'Patient/p1', coverage: 'Coverage/c1' };
      expect(validateR4(toCoverageEligibilityRequest(check, refs, { created: CREATED }))).toEqual([]);
    }
  });

  it('asks for validation and dental benefits of the check\'s coverage on its date of service', () => {
    const request = toCoverageEligibilityRequest(self, {}, { created: CREATED });
    expect(request).toMatchObject({
      status: 'active',
      purpose: ['validation', 'benefits'],
      patient: { reference: 'Patient/pat-ellen' },
      servicedDate: '2026-12-01',
      created: CREATED,
      insurance: [{ focal: true, coverage: { reference: 'Coverage/cov-ellen-delta' } }],
      identifier: [{ system: 'https://dental-elig.dev/fhir/sid/eligibility-check', value: self.idempotencyKey }],
    });
    expect(request.item?.[0]?.category?.coding?.[0]).toEqual({ system: 'https://x12.org/codes/service-type-codes', code: '35', display: 'Dental Care' });
  });

  it('names the insurer by the resolved common payer id, the provider by NPI and the facility by clinicId when the chart has no references', () => {
    const request = toCoverageEligibilityRequest(self);
    expect(request.insurer).toEqual({
      type: 'Organization',
      identifier: { system: 'https://dental-elig.dev/fhir/sid/payer-id', value: 'CDCA1' },
      display: 'Delta Dental of California',
    });
    expect(request.provider).toEqual({ type: 'Practitioner', identifier: { system: 'http://hl7.org/fhir/sid/us-npi', value: '1234567893' }, display: 'Grace Chen' });
    expect(request.facility).toEqual({ type: 'Location', identifier: { system: 'https://dental-elig.dev/fhir/sid/clinic-id', value: 'cln_sandbox_main' } });
    const referenced = toCoverageEligibilityRequest(self, { insurer: 'Organization/o1', provider: 'Practitioner/p1', facility: 'Location/l1' });
    expect([referenced.insurer.reference, referenced.provider?.reference, referenced.facility?.reference]).toEqual(['Organization/o1', 'Practitioner/p1', 'Location/l1']);
  });

  it('needs Patient and Coverage references for a check whose source is not a FHIR server', () => {
    const hl7: EligibilityCheck = { ...self, source: { kind: 'hl7', messageControlId: 'MSG1', messageType: 'SIU^S12', receivedAt: CREATED } };
    expect(() => toCoverageEligibilityRequest(hl7)).toThrow('patient: required: the check has no FHIR source to take it from');
    expect(toCoverageEligibilityRequest(hl7, { patient: 'Patient/p1', coverage: 'Coverage/c1' }).patient).toEqual({ reference: 'Patient/p1' });
  });

  it('carries the correlationId once known, so the response\'s logical request reference finds it', () => {
    const body = readResult('completed-full') as { correlationId: string };
    const request = toCoverageEligibilityRequest(self, {}, { correlationId: body.correlationId });
    const response = toCoverageEligibilityResponse(toOutcome(body), RESULT_REFS, { created: CREATED });
    expect(request.identifier).toContainEqual(response.request.identifier);
  });
});
