import * as path from 'node:path';
import { measureInWorker, print } from './measure';

test('hl7 ingest over MLLP into the store against a bare listener', async () => {
  const measured = await measureInWorker(path.join(__dirname, 'hl7-ingest.measure.ts'));
  print(measured);
  // Every measured message was accepted and stored, not answered with an error.
  expect(measured.counts.accepted).toBe(measured.counts.measured);
});
