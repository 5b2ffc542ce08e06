import type { CoverageEligibilityResponse, Resource } from 'fhir/r4';
import type { FhirIssue } from '../../../src/adapters/fhir/operation-outcome';
import { validateR4, validateWhole } from '../../../src/adapters/fhir/validate';
import { forgetValidatedParts, validateApart, type ValidatorIssues } from '../../../src/adapters/fhir/validate-apart';
import { caseRandom, fuzzCases, fuzzSeed, mutateJson, replay, type Json } from '../../fuzz/mutate';
import { convertResult, resultNames } from './corpus';

/**
 * validateR4 validates a response whose items, extensions and contained resources were all seen
 * before without them, and takes their issues from when they were first validated. It must find
 * what validating the whole response finds: on every response of the corpus and on mutated ones,
 * where most mutations land in those parts.
 */
const responses = resultNames().map((name) => ({ name, response: convertResult(name) as CoverageEligibilityResponse }));
const full = () => structuredClone(responses.find((r) => r.name === 'completed-full')?.response) as CoverageEligibilityResponse;
const listed = (issues: FhirIssue[]) => issues.map((i) => `${i.expression} [${i.code}/${i.severity}] ${i.diagnostics}`).sort();
const nothing = (): ValidatorIssues => ({ medplum: [], schema: [] });
const CASES = 600;

describe('validating a response without the parts seen before', () => {
  it('finds what a whole validation finds on every response of the corpus, the first time and again', () => {
    expect(responses.length).toBeGreaterThan(10);
    forgetValidatedParts();
    for (const round of [1, 2]) {
      for (const { name, response } of responses) expect([round, name, listed(validateR4(response))]).toEqual([round, name, listed(validateWhole(response))]);
    }
  });

  const seed = fuzzSeed();
  it(`finds what a whole validation finds on ${CASES} mutated responses, each validated twice (seed ${seed})`, () => {
    const different: string[] = [];
    let invalid = 0;
    for (const index of fuzzCases(CASES)) {
      const random = caseRandom(seed, index);
      // As a response is written: its JSON (a mutation may set a prototype, which JSON does not carry).
      const mutated = JSON.parse(JSON.stringify(mutateJson(random.pick(responses).response as unknown as Json, random))) as Resource;
      if (mutated === null || typeof mutated !== 'object' || Array.isArray(mutated)) continue;
      const whole = listed(validateWhole(mutated));
      if (whole.length > 0) invalid++;
      for (const time of ['first', 'again']) {
        const found = listed(validateR4(mutated));
        if (JSON.stringify(found) !== JSON.stringify(whole)) {
          different.push(`${replay(seed, index)} (${time})`);
          if (process.env.FUZZ_CASE) process.stdout.write(`whole:\n${whole.join('\n')}\n${time}:\n${found.join('\n')}\n`);
        }
      }
    }
    expect(different.slice(0, 10)).toEqual([]);
    // Mutations must break responses often, or the comparison shows little.
    if (fuzzCases(CASES).length === CASES) expect(invalid).toBeGreaterThan(CASES / 3);
  });

  it('validates a response whole until every part was seen, then only what is not a part', () => {
    const calls: Resource[] = [];
    const counting = (resource: Resource): ValidatorIssues => {
      calls.push(resource);
      return nothing();
    };
    const first = full();
    first.extension = [...(first.extension ?? []), { url: 'https://example.org/unseen-before', valueString: `${Math.random()}` }];
    validateApart(first, counting);
    expect(calls).toEqual([first]);
    calls.length = 0;
    const second = { ...first, patient: { reference: 'Patient/someone-else' }, created: '2026-11-24T08:00:00Z' };
    validateApart(second, counting);
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ patient: { reference: 'Patient/someone-else' } });
    for (const part of ['extension', 'contained']) expect(calls[0]).not.toHaveProperty(part);
    expect((calls[0] as CoverageEligibilityResponse).insurance?.every((i) => i.item === undefined && i.extension === undefined)).toBe(true);
  });

  it('names each issue of a part seen before where it sits now', () => {
    forgetValidatedParts();
    const broken = full();
    (broken.insurance?.[0]?.item?.[2] as Record<string, unknown>).productOrService = { text: 'D0120' };
    expect(listed(validateR4(broken))).toEqual(listed(validateWhole(broken)));
    // The same broken item, now at another place, in a response otherwise new.
    const moved = full();
    const items = moved.insurance?.[0]?.item ?? [];
    moved.insurance?.[0]?.item?.splice(0, items.length, ...[...(broken.insurance?.[0]?.item ?? [])].reverse());
    moved.patient = { reference: 'Patient/another' };
    const found = validateR4(moved).map((i) => `${i.expression} [${i.code}]`);
    expect(found).toEqual([`CoverageEligibilityResponse.insurance[0].item[${items.length - 3}] [invariant]`]);
  });

  it('rests on what neither validator checks: a local reference with no contained resource, or a contained resource no one references (ref-1, dom-3)', () => {
    const dangling = full();
    (dangling.insurance?.[0]?.item?.[0] as Record<string, unknown>).provider = { reference: '#no-such-contained' };
    const unreferenced = full();
    unreferenced.contained = [...(unreferenced.contained ?? []), { resourceType: 'Organization', id: 'unreferenced', name: 'Nobody refers here' }];
    // Were either checked, a part validated apart would miss what its neighbours hold.
    expect(validateWhole(dangling)).toEqual([]);
    expect(validateWhole(unreferenced)).toEqual([]);
  });

  it('validates whole a response whose parts are of an odd shape', () => {
    const emptyItems = full();
    if (emptyItems.insurance?.[0]) emptyItems.insurance[0].item = [];
    const oddEntry = full();
    (oddEntry.insurance as unknown[]).push('not an entry');
    for (const response of [emptyItems, oddEntry]) {
      const calls: Resource[] = [];
      validateApart(response, (resource) => (calls.push(resource), nothing()));
      validateApart(response, (resource) => (calls.push(resource), nothing()));
      expect(calls).toEqual([response, response]);
    }
    expect(validateR4(oddEntry).length).toBeGreaterThan(0);
  });
});
