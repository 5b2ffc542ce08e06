import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { startSandbox, type Sandbox } from '../../src/sandbox';
import { cli } from '../support/cli';
import { json, startScriptedServer } from '../support/http-server';

let sandbox: Sandbox;
let env: NodeJS.ProcessEnv;
let dir: string;
let catalog: string;

beforeAll(async () => {
  sandbox = await startSandbox({ seed: true, timing: { asyncCompletionMs: 50, validationMs: 50 } });
  dir = await mkdtemp(path.join(tmpdir(), 'verify-cli-'));
  catalog = path.join(dir, 'catalog.json');
  env = { DENTAL_ELIG_BASE_URL: sandbox.url, DENTAL_ELIG_API_KEY: sandbox.apiKey, DENTAL_ELIG_CATALOG: catalog };
  expect((await cli(['setup', 'payers', 'sync'], env)).code).toBe(0);
});
afterAll(async () => {
  await sandbox.close();
  await rm(dir, { recursive: true, force: true });
});

const field = (out: string, name: string) => [...out.matchAll(new RegExp(`^${name}\\s+(.+)$`, 'gm'))].map((m) => m[1]);
const body = (memberId: string) => ({
  clinicId: 'cln_sandbox_main',
  portalId: 'deltadentalins',
  payer: { payerId: 'CDCA1', name: 'Delta Dental of California' },
  patient: { firstName: 'Ellen', lastName: 'Whitaker', dateOfBirth: '1978-03-14', gender: 'F' },
  subscriber: { firstName: 'Ellen', lastName: 'Whitaker', dateOfBirth: '1978-03-14', memberId, relationship: 'Self' },
  dateOfService: '2026-12-01',
});

describe('convert … --as request | verify -', () => {
  it('verifies each request of the array convert hl7 prints', async () => {
    const converted = await cli(['convert', 'hl7', 'fixtures/hl7/molarpms-siu-s12-two-insurances.hl7', '--as', 'request', '--catalog', catalog]);
    expect(converted.code).toBe(0);
    expect(JSON.parse(converted.stdout)).toHaveLength(2);
    const run = await cli(['verify', '-'], env, converted.stdout);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(field(run.stdout, 'status')).toEqual(['Completed', 'Completed']);
    expect(field(run.stdout, 'payer')).toEqual(['Delta Dental of California', expect.stringMatching(/\S/)]);
  });

  it('verifies what convert fhir --as request prints, and prints an array with --json', async () => {
    const converted = await cli(['convert', 'fhir', 'fixtures/fhir/primary-secondary.bundle.json', '--as', 'request', '--catalog', catalog]);
    expect(converted.stderr).toBe('');
    const requests = JSON.parse(converted.stdout) as Array<{ externalId: string }>;
    expect(requests).toHaveLength(2);
    const run = await cli(['verify', '-', '--json'], env, converted.stdout);
    expect(run.code).toBe(0);
    const verifications = JSON.parse(run.stdout) as Array<{ externalId: string; status: string }>;
    expect(verifications.map((v) => [v.externalId, v.status])).toEqual(requests.map((r) => [r.externalId, 'Completed']));
  });

  it('takes JSON lines, and names the line of one that is not JSON without echoing it', async () => {
    const lines = `${JSON.stringify(body('SBX-MINIMAL'))}\n\n${JSON.stringify(body('SBX-COMPLETE'))}\n`;
    const run = await cli(['verify', '-'], env, lines);
    expect(run.code).toBe(0);
    expect(field(run.stdout, 'status')).toEqual(['Completed', 'Completed']);
    const broken = await cli(['verify', '-'], env, `${JSON.stringify(body('SBX-MINIMAL'))}\n{"lastName":Whitaker}\n`);
    expect(broken).toEqual({ code: 1, stdout: '', stderr: 'dental-elig: stdin: not valid JSON at line 2, column 13: unexpected character where a value was expected\n' });
  });

  it('names the item of an array that is not a request', async () => {
    const run = await cli(['verify', '-'], env, JSON.stringify([body('SBX-MINIMAL'), { clinicId: 'c' }]));
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^dental-elig: stdin \[1\]: payer: /);
    expect((await cli(['verify', '-'], env, '[]')).stderr).toBe('dental-elig: stdin: an empty array holds no request\n');
  });

  it('reports each failure of several on stderr, then the count, and exits 1', async () => {
    const run = await cli(['verify', '-'], env, JSON.stringify([body('SBX-FAIL-PatientNotFound'), body('SBX-MINIMAL')]));
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^dental-elig: verification \S+: Failed \(PatientNotFound, needs-a-person\)\ndental-elig: 1 of 2 verifications did not complete\n$/);
  });
});

describe('verify', () => {
  it('stops a batch at a body the service refuses, naming it, and still prints what those before it did', async () => {
    const batch = JSON.stringify([body('SBX-FAIL-PatientNotFound'), body('SBX-MINIMAL'), { ...body('SBX-MINIMAL'), clinicId: 'cln_unknown' }, body('SBX-COMPLETE')]);
    const run = await cli(['verify', '-', '--json'], env, batch);
    expect(run.code).toBe(1);
    expect((JSON.parse(run.stdout) as Array<{ status: string }>).map((v) => v.status)).toEqual(['Failed', 'Completed']);
    expect(run.stderr).toMatch(/^dental-elig: verification \S+: Failed \(PatientNotFound, needs-a-person\)\ndental-elig: stdin \[2\]: verify insurance failed with 404 - Not Found: .+; 1 after it not sent\n$/);
    const queued = await cli(['verify', '-', '--async', '--json'], env, batch);
    expect(queued.code).toBe(1);
    expect((JSON.parse(queued.stdout) as Array<{ status: string }>).map((v) => v.status)).toEqual(['Pending', 'Pending']);
  });

  it('labels the counts of maximums and coinsurance, so they do not read as money', async () => {
    const file = path.join(dir, 'one.json');
    await writeFile(file, JSON.stringify(body('SBX-COMPLETE')));
    const run = await cli(['verify', file], env);
    expect(run.code).toBe(0);
    expect(field(run.stdout, 'maximums')).toEqual([expect.stringMatching(/^\d+ entries \(amounts: --json\)$/)]);
    expect(field(run.stdout, 'coinsurance')).toEqual([expect.stringMatching(/^\d+ categories \(percentages: --json\)$/)]);
  });

  it('refuses --wait without --async', async () => {
    const run = await cli(['verify', '-', '--wait'], env, JSON.stringify(body('SBX-MINIMAL')));
    expect(run).toEqual({ code: 2, stdout: '', stderr: 'dental-elig: --wait: goes with --async; a synchronous verification answers with its outcome\n' });
  });

  it('queues with --async, and `verify get` fetches the result later by the correlationId it printed', async () => {
    const queued = await cli(['verify', '-', '--async'], env, JSON.stringify(body('SBX-COMPLETE')));
    expect(queued.code).toBe(0);
    const [correlationId] = field(queued.stdout, 'correlationId');
    expect(field(queued.stdout, 'status')).toEqual(['Pending']);
    expect(queued.stdout).toContain(`next: \`dental-elig verify get ${correlationId}\` fetches a result`);
    const waited = await cli(['verify', 'get', correlationId ?? '', '--wait', '--first-delay-ms', '60'], env);
    expect(waited.code).toBe(0);
    expect(field(waited.stdout, 'status')).toEqual(['Completed']);
    const again = await cli(['verify', 'get', correlationId ?? '', '--json'], env);
    expect(JSON.parse(again.stdout)).toMatchObject({ correlationId, status: 'Completed' });
  });

  it('answers an unknown correlationId with the service problem, once', async () => {
    const run = await cli(['verify', 'get', 'nope'], env);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^dental-elig: get insurance verification failed with 404 - [^\n]+\n$/);
  });

  it('ends the polling line before a failure or a warning, so each is a line of its own', async () => {
    const unknown = await cli(['verify', 'get', 'nope', '--wait'], env);
    expect(unknown).toEqual({ code: 1, stdout: '', stderr: 'queued nope; polling\ndental-elig: get insurance verification failed with 404 - Not Found: no insurance verification has this id\n' });
    sandbox.injectFault({ method: 'GET', path: /^\/v2\/insurance-verifications\//, status: 503, retryAfterSeconds: 0 });
    const retried = await cli(['verify', '-', '--async', '--wait', '--first-delay-ms', '60'], env, JSON.stringify(body('SBX-MINIMAL')));
    expect(retried.code).toBe(0);
    expect(retried.stderr).toMatch(/^queued \S+; polling\ndental-elig: warning: get insurance verification: GET \S+ answered 503; retry 1 of 4 in \d\.\d s\n(Pending )*Completed\n$/);
  });

  it('names the verification it queued when polling for it fails, and how to ask for it again', async () => {
    sandbox.injectFault({ method: 'GET', path: /^\/v2\/insurance-verifications\//, status: 404, times: 1 });
    const run = await cli(['verify', '-', '--async', '--wait', '--first-delay-ms', '0'], env, JSON.stringify(body('SBX-MINIMAL')));
    const id = /^queued (\S+); polling\n/.exec(run.stderr)?.[1];
    expect(run.code).toBe(1);
    expect(run.stderr.split('\n')[1]).toBe(
      `dental-elig: verification ${id} queued, but get insurance verification failed with 404 - Injected fault: the sandbox was told to answer 404 here; \`dental-elig verify get ${id} --wait\` asks for it again`,
    );
  });

  it('prints with --json the one verification it queued when polling for it fails, as --async alone prints it', async () => {
    sandbox.injectFault({ method: 'GET', path: /^\/v2\/insurance-verifications\//, status: 404, times: 1 });
    const run = await cli(['verify', '-', '--async', '--wait', '--first-delay-ms', '0', '--json'], env, JSON.stringify(body('SBX-MINIMAL')));
    const id = /^queued (\S+); polling\n/.exec(run.stderr)?.[1];
    expect(run.code).toBe(1);
    expect(JSON.parse(run.stdout)).toEqual(expect.objectContaining({ correlationId: id, status: 'Pending' }));
    expect(run.stderr).toContain(`dental-elig: verification ${id} queued, but get insurance verification failed with 404`);
  });

  it('keeps a queued verification whose polling failed in the --json array of a batch, as --async alone prints it', async () => {
    sandbox.injectFault({ method: 'GET', path: /^\/v2\/insurance-verifications\//, status: 404, times: 1 });
    const run = await cli(['verify', '-', '--async', '--wait', '--first-delay-ms', '0', '--json'], env, JSON.stringify([body('SBX-MINIMAL'), body('SBX-COMPLETE')]));
    const id = /^queued (\S+); polling\n/.exec(run.stderr)?.[1];
    expect(run.code).toBe(1);
    expect(JSON.parse(run.stdout)).toEqual([expect.objectContaining({ correlationId: id, status: 'Pending' })]);
    expect(run.stderr).toContain(`dental-elig: stdin [0]: verification ${id} queued, but get insurance verification failed with 404`);
    expect(run.stderr).toMatch(/; 1 after it not sent\n$/);
  });

  it('refuses, waiting for an asynchronous verification, a body naming another externalId than the one it was sent under', async () => {
    const server = await startScriptedServer((req, res) =>
      req.method === 'POST'
        ? json(res, 202, { correlationId: 'ver_x', status: 'Pending' })
        : json(res, 200, { correlationId: 'ver_x', externalId: 'ext-another-request', status: 'Completed', result: { plan: { name: 'PPO' } } }),
    );
    try {
      const run = await cli(['verify', '-', '--async', '--wait', '--first-delay-ms', '0'], { ...env, DENTAL_ELIG_BASE_URL: server.url }, JSON.stringify({ ...body('SBX-MINIMAL'), externalId: 'ext-mine' }));
      expect(run.code).toBe(1);
      expect(run.stderr).toContain('externalId: is not the one sent');
      expect(run.stdout).not.toContain('PPO');
    } finally {
      await server.close();
    }
  });

  it('shows what each source said of a failure, and each gap of a Partial result by what names it', async () => {
    const answers: Record<string, unknown> = {
      '/v2/insurance-verifications/ver_f': {
        correlationId: 'ver_f',
        status: 'Failed',
        result: { type: 'https://errors.example/Upstream', title: 'Upstream error', detail: 'One or more sources failed.', upstreamErrors: [{ portalId: 'deltadentalins', detail: 'benefits page timed out' }, { detail: 'clearinghouse down' }, {}] },
      },
      '/v2/insurance-verifications/ver_p': { correlationId: 'ver_p', status: 'Partial', result: { data: {}, contexts: [{ dataPoint: 'frequencies' }, { portalId: 'metdental' }] } },
      '/v2/insurance-verifications/ver_q': { correlationId: 'ver_q', status: 'Partial', result: { data: {}, contexts: [] } },
    };
    const server = await startScriptedServer((req, res) => json(res, 200, answers[req.url]));
    const at = { ...env, DENTAL_ELIG_BASE_URL: server.url };
    try {
      const failed = await cli(['verify', 'get', 'ver_f'], at);
      expect(field(failed.stdout, 'upstream')).toEqual(['deltadentalins: benefits page timed out, clearinghouse down']);
      expect(field((await cli(['verify', 'get', 'ver_p'], at)).stdout, 'gaps')).toEqual(['frequencies, metdental']);
      expect((await cli(['verify', 'get', 'ver_q'], at)).stdout).not.toMatch(/^gaps/m);
    } finally {
      await server.close();
    }
  });

  it('names the file, line and column of a body that is not JSON, never its content', async () => {
    const file = path.join(dir, 'bad.json');
    await writeFile(file, '{\n  "patient": {"lastName":Whitaker,"firstName":"Ellen"}\n}');
    const run = await cli(['verify', file], env);
    expect(run).toEqual({ code: 1, stdout: '', stderr: `dental-elig: ${file}: not valid JSON at line 2, column 26: unexpected character where a value was expected\n` });
    expect(run.stderr).not.toContain('Whitaker');
  });
});
