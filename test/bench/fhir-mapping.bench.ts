import * as path from 'node:path';
import { measureInProcess, print } from './measure';

test('fhir mapping with validation against without', async () => {
  const measured = await measureInProcess(path.join(__dirname, 'fhir-mapping.measure.ts'));
  print(measured);
  // The corpus maps to valid resources: an issue here means validation or mapping broke.
  expect(measured.counts.issues).toBe(0);
});
