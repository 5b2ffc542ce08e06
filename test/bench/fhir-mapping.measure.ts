import { performance } from 'node:perf_hooks';
import { toCoverageEligibilityResponse } from '../../src/adapters/fhir/out';
import { indexR4Definitions, validateR4 } from '../../src/adapters/fhir/validate';
import { forgetValidatedParts } from '../../src/adapters/fhir/validate-apart';
import { toOutcome } from '../../src/verification/outcome';
import { CREATED, RESULT_REFS } from '../adapters/fhir/corpus';
import { compare, figure, fixtureTexts, spread, type Measured } from './measure';

/**
 * Verification results (fixtures/results, InsuranceVerificationV3 bodies) to validated
 * CoverageEligibilityResponses, every response through both R4 validators and the fm-status
 * check, against the same mapping without validation. One thread: the figure is for one core.
 * validateR4 validates each distinct benefit item, extension and contained resource once; the
 * bench line is for results whose every part is new (the parts forgotten before each pass), and
 * a figure shows results whose parts were seen before, as patients on one plan share them.
 */
export async function measure(): Promise<Measured> {
  const bodies = fixtureTexts('results', '.json').map((text) => JSON.parse(text) as unknown);
  const map = (body: unknown) => toCoverageEligibilityResponse(toOutcome(body), RESULT_REFS, { created: CREATED });
  let issues = 0;
  const started = performance.now();
  indexR4Definitions();
  validateR4(map(bodies[0]));
  const loadMs = performance.now() - started;

  const withoutValidation = () => {
    for (const body of bodies) map(body);
  };
  const validated = () => {
    for (const body of bodies) issues += validateR4(map(body)).length;
  };
  const firstTime = () => {
    forgetValidatedParts();
    validated();
  };
  const result = await compare({ rounds: 150, warmupRounds: 15, opsPerPass: bodies.length, pass: firstTime, baseline: withoutValidation });
  const seen = await compare({ rounds: 150, warmupRounds: 15, opsPerPass: bodies.length, pass: validated, baseline: withoutValidation });
  return {
    lines: [
      figure('results in the corpus', `${bodies.length}`),
      figure('definitions and schema loaded, first validation', `${loadMs.toFixed(0)} ms`),
      figure('mapping only (toOutcome, toCoverageEligibilityResponse)', `${(result.baselinePerOp * 1000).toFixed(0)} us/result`),
      figure('mapping + validateR4, every part new', `${(result.perOp * 1000).toFixed(0)} us/result`),
      figure('ratio, median of rounds', spread(result)),
      figure('mapping + validateR4, parts seen before', `${(seen.perOp * 1000).toFixed(0)} us/result, ${(1000 / seen.perOp).toFixed(0)} results/s`),
      figure('ratio, median of rounds', spread(seen)),
      figure('heap used after the run', `${(process.memoryUsage().heapUsed / 2 ** 20).toFixed(0)} MiB`),
      `bench fhir-mapping: ${(1000 / result.perOp).toFixed(0)} results/s (ratio ${result.ratio.toFixed(2)} vs without-validation)`,
    ],
    counts: { issues },
  };
}
