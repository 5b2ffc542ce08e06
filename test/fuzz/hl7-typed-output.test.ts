import { handleHl7Message, InMemoryPatientInsuranceStore, loadHl7Mappings, splitMessages, type Hl7Result } from '../../src/adapters/hl7';
import { EligibilityCheck, PatientInsuranceRecord, type PatientInsuranceStore } from '../../src/domain';
import { fixtureTexts } from '../bench/measure';
import { fixtureRouting, RECEIVED_AT } from '../adapters/hl7/corpus';
import { fixturePayers } from '../adapters/hl7/fixture-payers';
import { caseRandom, fuzzCases, fuzzSeed, mutateHl7, replay } from './mutate';

/**
 * The adapter builds its checks and patient records from what its readers validated, without
 * parsing them again: here every one made from mutated fixture messages must still pass the
 * schema the pipeline and the durable stores read them back with.
 */
const CASES = 3_000;

const seed = fuzzSeed();
const originals = fixtureTexts('hl7', '.hl7').flatMap(splitMessages);

test(`${CASES} mutated HL7 messages make only checks and records that validate (seed ${seed})`, async () => {
  process.stdout.write(`hl7 typed-output fuzz seed ${seed} (replay with FUZZ_SEED=${seed}; one case with FUZZ_CASE=<n>)\n`);
  const options = { mappings: loadHl7Mappings(), routing: fixtureRouting(), resolver: fixturePayers, receivedAt: RECEIVED_AT };
  const failures: string[] = [];
  let memory = new InMemoryPatientInsuranceStore();
  let current = '';
  const store: PatientInsuranceStore = {
    get: (key) => memory.get(key),
    put: (key, record) => {
      const parsed = PatientInsuranceRecord.safeParse(record);
      if (!parsed.success) failures.push(`${current}: record ${issues(parsed.error)}`);
      return memory.put(key, record);
    },
  };
  let checks = 0;

  for (const index of fuzzCases(CASES)) {
    // Stores are kept a while, so mutated records meet later messages for the same patient.
    if (index % 500 === 0) memory = new InMemoryPatientInsuranceStore();
    const random = caseRandom(seed, index);
    current = replay(seed, index);
    let result: Hl7Result;
    try {
      result = await handleHl7Message(mutateHl7(random.pick(originals), random), { ...options, store });
    } catch {
      continue; // what throws is the other fuzz test's business
    }
    for (const check of 'checks' in result.outcome ? result.outcome.checks : []) {
      checks++;
      const parsed = EligibilityCheck.safeParse(check);
      if (!parsed.success) failures.push(`${current}: check ${issues(parsed.error)}`);
      // A schema parse trims and drops what it does not know: a check must already be as a parse gives it.
      else if (JSON.stringify(sorted(parsed.data)) !== JSON.stringify(sorted(check))) failures.push(`${current}: check differs from its parse`);
    }
  }

  expect(failures.slice(0, 10)).toEqual([]);
  if (fuzzCases(CASES).length === CASES) expect(checks).toBeGreaterThan(CASES / 10);
});

/** Where the schema failed, never the value (patient data). */
function issues(error: { issues: ReadonlyArray<{ path: PropertyKey[]; message: string }> }): string {
  return error.issues.map((i) => `${i.path.map(String).join('.')}: ${i.message}`).join('; ');
}

/** The same value with object keys in one order, so two values compare as JSON whatever order they were built in. */
function sorted(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sorted);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([k, v]) => [k, sorted(v)]));
}
