import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import type { CoverageEligibilityResponse } from 'fhir/r4';
import { projectRoot } from '../../src/mapping-files';
import { generateWebhookSecret, startSandbox, type Sandbox } from '../../src/sandbox';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import { frame } from '../../src/service/mllp-framing';
import { startPostgres, type TestPostgres } from '../support/postgres';
import { booking } from '../support/bookings';
import { bin, startServe, type Serve } from '../support/serve-process';
import { searchFhir, until } from '../sync/harness';
import { client } from './mllp-client';

/**
 * Two `serve` processes on one PostgreSQL database, as a dental group runs them behind a load
 * balancer: 100 bookings split between them, one killed with SIGKILL mid-batch. The other takes
 * over its leased checks at once, not when their leases (the default two minutes) run out, and
 * every booking ends with exactly one response.
 */
describe('two serve instances on PostgreSQL', () => {
  let postgres: TestPostgres;
  let sandbox: Sandbox;
  let fhir: FhirServer;
  const dirs: string[] = [];
  const running: Serve[] = [];

  beforeAll(async () => {
    postgres = await startPostgres();
    sandbox = await startSandbox({ seed: true, timing: { asyncCompletionMs: 400, webhookBackoffMs: 100 } });
    fhir = await startFhirServer({ validate: true });
  });
  afterAll(async () => {
    for (const r of running) r.child.kill('SIGKILL');
    await sandbox.close();
    await fhir.close();
    await postgres.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  const dataDir = () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'elig-instance-'));
    writeFileSync(
      path.join(dir, 'config.json'),
      JSON.stringify({ logLevel: 'warn', settings: { webhookDeadlineMs: 1500, pollAfterMs: 300, backoffBaseMs: 100, backoffMaxMs: 1000, idleMs: 50, concurrency: 8 } }),
    );
    dirs.push(dir);
    return dir;
  };

  it('ends all 100 bookings with one response each after one of two instances is killed', async () => {
    const store = await postgres.createDatabase();
    const secret = generateWebhookSecret();
    const env = { DENTAL_ELIG_BASE_URL: sandbox.url, DENTAL_ELIG_API_KEY: sandbox.apiKey, DENTAL_ELIG_FHIR_URL: fhir.url, DENTAL_ELIG_WEBHOOK_SECRET: secret };
    const [a, b] = await Promise.all([startServe(dataDir(), env, ['--store', store]), startServe(dataDir(), env, ['--store', store])]);
    if (!a || !b) throw new Error('serve did not start');
    running.push(a, b);
    // The load balancer's one webhook URL: instance A, until it dies.
    sandbox.configureWebhook({ url: `http://127.0.0.1:${a.httpPort}/webhooks/insurance-verification`, secret });

    const count = 100;
    const [toA, toB] = await Promise.all([client(a.mllpPort), client(b.mllpPort)]);
    for (let i = 0; i < count; i++) (i % 2 === 0 ? toA : toB).socket.write(frame(booking('PG', i)));
    const acks = [...(await toA.waitFor(count / 2, 20_000)), ...(await toB.waitFor(count / 2, 20_000))];
    expect(acks.every((ack) => ack.includes('MSA|AA|'))).toBe(true);
    a.child.kill('SIGKILL');
    expect(await a.exited).toBeNull();
    sandbox.configureWebhook({ url: `http://127.0.0.1:${b.httpPort}/webhooks/insurance-verification`, secret });

    const jobs = async () => {
      const { stdout } = await promisify(execFile)(process.execPath, [bin, 'jobs', 'list', '--store', store, '--json'], { cwd: projectRoot });
      return JSON.parse(stdout) as Array<{ job: string; state: string }>;
    };
    const rows = await until('every booking written', async () => {
      const listed = await jobs();
      return listed.length === count && listed.every((r) => r.state === 'written') && listed;
    }, 60_000);
    expect(new Set(rows.map((r) => r.job)).size).toBe(count);
    const responses = (await searchFhir(fhir, 'CoverageEligibilityResponse?_count=200')) as CoverageEligibilityResponse[];
    expect(responses).toHaveLength(count);
    expect(new Set(responses.map((r) => r.identifier?.[0]?.value)).size).toBe(count);
  }, 120_000);

  it('refuses a database password on the command line', async () => {
    const run = await promisify(execFile)(process.execPath, [bin, 'jobs', 'list', '--store', 'postgres://u:secret@127.0.0.1:1/db'], { cwd: projectRoot }).catch((e: { code: number; stderr: string }) => e);
    expect('code' in run ? run.code : 0).toBe(2);
    expect(run.stderr).toBe('dental-elig: --store: a password does not belong on the command line; set PGPASSWORD, or the whole URL in DENTAL_ELIG_STORE\n');
  });
});
