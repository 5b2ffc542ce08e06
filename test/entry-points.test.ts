import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { projectRoot } from '../src/mapping-files';

/**
 * The package's two entry points as an integrator loads them, in a fresh node process over the
 * build: the library does not drag in the sandbox or Medplum's FHIR router, the sandbox entry has both.
 */
function loaded(specifier: string): { exports: string[]; modules: string[] } {
  const script = `
    const m = require(${JSON.stringify(specifier)});
    const modules = Object.keys(require.cache).map((k) => require('node:path').relative(process.cwd(), k));
    process.stdout.write(JSON.stringify({ exports: Object.keys(m), modules }));`;
  return JSON.parse(execFileSync(process.execPath, ['-e', script], { cwd: projectRoot, encoding: 'utf8' })) as { exports: string[]; modules: string[] };
}

beforeAll(() => {
  if (!existsSync(path.join(projectRoot, 'dist', 'sandbox-entry.js'))) throw new Error('dist/ is missing or stale: run `npm run build` first');
});

test('the library (dist/index.js) loads neither @medplum/fhir-router nor the sandbox', () => {
  const { exports, modules } = loaded('./dist/index.js');
  expect(exports).toEqual(expect.arrayContaining(['fhirWriter', 'toCoverageEligibilityResponse', 'VerificationClient']));
  // What an embedder needs to open the store serve opens (SQLite file or postgres:// URL) and hand it to createEligibilitySync.
  expect(exports).toEqual(expect.arrayContaining(['createEligibilitySync', 'openJobStore', 'PgJobStore', 'SqliteJobStore']));
  expect(exports).not.toContain('startSandbox');
  expect(modules.filter((m) => m.includes(`${path.sep}@medplum${path.sep}fhir-router${path.sep}`))).toEqual([]);
  expect(modules.filter((m) => m.startsWith(path.join('dist', 'sandbox')))).toEqual([]);
  // The probe sees modules at all: the library's own are there.
  expect(modules).toContain(path.join('dist', 'sync', 'write-back.js'));
});

test('the package name resolves both entry points through package.json exports', () => {
  const main = loaded('dental-eligibility-sync');
  expect(main.exports).toContain('fhirWriter');
  const sandbox = loaded('dental-eligibility-sync/sandbox');
  expect(sandbox.exports).toEqual(expect.arrayContaining(['startSandbox', 'startFhirServer', 'createFhirHandler', 'DEMO_PRACTICE']));
  expect(sandbox.modules.some((m) => m.includes(`${path.sep}@medplum${path.sep}fhir-router${path.sep}`))).toBe(true);
});
