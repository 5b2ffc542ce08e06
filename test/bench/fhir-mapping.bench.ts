import * as path from 'node:path';
import { measureInWorker, print } from './measure';

test('fhir mapping with validation against without', async () => {
  const measured = await measureInWorker(path.join(__dirname, 'fhir-mapping.measure.ts'));
  print(measured);
  // The corpus maps to valid resources: an issue here means validation or mapping broke.
  expect(measured.counts.issues).toBe(0);
});
