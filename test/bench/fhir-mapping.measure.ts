import { performance } from 'node:perf_hooks';
import type { Resource } from 'fhir/r4';
import { toCoverageEligibilityResponse } from '../../src/adapters/fhir/out';
import { loadR4Validation, validateR4, validateWhole } from '../../src/adapters/fhir/validate';
import { forgetValidatedParts } from '../../src/adapters/fhir/validate-apart';
import { toOutcome } from '../../src/verification/outcome';
import { CREATED, readResult, RESULT_REFS } from '../adapters/fhir/corpus';
import { compare, figure, fixtureTexts, spread, type Comparison, type Measured } from './measure';

/**
 * Verification results (fixtures/results, InsuranceVerificationV3 bodies) to validated
 * CoverageEligibilityResponses, every response through both R4 validators and the fm-status
 * check, against the same mapping without validation. One thread: the figure is for one core.
 * validateR4 validates each distinct benefit item, extension and contained resource once; the
 * bench line is for results whose every part is new (the parts forgotten before each pass), and
 * figures show results whose parts were seen before, as patients on one plan share them, and the
 * full result for patient after patient on one plan, where only the patient's own parts are new.
 */
export async function measure(): Promise<Measured> {
  const bodies = fixtureTexts('results', '.json').map((text) => JSON.parse(text) as unknown);
  const map = (body: unknown) => toCoverageEligibilityResponse(toOutcome(body), RESULT_REFS, { created: CREATED });
  let issues = 0;
  const started = performance.now();
  // As serve loads it: the definitions of the types it writes. With all of R4 indexed, Medplum's
  // validation of the same response took 1.7 times as long.
  await loadR4Validation();
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
  // Before the batch, whose responses are made before its clock starts and linger until collected.
  const heapUsed = process.memoryUsage().heapUsed;
  const batch = await morningBatch(map);
  issues += batch.issues;
  return {
    lines: [
      figure('results in the corpus', `${bodies.length}`),
      figure('definitions and schema loaded, first validation', `${loadMs.toFixed(0)} ms`),
      figure('mapping only (toOutcome, toCoverageEligibilityResponse)', `${(result.baselinePerOp * 1000).toFixed(0)} us/result`),
      figure('mapping + validateR4, every part new', `${(result.perOp * 1000).toFixed(0)} us/result`),
      figure('ratio, median of rounds', spread(result)),
      figure('mapping + validateR4, parts seen before', `${(seen.perOp * 1000).toFixed(0)} us/result, ${(1000 / seen.perOp).toFixed(0)} results/s`),
      figure('ratio, median of rounds', spread(seen)),
      figure('heap used after the run', `${(heapUsed / 2 ** 20).toFixed(0)} MiB`),
      figure('full result, some parts new: validateWhole', `${batch.compared.baselinePerOp.toFixed(2)} ms/validation`),
      figure('full result, some parts new: validateR4', `${batch.compared.perOp.toFixed(2)} ms/validation`),
      figure('ratio, median of rounds', spread(batch.compared)),
      `bench fhir-mapping: ${(1000 / result.perOp).toFixed(0)} results/s (ratio ${result.ratio.toFixed(2)} vs without-validation)`,
    ],
    counts: { issues },
  };
}

interface Member {
  firstName: string;
  lastName: string;
  memberId: string;
}
interface FullBody {
  correlationId: string;
  createdAt: string;
  completedAt: string;
  result: { patient: Member; subscriber: Member };
}

/**
 * "Some parts new": the full result (28 KB) for patient after patient on one plan, each with
 * their own name, member id and verification times, so each response has its payer-patient,
 * payer-subscriber and verification-time extensions new and its benefit items, plan and
 * contained resources seen before. validateR4 against validateWhole on the same responses, made
 * before the clock starts: only validation is timed.
 */
async function morningBatch(map: (body: unknown) => Resource): Promise<{ compared: Comparison; issues: number }> {
  const full = readResult('completed-full') as FullBody;
  const rounds = 40;
  const warmupRounds = 5;
  const opsPerPass = 5;
  const responses = Array.from({ length: (rounds + warmupRounds) * opsPerPass * 2 }, (_, n) => {
    const body = structuredClone(full);
    for (const member of [body.result.patient, body.result.subscriber]) Object.assign(member, { firstName: `Given${n}`, lastName: `Family${n}`, memberId: `DD${String(n).padStart(7, '0')}` });
    const at = (seconds: number) => `2026-11-20T${String(7 + Math.floor(seconds / 3600)).padStart(2, '0')}:${String(Math.floor(seconds / 60) % 60).padStart(2, '0')}:${String(seconds % 60).padStart(2, '0')}-08:00`;
    Object.assign(body, { correlationId: `ver_batch_${n}`, createdAt: at(n * 7), completedAt: at(n * 7 + 5) });
    return map(body);
  });
  let next = 0;
  let issues = 0;
  const validating = (validate: (resource: Resource) => unknown[]) => () => {
    for (let i = 0; i < opsPerPass; i++) issues += validate(responses[next++] as Resource).length;
  };
  forgetValidatedParts();
  const compared = await compare({ rounds, warmupRounds, opsPerPass, pass: validating(validateR4), baseline: validating(validateWhole) });
  return { compared, issues };
}
