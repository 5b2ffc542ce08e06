import * as path from 'node:path';
import { measureInProcess, print } from './measure';

test('hl7 ingest over MLLP into the store against a bare listener', async () => {
  const measured = await measureInProcess(path.join(__dirname, 'hl7-ingest.measure.ts'));
  print(measured);
  // Every measured message was accepted and stored, not answered with an error.
  expect(measured.counts.accepted).toBe(measured.counts.measured);
});
