import { readFileSync, readdirSync } from 'node:fs';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Message } from 'node-hl7-client';
import { loadClinicRouting } from '../../src/adapters/clinic-routing';
import { toCoverageEligibilityResponse } from '../../src/adapters/fhir/out';
import { validateR4 } from '../../src/adapters/fhir/validate';
import { handleHl7Message, InMemoryPatientInsuranceStore, loadHl7Mappings, splitMessages } from '../../src/adapters/hl7';
import { projectRoot } from '../../src/mapping-files';
import { toOutcome } from '../../src/verification/outcome';

/**
 * What the conversions cost, each against a baseline measured in the same run on the same input:
 *  - HL7: a message to checks, against node-hl7-client parsing the same message and reading each
 *    of its fields once (the floor any adapter on that parser pays);
 *  - FHIR out: a result to a CoverageEligibilityResponse, and that response through both R4
 *    validators, against JSON.parse + JSON.stringify of the same result.
 * Figures are per operation; ratios say how many baselines one operation costs.
 */
const fixtures = (dir: string, ext: string) =>
  readdirSync(path.join(projectRoot, 'fixtures', dir))
    .filter((f) => f.endsWith(ext) && !f.includes('.expected.'))
    .map((f) => readFileSync(path.join(projectRoot, 'fixtures', dir, f), 'utf8'));

function timed(label: string, iterations: number, body: () => void | Promise<void>): Promise<number> {
  return (async () => {
    for (let i = 0; i < Math.min(50, iterations); i++) await body(); // warm up
    const start = performance.now();
    for (let i = 0; i < iterations; i++) await body();
    const perOp = (performance.now() - start) / iterations;
    process.stdout.write(`${label.padEnd(46)} ${perOp.toFixed(4).padStart(10)} ms/op\n`);
    return perOp;
  })();
}

const ratio = (label: string, value: number, baseline: number) =>
  process.stdout.write(`${label.padEnd(46)} ${(value / baseline).toFixed(1).padStart(10)} x baseline\n`);

test('conversion throughput', async () => {
  const messages = fixtures('hl7', '.hl7').flatMap((f) => splitMessages(f)).filter((m) => !m.includes('NOT-HL7'));
  const mappings = loadHl7Mappings();
  const routing = loadClinicRouting();
  let hl7Index = 0;
  const nextMessage = () => messages[hl7Index++ % messages.length] as string;

  // node-hl7-client builds its node tree lazily, on first read: the baseline reads every field once.
  const parseOnly = await timed(`hl7 parse + read every field (${messages.length} msgs, baseline)`, 2000, () => {
    const text = nextMessage();
    try {
      const message = new Message({ text });
      for (const line of text.split(/\r\n|\r|\n/)) {
        const name = line.slice(0, 3);
        const fields = line.split(line[3] ?? '|').length;
        for (let i = 1; i < fields; i++) message.get(`${name}.${i}`).toString();
      }
    } catch {
      // unusable fixtures are part of the mix on both sides
    }
  });
  const store = new InMemoryPatientInsuranceStore();
  const toChecks = await timed('hl7 message -> checks (handleHl7Message)', 2000, async () => {
    await handleHl7Message(nextMessage(), { mappings, routing, store, receivedAt: '2026-11-21T10:00:00Z' });
  });
  ratio('hl7 message -> checks', toChecks, parseOnly);

  const results = fixtures('results', '.json').map((t) => JSON.parse(t) as unknown);
  let resultIndex = 0;
  const nextResult = () => results[resultIndex++ % results.length];
  const refs = { patient: 'Patient/p1', coverage: 'Coverage/c1', insurer: 'Organization/o1' };
  const jsonRoundTrip = await timed(`result JSON round trip (${results.length} results, baseline)`, 5000, () => {
    JSON.stringify(JSON.parse(JSON.stringify(nextResult())));
  });
  const map = await timed('result -> CoverageEligibilityResponse', 2000, () => {
    toCoverageEligibilityResponse(toOutcome(nextResult()), refs, { created: '2026-11-21T10:00:00Z' });
  });
  const responses = results.map((r) => toCoverageEligibilityResponse(toOutcome(r), refs, { created: '2026-11-21T10:00:00Z' }));
  let responseIndex = 0;
  const validate = await timed('response -> validateR4 (Medplum + JSON schema)', 500, () => {
    validateR4(responses[responseIndex++ % responses.length] as (typeof responses)[number]);
  });
  ratio('result -> response', map, jsonRoundTrip);
  ratio('response -> validated', validate, jsonRoundTrip);

  const heapMb = process.memoryUsage().heapUsed / 1024 / 1024;
  process.stdout.write(`${'heap used after the run'.padEnd(46)} ${heapMb.toFixed(1).padStart(10)} MiB\n`);
  expect(toChecks).toBeGreaterThan(0);
});
