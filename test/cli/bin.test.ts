import { execFile, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { projectRoot } from '../../src/mapping-files';
import { json, startScriptedServer, streamLarge } from '../support/http-server';

/**
 * The installed command as a person runs it: `bin/dental-elig.js` over the build that
 * `npm ci` makes (the `prepare` script). Everything else drives the CLI in-process.
 */
const bin = path.join(projectRoot, 'bin', 'dental-elig.js');
const run = async (...args: string[]) => runWith({}, ...args);
const runWith = async (env: NodeJS.ProcessEnv, ...args: string[]) => {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [bin, ...args], { cwd: projectRoot, env: { PATH: process.env.PATH, ...env }, timeout: 8000 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
};

describe('the dental-elig executable', () => {
  beforeAll(() => {
    if (!existsSync(path.join(projectRoot, 'dist', 'cli', 'main.js'))) throw new Error('dist/ is missing: run `npm ci` or `npm run build` first');
  });

  it('prints its version', async () => {
    const { version } = JSON.parse(readFileSync(path.join(projectRoot, 'package.json'), 'utf8')) as { version: string };
    expect(await run('--version')).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
  });

  it('stops printing, without a stack trace, when what reads its output stops reading (| head)', async () => {
    const child = spawn(process.execPath, [bin, 'convert', 'result', 'fixtures/results/completed-full.json', '--patient', 'Patient/p', '--coverage', 'Coverage/c'], { cwd: projectRoot, env: { PATH: process.env.PATH }, stdio: ['ignore', 'pipe', 'pipe'] });
    // The reading end closed before anything is written: each write meets EPIPE.
    child.stdout.destroy();
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
  });

  it('converts an HL7 file to checks on stdout', async () => {
    const result = await run('convert', 'hl7', 'fixtures/hl7/molarpms-siu-s12-two-insurances.hl7', '--received-at', '2026-11-21T10:00:00Z');
    expect(result.code).toBe(0);
    expect((JSON.parse(result.stdout) as Array<{ coverage: { order: string } }>).map((c) => c.coverage.order)).toEqual(['primary', 'secondary']);
  });

  it('stays alive through a retry when the service closed the connection with its 503', async () => {
    const server = await startScriptedServer((_r, res, i) => {
      if (i === 0) return json(res, 503, { title: 'Service Unavailable' }, { connection: 'close', 'retry-after': '1' });
      json(res, 200, { items: [{ portalId: 'metdental', name: 'MetLife Dental' }], nextCursor: null });
    });
    try {
      const result = await runWith({ DENTAL_ELIG_BASE_URL: server.url, DENTAL_ELIG_API_KEY: 'k' }, 'setup', 'portals', 'list');
      expect(server.requests).toHaveLength(2);
      expect(result.code).toBe(0);
      expect(result.stdout).toContain('metdental');
    } finally {
      await server.close();
    }
  });

  it('says in one line that a chart answering larger than it reads was not read, not that it is out of reach', async () => {
    // Here, not in-process: in Jest's VM, fetch keeps no cause for what undici refused (test/service/serve-chart-limit.test.ts).
    const chart = await startScriptedServer((_req, res) => streamLarge(res, 33, { declared: false }));
    try {
      expect(await run('convert', 'fhir', '--server', chart.url, '--appointment', 'appt-4004')).toEqual({
        code: 1,
        stdout: '',
        stderr: "dental-elig: Appointment: the FHIR server's answer to the read is larger than this plugin reads; not read\n",
      });
    } finally {
      await chart.close();
    }
  });

  it('exits 2 with the same line for a config file it cannot use, whichever command reads it', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'elig-bin-config-'));
    try {
      const config = path.join(dir, 'dental-elig.config.json');
      writeFileSync(config, JSON.stringify({ baseUrl: 'http://127.0.0.1:1', timeoutMs: 'soon' }));
      const env = { DENTAL_ELIG_CONFIG: config, DENTAL_ELIG_API_KEY: 'k' };
      const line = `dental-elig: ${config}: timeoutMs: `;
      for (const command of [['setup', 'portals', 'list'], ['verify', 'get', 'vrf_1'], ['serve', '--data-dir', dir, '--mllp-port', '0', '--http-port', '0'], ['jobs', 'list', '--data-dir', dir]]) {
        const result = await runWith(env, ...command);
        expect({ command: command[0], code: result.code, stdout: result.stdout, stderr: result.stderr.startsWith(line) && result.stderr.split('\n').length === 2 }).toEqual({ command: command[0], code: 2, stdout: '', stderr: true });
      }
      // A setting only the environment holds is a configuration error too.
      const unset = await runWith({ DENTAL_ELIG_BASE_URL: 'http://127.0.0.1:1' }, 'setup', 'portals', 'list');
      expect(unset).toEqual({ code: 2, stdout: '', stderr: 'dental-elig: apiKey: not configured; set DENTAL_ELIG_API_KEY or DENTAL_ELIG_API_KEY_FILE\n' });
      const insecure = { DENTAL_ELIG_BASE_URL: 'http://verify.example.invalid', DENTAL_ELIG_API_KEY: 'k', DENTAL_ELIG_WEBHOOK_SECRET: 'whsec_c2VjcmV0' };
      for (const command of [['setup', 'portals', 'list'], ['serve', '--data-dir', dir, '--mllp-port', '0', '--http-port', '0']]) {
        const result = await runWith(insecure, ...command);
        expect({ command: command[0], code: result.code, stderr: result.stderr }).toEqual({ command: command[0], code: 2, stderr: expect.stringMatching(/^dental-elig: DENTAL_ELIG_BASE_URL: plain http to a host other than this machine /) });
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('says which entries of a saved payer catalog it leaves out, as a listing does, and reads the rest', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'elig-bin-catalog-'));
    const cigna = { primaryPayerId: 'CIGN01', commonPayerId: '62308', name: 'Cigna', features: { insuranceVerificationSynchronous: { supported: true, portals: ['cigna'] } } };
    // Saved before a blank primaryPayerId was refused; its name must not reach stderr.
    const blank = { primaryPayerId: ' ', name: 'Hushed Mutual Dental' };
    const save = (payers: unknown[]) => writeFileSync(catalog, JSON.stringify({ syncedAt: '2024-05-01T00:00:00Z', payers, portals: [{ portalId: 'cigna' }] }));
    const catalog = path.join(dir, 'catalog.json');
    const warning = 'dental-elig: warning: 1 of the entries of the saved payer catalog catalog.json could not be read and are left out: payers.1.primaryPayerId: must not be blank\n';
    const server = await startScriptedServer((req, res) => json(res, 200, { items: req.url.startsWith('/v2/network/payers') ? [cigna] : [{ portalId: 'cigna' }], nextCursor: null }));
    const env = { DENTAL_ELIG_BASE_URL: server.url, DENTAL_ELIG_API_KEY: 'k', DENTAL_ELIG_CATALOG: catalog };
    try {
      const convert = ['convert', 'hl7', 'fixtures/hl7/carepoint-adt-a04-then-siu-s12.hl7', '--as', 'request', '--catalog', catalog, '--received-at', '2026-11-21T10:00:00Z'];
      save([cigna]);
      const clean = { convert: await run(...convert), sync: await runWith(env, 'setup', 'payers', 'sync') };
      expect([clean.convert.code, clean.convert.stderr, clean.sync.code, clean.sync.stderr]).toEqual([0, '', 0, '']);
      save([cigna, blank]);
      expect(await run(...convert)).toEqual({ code: 0, stdout: clean.convert.stdout, stderr: warning });
      save([cigna, blank]);
      expect(await runWith(env, 'setup', 'payers', 'sync')).toEqual({ code: 0, stdout: clean.sync.stdout, stderr: warning });
      expect(server.requests.map((r) => r.url)).toEqual(expect.arrayContaining([expect.stringContaining('updatedSince=2024-05-01')]));
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('exits 2 naming --store for a store URL of a scheme it does not open, without repeating the URL', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'elig-bin-store-'));
    try {
      const line = 'dental-elig: --store: only postgres:// and postgresql:// URLs or a file path are understood\n';
      for (const command of [['serve', '--mllp-port', '0', '--http-port', '0'], ['jobs', 'list']]) {
        const result = await run(...command, '--data-dir', dir, '--store', 'mysql://elig@db.internal/eligibility');
        expect({ command: command[0], ...result }).toEqual({ command: command[0], code: 2, stdout: '', stderr: line });
      }
      const fromEnv = await runWith({ DENTAL_ELIG_STORE: 'mysql://elig:hunter2@db.internal/eligibility' }, 'jobs', 'list', '--data-dir', dir);
      expect(fromEnv).toEqual({ code: 2, stdout: '', stderr: line.replace('--store', 'DENTAL_ELIG_STORE') });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('exits 2 with one line for a mapping or a mapping variable it cannot use, in serve as in convert', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'elig-bin-mappings-'));
    try {
      const base = 'dental-elig: DENTAL_ELIG_FHIR_EXTENSION_BASE: must be an absolute URL\n';
      const badBase = { DENTAL_ELIG_FHIR_EXTENSION_BASE: 'fhir.example-clinic.org/StructureDefinition' };
      expect(await runWith(badBase, 'serve', '--data-dir', dir, '--mllp-port', '0', '--http-port', '0')).toEqual({ code: 2, stdout: '', stderr: base });
      expect(await runWith(badBase, 'convert', 'result', 'fixtures/results/completed-full.json', '--patient', 'Patient/p', '--coverage', 'Coverage/c')).toEqual({ code: 2, stdout: '', stderr: base });
      // A copy of mappings/ with one file broken by an edit.
      const mappings = path.join(dir, 'mappings');
      cpSync(path.join(projectRoot, 'mappings'), mappings, { recursive: true });
      writeFileSync(path.join(mappings, 'fhir', 'categories.json'), '{ "categories": ');
      const broken = await runWith({ DENTAL_ELIG_MAPPINGS: mappings }, 'serve', '--data-dir', dir, '--mllp-port', '0', '--http-port', '0');
      expect([broken.code, broken.stdout]).toEqual([2, '']);
      expect(broken.stderr).toMatch(/^dental-elig: mappings\/fhir\/categories\.json: cannot be read as JSON \([^\n]*\)\n$/);
      // Read by the payer catalog and by a failed verification's result: refused at start-up too, not at the first message.
      cpSync(path.join(projectRoot, 'mappings', 'fhir', 'categories.json'), path.join(mappings, 'fhir', 'categories.json'));
      for (const file of ['payers.json', 'failure-kinds.json']) {
        writeFileSync(path.join(mappings, file), '{ "kinds": ');
        const refused = await runWith({ DENTAL_ELIG_MAPPINGS: mappings }, 'serve', '--data-dir', dir, '--mllp-port', '0', '--http-port', '0');
        expect([refused.code, refused.stdout, refused.stderr]).toEqual([2, '', expect.stringMatching(new RegExp(`^dental-elig: mappings/${file.replace('.', '\\.')}: cannot be read as JSON \\([^\n]*\\)\n$`))]);
        // jobs list classifies failed results by failure-kinds.json: said at once, not a blank column.
        if (file === 'failure-kinds.json') expect(await runWith({ DENTAL_ELIG_MAPPINGS: mappings }, 'jobs', 'list', '--data-dir', dir)).toEqual({ code: 2, stdout: '', stderr: refused.stderr });
        cpSync(path.join(projectRoot, 'mappings', file), path.join(mappings, file));
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("names this version's mappings/ to compare a copy made for an earlier one with, where it lacks a field or a file", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'elig-bin-mappings-'));
    try {
      const mappings = path.join(dir, 'mappings');
      cpSync(path.join(projectRoot, 'mappings'), mappings, { recursive: true });
      const serve = () => runWith({ DENTAL_ELIG_MAPPINGS: mappings }, 'serve', '--data-dir', dir, '--mllp-port', '0', '--http-port', '0');
      const compare = ` (a copy of mappings/ lacking what this version's own has? compare it with ${path.join(projectRoot, 'mappings')})\n`;
      // The HL7 profile as it was before processing ids were checked.
      const { processingIds: _added, ...profile } = JSON.parse(readFileSync(path.join(mappings, 'hl7', 'default.json'), 'utf8')) as Record<string, unknown>;
      writeFileSync(path.join(mappings, 'hl7', 'default.json'), JSON.stringify(profile));
      expect(await serve()).toEqual({ code: 2, stdout: '', stderr: `dental-elig: mappings/hl7/default.json: processingIds: Invalid input: expected array, received undefined${compare}` });
      cpSync(path.join(projectRoot, 'mappings', 'hl7', 'default.json'), path.join(mappings, 'hl7', 'default.json'));
      rmSync(path.join(mappings, 'fhir', 'appointment-status.json'));
      const missing = await serve();
      expect([missing.code, missing.stderr.startsWith('dental-elig: mappings/fhir/appointment-status.json: cannot be read as JSON (ENOENT'), missing.stderr.endsWith(compare)]).toEqual([2, true, true]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("begins its usage errors with its name, as every other line it writes to stderr, and exits 2", async () => {
    expect(await run('jobs', 'list', '--verbose')).toEqual({ code: 2, stdout: '', stderr: "dental-elig: error: unknown option '--verbose'\n" });
    expect(await run('convert', 'hl7')).toEqual({ code: 2, stdout: '', stderr: "dental-elig: error: missing required argument 'file'\n" });
    expect(await run('nosuch')).toEqual({ code: 2, stdout: '', stderr: "dental-elig: error: unknown command 'nosuch'\n" });
  });

  it('says a usage error with its suggestion in one line, what was typed unable to move the cursor', async () => {
    expect(await run('jobs', 'list', '--jsn')).toEqual({ code: 2, stdout: '', stderr: "dental-elig: error: unknown option '--jsn' (Did you mean --json?)\n" });
    expect(await run('jobs', 'list', '--x\u001b[2J')).toEqual({ code: 2, stdout: '', stderr: "dental-elig: error: unknown option '--x [2J'\n" });
  });

  it('reports an unusable message in one line with a non-zero exit, no stack trace', async () => {
    const result = await run('convert', 'hl7', 'fixtures/hl7/reject-missing-birth-date.hl7');
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr).toMatch(/^dental-elig: \S+: PID-7: birth date missing\n$/);
  });
});
