import { performance } from 'node:perf_hooks';
import * as z from 'zod';
import { FhirInputError } from '../../src/adapters/fhir/operation-outcome';
import { toCoverageEligibilityResponse } from '../../src/adapters/fhir/out';
import { validateR4 } from '../../src/adapters/fhir/validate';
import { toOutcome } from '../../src/verification/outcome';
import { CREATED, RESULT_REFS } from '../adapters/fhir/corpus';
import { fixtureTexts } from '../bench/measure';
import { caseRandom, fuzzCases, fuzzSeed, mutateJson, replay, type Json } from './mutate';

/**
 * Mutated verification results (fixtures/results) through toOutcome, toCoverageEligibilityResponse
 * and validateR4: each ends in a valid response or in a typed error (the wire schema's ZodError,
 * the mapping's FhirInputError), none hangs: a result the wire accepts is one the chart takes. The seed is printed;
 * FUZZ_SEED and FUZZ_CASE replay.
 */
const CASES = 1000;
/** Validation of the largest fixture takes a few milliseconds; only a hang or a quadratic path reaches this. */
const BOUND_MS = 2000;

const seed = fuzzSeed();
const originals = fixtureTexts('results', '.json').map((text) => JSON.parse(text) as Json);

test(`${CASES} mutated results are each answered, in time, with a response or a typed error (seed ${seed})`, () => {
  process.stdout.write(`fhir fuzz seed ${seed} (replay with FUZZ_SEED=${seed}; one case with FUZZ_CASE=<n>)\n`);
  const failures: Array<{ replay: string; what: string }> = [];
  const answers = { refused: 0, notMapped: 0, valid: 0, invalid: 0 };
  const invalidAt = new Set<string>();
  // Loading the definitions and the schema (seconds) is not any one case's time.
  validateR4(toCoverageEligibilityResponse(toOutcome(originals[0]), RESULT_REFS, { created: CREATED }));

  for (const index of fuzzCases(CASES)) {
    const random = caseRandom(seed, index);
    const body = mutateJson(random.pick(originals), random);
    const fail = (what: string) => failures.push({ replay: replay(seed, index), what });
    const started = performance.now();
    try {
      const response = toCoverageEligibilityResponse(toOutcome(body), RESULT_REFS, { created: CREATED });
      const errors = validateR4(response).filter((i) => i.severity === 'error' || i.severity === 'fatal');
      if (errors.length === 0) answers.valid++;
      else {
        // A result the wire accepted must map to valid R4: written through assertValidR4 this would be refused by the chart.
        answers.invalid++;
        for (const e of errors) invalidAt.add(e.expression.replace(/\[\d+\]/g, '[]'));
        fail(`accepted, but mapped to invalid R4: ${errors.map((e) => `${e.expression}: ${e.diagnostics}`).join('; ')}`);
      }
    } catch (err) {
      if (err instanceof z.ZodError) answers.refused++;
      else if (err instanceof FhirInputError) answers.notMapped++;
      else fail(`threw ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
    }
    const took = performance.now() - started;
    if (took > BOUND_MS) fail(`took ${took.toFixed(0)} ms`);
  }

  process.stdout.write(`fhir fuzz: ${JSON.stringify(answers)}\n`);
  if (invalidAt.size > 0) process.stdout.write(`fhir fuzz: accepted results mapped to invalid elements: ${[...invalidAt].sort().join(', ')}\n`);
  expect(failures.slice(0, 10)).toEqual([]);
  if (fuzzCases(CASES).length === CASES) {
    // Mutations that leave a result usable and ones that do not must both be common.
    expect(answers.valid).toBeGreaterThan(100);
    expect(answers.refused).toBeGreaterThan(100);
  }
});
