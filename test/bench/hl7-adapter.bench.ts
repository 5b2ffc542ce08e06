import * as path from 'node:path';
import { measureInProcess, print } from './measure';

test('hl7 adapter against a naive split', async () => {
  const measured = await measureInProcess(path.join(__dirname, 'hl7-adapter.measure.ts'));
  print(measured);
  expect(measured.counts.pieces).toBeGreaterThan(0);
  expect(measured.counts.checks).toBeGreaterThan(0);
});
