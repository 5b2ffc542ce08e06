import type { Bundle, CoverageEligibilityResponse } from 'fhir/r4';
import { FhirInputError } from '../../../src/adapters/fhir/operation-outcome';
import { assertValidR4, validateR4 } from '../../../src/adapters/fhir/validate';
import { convertResult } from './corpus';

/** Each validator catches what the other misses; validateR4 must report both kinds. */
const valid = convertResult('completed-full');
const edit = (change: (r: Record<string, unknown>) => void) => {
  const copy = structuredClone(valid) as unknown as Record<string, unknown>;
  change(copy);
  return copy as unknown as CoverageEligibilityResponse;
};
const at = (resource: CoverageEligibilityResponse | Bundle) => validateR4(resource).map((i) => `${i.expression} [${i.code}]`);

describe('validateR4', () => {
  it('finds nothing wrong with a valid response', () => {
    expect(validateR4(valid)).toEqual([]);
  });

  it('catches a wrong code in a required binding (the JSON schema; Medplum lets it through)', () => {
    expect(at(edit((r) => (r.outcome = 'done')))).toEqual(['CoverageEligibilityResponse.outcome [code-invalid]']);
    expect(validateR4(edit((r) => (r.purpose = ['nope'])))[0]?.diagnostics).toBe('must be one of auth-requirements, benefits, discovery, validation (required binding)');
  });

  it('catches a wrong fm-status, which neither library checks, from the code system R4 ships', () => {
    expect(at(edit((r) => (r.status = 'bogus')))).toEqual(['CoverageEligibilityResponse.status [code-invalid]']);
    expect(validateR4(edit((r) => (r.status = 'bogus')))[0]?.diagnostics).toBe('must be one of active, cancelled, draft, entered-in-error (required binding)');
    expect(validateR4(edit((r) => (r.status = 'cancelled')))).toEqual([]);
  });

  it('catches a broken invariant, ces-1 (Medplum; the schema knows no invariants)', () => {
    const both = edit((r) => {
      const item = (r.insurance as Array<{ item: Array<Record<string, unknown>> }>)[0]?.item[0];
      if (item) item.productOrService = { text: 'D0120' };
    });
    expect(at(both)).toEqual(['CoverageEligibilityResponse.insurance[0].item[0] [invariant]']);
  });

  it('catches a missing required element and an unknown property inside a contained resource, naming each', () => {
    const broken = edit((r) => {
      delete r.request;
      (r.contained as Array<Record<string, unknown>>)[0] = { ...(r.contained as Array<Record<string, unknown>>)[0], colour: 'blue' };
    });
    const found = at(broken);
    expect(found).toContain('CoverageEligibilityResponse.request [required]');
    expect(found).toContain('CoverageEligibilityResponse.contained[0].colour [structure]');
  });

  it('checks each entry of a Bundle at its own path', () => {
    const bundle: Bundle = { resourceType: 'Bundle', type: 'collection', entry: [{ resource: valid }, { resource: edit((r) => (r.outcome = 'done')) }] };
    expect(at(bundle)).toEqual(['Bundle.entry[1].resource.outcome [code-invalid]']);
  });
});

describe('assertValidR4', () => {
  it('passes a valid resource and throws FhirInputError with every issue otherwise', () => {
    expect(() => assertValidR4(valid)).not.toThrow();
    let error: unknown;
    try {
      assertValidR4(edit((r) => ((r.outcome = 'done'), delete r.patient)));
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(FhirInputError);
    expect((error as FhirInputError).outcome.issue.length).toBeGreaterThanOrEqual(2);
    expect((error as FhirInputError).message).toMatch(/^CoverageEligibilityResponse\.\w+: .+ \(\+\d+ more\)$/);
  });
});
