import { handleHl7Message, InMemoryPatientInsuranceStore, loadHl7Mappings, splitMessages } from '../../src/adapters/hl7';
import { fixtureRouting, RECEIVED_AT } from '../adapters/hl7/corpus';
import { fixturePayers } from '../adapters/hl7/fixture-payers';
import { compare, figure, fixtureTexts, spread, type Measured } from './measure';

/**
 * HL7 messages to checks over the fixtures/hl7 corpus, as the golden test runs it (each file
 * through its own store, its messages in order), against a naive split of the same messages into
 * segments, fields and components: the least any reading of them costs.
 */
export async function measure(): Promise<Measured> {
  const files = fixtureTexts('hl7', '.hl7').map(splitMessages);
  const messages = files.flat();
  const mappings = loadHl7Mappings();
  const routing = fixtureRouting();
  let pieces = 0;
  let checks = 0;

  const split = () => {
    for (const text of messages) {
      const field = text.charAt(3);
      const component = text.charAt(4);
      for (const segment of text.split('\r')) {
        for (const value of segment.split(field)) pieces += value.split(component).length;
      }
    }
  };
  const adapter = async () => {
    for (const file of files) {
      const options = { mappings, routing, store: new InMemoryPatientInsuranceStore(), resolver: fixturePayers, receivedAt: RECEIVED_AT };
      for (const text of file) {
        const { outcome } = await handleHl7Message(text, options);
        if (outcome.kind === 'book' || outcome.kind === 'reschedule') checks += outcome.checks.length;
      }
    }
  };

  const result = await compare({ rounds: 300, warmupRounds: 30, opsPerPass: messages.length, pass: adapter, baseline: split });
  const us = (ms: number) => (ms * 1000).toFixed(1);
  return {
    lines: [
      figure(`messages in the corpus (${files.length} files)`, `${messages.length}`),
      figure('naive split (segments, fields, components)', `${us(result.baselinePerOp)} us/msg`),
      figure('handleHl7Message', `${us(result.perOp)} us/msg`),
      figure('ratio, median of rounds', spread(result)),
      `bench hl7-adapter: ${us(result.perOp)} us/msg (ratio ${result.ratio.toFixed(2)} vs split-baseline)`,
    ],
    counts: { pieces, checks },
  };
}
