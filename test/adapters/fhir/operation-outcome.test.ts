import { operationOutcome } from '../../../src/adapters/fhir/operation-outcome';
import { loadR4Validation, r4Errors } from '../../../src/adapters/fhir/validate';

beforeAll(() => loadR4Validation());

test('an issue about an element, several resource types or none is valid R4, with no empty expression list', () => {
  const outcome = operationOutcome([
    { expression: 'Patient.birthDate', diagnostics: 'required', code: 'required' },
    { expression: ['Patient', 'Coverage'], diagnostics: 'read again', code: 'informational', severity: 'information' },
    { diagnostics: 'the body as a whole', code: 'structure' },
    { expression: [], diagnostics: 'named nothing', code: 'informational', severity: 'information' },
  ]);
  expect(outcome.issue.map((i) => i.expression)).toEqual([['Patient.birthDate'], ['Patient', 'Coverage'], undefined, undefined]);
  expect(outcome.issue.map((i) => Object.keys(i).includes('expression'))).toEqual([true, true, false, false]);
  expect(r4Errors(outcome)).toEqual([]);
});
