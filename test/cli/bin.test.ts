import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { projectRoot } from '../../src/mapping-files';
import { json, startScriptedServer } from '../support/http-server';

/**
 * The installed command as a person runs it: `bin/dental-elig.js` over the build that
 * `npm ci` makes (the `prepare` script). Everything else drives the CLI in-process.
 */
const bin = path.join(projectRoot, 'bin', 'dental-elig.js');
const run = async (...args: string[]) => runWith({}, ...args);
const runWith = async (env: NodeJS.ProcessEnv, ...args: string[]) => {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [bin, ...args], { cwd: projectRoot, env: { PATH: process.env.PATH, ...env } });
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

  it('reports an unusable message in one line with a non-zero exit, no stack trace', async () => {
    const result = await run('convert', 'hl7', 'fixtures/hl7/reject-missing-birth-date.hl7');
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr).toMatch(/^dental-elig: \S+: PID-7: birth date missing\n$/);
  });
});
