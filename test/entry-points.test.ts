import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
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
  // What jobs dismiss, retry and replay do, for an embedder's own screens: a check dismissed, and whether one still is.
  expect(exports).toEqual(expect.arrayContaining(['dismissCheck', 'dismissed', 'dismissMessage', 'retryCheck', 'replayMessage']));
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

/**
 * A consumer's own tsc, strict and with skipLibCheck off, against the declarations as npm installs
 * them: the package's files in its node_modules beside its production dependencies only (devDependencies
 * such as this repository's @types are not there), and the consumer's own @types/node.
 */
test("a consumer's tsc with skipLibCheck off compiles against both entry points' declarations", () => {
  const consumer = mkdtempSync(path.join(tmpdir(), 'elig-consumer-'));
  try {
    const modules = path.join(consumer, 'node_modules');
    cpSync(path.join(projectRoot, 'dist'), path.join(modules, 'dental-eligibility-sync', 'dist'), { recursive: true, filter: (src) => !/\.js(\.map)?$/.test(src) });
    cpSync(path.join(projectRoot, 'package.json'), path.join(modules, 'dental-eligibility-sync', 'package.json'));
    const lock = JSON.parse(readFileSync(path.join(projectRoot, 'package-lock.json'), 'utf8')) as { packages: Record<string, { dev?: boolean }> };
    const installed = Object.entries(lock.packages)
      .filter(([where, entry]) => /^node_modules\/(@[^/]+\/)?[^/]+$/.test(where) && !entry.dev)
      .map(([where]) => where);
    for (const where of [...installed, 'node_modules/@types/node', 'node_modules/undici-types']) {
      mkdirSync(path.dirname(path.join(consumer, where)), { recursive: true });
      symlinkSync(path.join(projectRoot, where), path.join(consumer, where), 'junction');
    }
    writeFileSync(path.join(consumer, 'package.json'), JSON.stringify({ name: 'consumer', private: true }));
    writeFileSync(
      path.join(consumer, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'node16', moduleResolution: 'node16', strict: true, skipLibCheck: false, noEmit: true, types: ['node'], preserveSymlinks: true }, include: ['*.ts'] }),
    );
    writeFileSync(
      path.join(consumer, 'index.ts'),
      `import { createEligibilitySync, openJobStore, toCoverageEligibilityResponse } from 'dental-eligibility-sync';
import { startFhirServer, startSandbox, type ChartStore } from 'dental-eligibility-sync/sandbox';
export async function run(): Promise<string | undefined> {
  const fhir = await startFhirServer();
  const chart: ChartStore = fhir.repo;
  const patient = await chart.readResource('Patient', 'p1');
  const sandbox = await startSandbox({ seed: true });
  const store = await openJobStore(undefined, '.data');
  createEligibilitySync({ store, service: { baseUrl: sandbox.url, apiKey: sandbox.apiKey }, fhir: { baseUrl: fhir.url } });
  return typeof toCoverageEligibilityResponse === 'function' ? patient.id : undefined;
}
`,
    );
    const tsc = path.join(projectRoot, 'node_modules', 'typescript', 'bin', 'tsc');
    let output = '';
    try {
      execFileSync(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: consumer, encoding: 'utf8' });
    } catch (err) {
      output = (err as { stdout: string }).stdout;
    }
    expect(output).toBe('');
  } finally {
    rmSync(consumer, { recursive: true, force: true });
  }
});

test('every dependency an install brings is one the source loads', () => {
  const pkg = JSON.parse(readFileSync(path.join(projectRoot, 'package.json'), 'utf8')) as { dependencies: Record<string, string>; optionalDependencies: Record<string, string> };
  const src = path.join(projectRoot, 'src');
  const files = readdirSync(src, { recursive: true, encoding: 'utf8' }).filter((file) => file.endsWith('.ts'));
  // Each package a module names in quotes: an import, a require, or the driver's name chosen by Node version.
  const named = new Set(files.flatMap((file) => [...readFileSync(path.join(src, file), 'utf8').matchAll(/'((?:@[\w.-]+\/)?[\w.-]+)(?:\/[^']*)?'/g)].map((m) => m[1])));
  // A type package is loaded where the types it holds are imported (@types/fhir: 'fhir/r4').
  const unused = Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies }).filter((name) => !named.has(name.replace(/^@types\//, '')));
  expect(files.length).toBeGreaterThan(100);
  expect(unused).toEqual([]);
});

test('each page the package ships links only to pages it ships', () => {
  // What npm publishes, as it lists it (scripts skipped: the build in dist/ is not what is read here).
  const [packed] = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: projectRoot, encoding: 'utf8' })) as Array<{ files: Array<{ path: string }> }>;
  const shipped = new Set(packed?.files.map((f) => f.path));
  const links = [...shipped]
    .filter((file) => file.endsWith('.md'))
    .flatMap((page) =>
      [...readFileSync(path.join(projectRoot, page), 'utf8').matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)]
        .map((m) => m[1] ?? '')
        .filter((target) => !/^[a-z]+:/.test(target))
        .map((target) => ({ page, target: path.posix.join(path.posix.dirname(page), target) })),
    );
  // The probe reads links at all: README's own to mappings/README.md is among them.
  expect(links).toContainEqual({ page: 'README.md', target: 'mappings/README.md' });
  expect([...new Set(links.filter((l) => !shipped.has(l.target)).map((l) => `${l.page} → ${l.target}`))]).toEqual([]);
});
