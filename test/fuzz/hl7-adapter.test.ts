import { performance } from 'node:perf_hooks';
import {
  ackFor,
  handleHl7Message,
  Hl7InputError,
  InMemoryPatientInsuranceStore,
  isEnhancedMode,
  loadHl7Mappings,
  parseHl7Message,
  splitMessages,
  type Ack,
  type Hl7Result,
} from '../../src/adapters/hl7';
import { fixtureTexts } from '../bench/measure';
import { fixtureRouting, RECEIVED_AT } from '../adapters/hl7/corpus';
import { fixturePayers } from '../adapters/hl7/fixture-payers';
import { caseRandom, fuzzCases, fuzzSeed, mutateHl7, replay } from './mutate';

/**
 * Mutated fixture messages through handleHl7Message and ackFor: each is answered (AA, AE or AR)
 * with acknowledgements our own parser reads back, nothing throws but the adapter's typed error,
 * and none takes longer than the bound. The seed is printed; FUZZ_SEED and FUZZ_CASE replay.
 */
const CASES = 10_000;
/**
 * Half a second plus a microsecond a character: ten times what a megabyte field takes and far
 * above the tens of microseconds of an ordinary message, so only a hang or a quadratic path
 * (one repetition walked from the field's start per read, say) reaches it.
 */
const boundMs = (text: string) => 500 + text.length / 1000;

const seed = fuzzSeed();
const originals = fixtureTexts('hl7', '.hl7').flatMap(splitMessages);

interface Failure {
  replay: string;
  what: string;
}

test(`${CASES} mutated HL7 messages are each answered, in time, without an untyped throw (seed ${seed})`, async () => {
  process.stdout.write(`hl7 fuzz seed ${seed} (replay with FUZZ_SEED=${seed}; one case with FUZZ_CASE=<n>)\n`);
  const options = { mappings: loadHl7Mappings(), routing: fixtureRouting(), resolver: fixturePayers, receivedAt: RECEIVED_AT };
  let store = new InMemoryPatientInsuranceStore();
  const failures: Failure[] = [];
  const codes = { AA: 0, AE: 0, AR: 0 };
  let typedThrows = 0;
  let slowest = { ms: 0, index: -1, length: 0 };

  for (const index of fuzzCases(CASES)) {
    // Stores are kept a while, so mutated records meet later messages for the same patient.
    if (index % 500 === 0) store = new InMemoryPatientInsuranceStore();
    const random = caseRandom(seed, index);
    const text = mutateHl7(random.pick(originals), random);
    const fail = (what: string) => failures.push({ replay: replay(seed, index), what });
    const started = performance.now();
    let result: Hl7Result;
    try {
      result = await handleHl7Message(text, { ...options, store });
    } catch (err) {
      if (err instanceof Hl7InputError) typedThrows++;
      else fail(`threw ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
      continue;
    }
    const acks = ackFor(result);
    const took = performance.now() - started;
    if (took > slowest.ms) slowest = { ms: took, index, length: text.length };
    if (took > boundMs(text)) fail(`took ${took.toFixed(0)} ms for ${text.length} characters`);
    codes[result.ackCode]++;
    const problem = ackProblem(result, acks);
    if (problem) fail(problem);
  }

  process.stdout.write(`hl7 fuzz: ${JSON.stringify(codes)}, typed throws ${typedThrows}, slowest ${slowest.ms.toFixed(1)} ms (case ${slowest.index}, ${slowest.length} characters)\n`);
  expect(failures.slice(0, 10)).toEqual([]);
  // The mutations must reach every answer, or the fuzz is not testing much.
  if (fuzzCases(CASES).length === CASES) expect(Math.min(codes.AA, codes.AE, codes.AR)).toBeGreaterThan(100);
});

/** What is wrong with the acknowledgements of a result; undefined when nothing is. */
function ackProblem(result: Hl7Result, acks: Ack[]): string | undefined {
  const enhanced = result.header !== undefined && isEnhancedMode(result.header);
  if (!enhanced && acks.length !== 1) return `original mode answered with ${acks.length} ACKs`;
  if (acks.length > 2) return `${acks.length} ACKs`;
  const application = acks.filter((a) => a.code === 'AA' || a.code === 'AE' || a.code === 'AR');
  if (application.some((a) => a.code !== result.ackCode)) return `application ACK ${application.map((a) => a.code).join()} for ${result.ackCode}`;
  for (const ack of acks) {
    let msa;
    try {
      msa = parseHl7Message(ack.text).first('MSA');
    } catch (err) {
      return `an ACK our parser cannot read: ${err instanceof Error ? err.message : String(err)}`;
    }
    if (msa?.value(1) !== ack.code) return `MSA-1 is not ${ack.code}`;
    if (msa.rawField(2) !== ack.acknowledges) return 'MSA-2 does not echo MSH-10';
  }
  return undefined;
}
