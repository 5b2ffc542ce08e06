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
import { booking } from '../support/bookings';
import { bin, startServe, type Serve } from '../support/serve-process';
import { client } from './mllp-client';
import { searchFhir, until } from '../sync/harness';

/**
 * The sidecar as it runs in production: the built `dental-elig serve` as its own process, the
 * service and the chart as remote servers, a batch over MLLP, SIGKILL in the middle, a restart on
 * the same data dir. Every appointment ends with exactly one CoverageEligibilityResponse, and
 * the checks the killed process had in hand go on at once: their leases are the default two
 * minutes, longer than the test waits.
 */
describe('dental-elig serve, killed and restarted', () => {
  let sandbox: Sandbox;
  let fhir: FhirServer;
  let dataDir: string;
  let running: Serve | undefined;

  beforeAll(async () => {
    sandbox = await startSandbox({ seed: true, timing: { asyncCompletionMs: 400, webhookBackoffMs: 100 } });
    fhir = await startFhirServer({ validate: true });
    dataDir = mkdtempSync(path.join(tmpdir(), 'elig-serve-'));
    writeFileSync(
      path.join(dataDir, 'config.json'),
      JSON.stringify({ logLevel: 'warn', settings: { webhookDeadlineMs: 1500, pollAfterMs: 300, backoffBaseMs: 100, backoffMaxMs: 1000, idleMs: 50, concurrency: 4 } }),
    );
  });
  afterAll(async () => {
    running?.child.kill('SIGKILL');
    await sandbox.close();
    await fhir.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('ends every appointment of a batch with exactly one response after a SIGKILL mid-batch', async () => {
    const secret = generateWebhookSecret();
    const env = { DENTAL_ELIG_BASE_URL: sandbox.url, DENTAL_ELIG_API_KEY: sandbox.apiKey, DENTAL_ELIG_FHIR_URL: fhir.url, DENTAL_ELIG_WEBHOOK_SECRET: secret };
    const count = 24;

    running = await startServe(dataDir, env);
    sandbox.configureWebhook({ url: `http://127.0.0.1:${running.httpPort}/webhooks/insurance-verification`, secret });
    // One process works a SQLite store: a second serve on the same data dir says so and exits.
    const second = await startServe(dataDir, env).then(
      () => 'started',
      (err: Error) => err.message,
    );
    expect(second).toMatch(/serve exited with 1: .*another process is working it/);
    const sender = await client(running.mllpPort);
    for (let i = 0; i < count; i++) sender.socket.write(frame(booking('K', i)));
    const acks = await sender.waitFor(count, 15_000);
    expect(acks.every((a) => a.includes('MSA|AA|'))).toBe(true);
    // Mid-batch: every booking is stored (ACKed), few if any are written yet.
    running.child.kill('SIGKILL');
    expect(await running.exited).toBeNull();
    const writtenBeforeKill = (await searchFhir(fhir, 'CoverageEligibilityResponse?_count=100')).length;
    expect(writtenBeforeKill).toBeLessThan(count);

    running = await startServe(dataDir, env);
    sandbox.configureWebhook({ url: `http://127.0.0.1:${running.httpPort}/webhooks/insurance-verification`, secret });
    const jobs = async () => {
      const { stdout } = await promisify(execFile)(process.execPath, [bin, 'jobs', 'list', '--data-dir', dataDir, '--json'], { cwd: projectRoot });
      return JSON.parse(stdout) as Array<{ job: string; state: string }>;
    };
    const finished = await until('every check written after the restart', async () => {
      const rows = await jobs();
      return rows.length === count && rows.every((r) => r.state === 'written') && rows;
    }, 45_000);
    expect(new Set(finished.map((r) => r.job)).size).toBe(count);

    const responses = (await searchFhir(fhir, 'CoverageEligibilityResponse?_count=100')) as CoverageEligibilityResponse[];
    expect(responses).toHaveLength(count);
    expect(responses.every((r) => r.outcome === 'complete')).toBe(true);
    // One verification per booking: repeated POSTs after the crash carried the same externalId.
    const verifications = new Set(responses.map((r) => r.identifier?.[0]?.value));
    expect(verifications.size).toBe(count);

    running.child.kill('SIGTERM');
    expect(await running.exited).toBe(0);
    running = undefined;
  }, 90_000);
});
