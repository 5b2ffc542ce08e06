import { isDataTypeLoaded } from '@medplum/core';
import type { Observation } from 'fhir/r4';
import { loadR4Validation, validateR4 } from '../../../src/adapters/fhir/validate';
import { convertResult } from './corpus';

/**
 * loadR4Validation reads the R4 definitions in a worker thread and keeps the data types and the
 * resource types the plugin writes. This file runs in a module registry of its own, so nothing
 * was indexed before it.
 */
describe('loadR4Validation', () => {
  it('indexes the types the plugin writes and not the others', async () => {
    expect(isDataTypeLoaded('CoverageEligibilityResponse')).toBe(false);
    await loadR4Validation();
    for (const type of ['CoverageEligibilityResponse', 'CoverageEligibilityRequest', 'Patient', 'Coverage', 'Location', 'Practitioner', 'CodeableConcept', 'Extension']) {
      expect([type, isDataTypeLoaded(type)]).toEqual([type, true]);
    }
    expect(isDataTypeLoaded('Observation')).toBe(false);
  });

  it('validates with both validators and the fm-status codes from what it loaded', () => {
    const response = convertResult('completed-full');
    expect(validateR4(response)).toEqual([]);
    const wrong = { ...response, status: 'bogus', outcome: 'done', insurance: [{ ...response.insurance?.[0], inforce: 'yes' }] } as unknown as typeof response;
    expect(validateR4(wrong).map((i) => `${i.expression} [${i.code}]`).sort()).toEqual([
      'CoverageEligibilityResponse.insurance[0].inforce [structure]',
      'CoverageEligibilityResponse.outcome [code-invalid]',
      'CoverageEligibilityResponse.status [code-invalid]',
    ]);
  });

  it('still validates a resource of another type, indexing every definition for it', () => {
    const observation = { resourceType: 'Observation', status: 'final', code: { text: 'x' }, valueQuantity: { value: 'high' } } as unknown as Observation;
    expect(validateR4(observation).map((i) => i.expression)).toContain('Observation.value[x].value');
    expect(isDataTypeLoaded('Observation')).toBe(true);
  });
});
