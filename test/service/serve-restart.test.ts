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
import { booking, bookingFor } from '../support/bookings';
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

  it('verifies a visit moved while its send was on its way once, serve killed before that send was answered', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'elig-serve-'));
    // webhookDeadlineMs well past the test's time: the moved visit is verified on its own only if nothing finds out what became of the first send.
    writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ logLevel: 'warn', settings: { webhookDeadlineMs: 600_000, pollAfterMs: 300, backoffBaseMs: 100, backoffMaxMs: 1000, idleMs: 50 } }));
    const secret = generateWebhookSecret();
    const env = { DENTAL_ELIG_BASE_URL: sandbox.url, DENTAL_ELIG_API_KEY: sandbox.apiKey, DENTAL_ELIG_FHIR_URL: fhir.url, DENTAL_ELIG_WEBHOOK_SECRET: secret };
    const jobs = async (...args: string[]) => {
      const { stdout } = await promisify(execFile)(process.execPath, [bin, 'jobs', ...args, '--data-dir', dir, '--json'], { cwd: projectRoot });
      return JSON.parse(stdout) as unknown;
    };
    const checks = async () => (await jobs('list')) as Array<{ job: string; state: string; dateOfService: string }>;
    const before = (await searchFhir(fhir, 'CoverageEligibilityResponse?_count=200')).length;
    try {
      running = await startServe(dir, env);
      sandbox.configureWebhook({ url: `http://127.0.0.1:${running.httpPort}/webhooks/insurance-verification`, secret });
      // The first send's answer held back: serve is killed with it on its way, the service taking it all the same.
      sandbox.injectFault({ method: 'POST', path: /insurance-verification/, delayMs: 4000 });
      const sender = await client(running.mllpPort);
      const booked = bookingFor('MOVE-1', 'SBX-COMPLETE-MOVE-1');
      sender.socket.write(frame(booked));
      await sender.waitFor(1);
      await until('the first send on its way', async () => (await checks()).some((c) => c.state === 'submitted'));
      const move = booked.replace('SIU^S12^SIU_S12|MOVE-1|', 'SIU^S13^SIU_S12|MOVE-1-2|').replace('^^^20261210093000', '^^^20261211093000');
      sender.socket.write(frame(move));
      const acks = await sender.waitFor(2);
      expect(acks.every((a) => a.includes('MSA|AA|'))).toBe(true);
      running.child.kill('SIGKILL');
      await running.exited;

      running = await startServe(dir, env);
      sandbox.configureWebhook({ url: `http://127.0.0.1:${running.httpPort}/webhooks/insurance-verification`, secret });
      const moved = await until('the moved visit written', async () => (await checks()).find((c) => c.dateOfService === '2026-12-11' && c.state === 'written'), 30_000);
      const cancelled = (await checks()).find((c) => c.dateOfService === '2026-12-10');
      expect(cancelled?.state).toBe('cancelled');
      const [first, second] = (await Promise.all([jobs('show', cancelled?.job ?? ''), jobs('show', moved.job)])) as Array<{ externalId: string; correlationId?: string; reusedFrom?: string }>;
      // The cancelled check asked the service again under its externalId, and the moved visit took that verification's result.
      expect(first?.correlationId).toBeDefined();
      expect(second?.reusedFrom).toBe(first?.correlationId);
      const responses = (await searchFhir(fhir, 'CoverageEligibilityResponse?_count=200')) as CoverageEligibilityResponse[];
      expect(responses).toHaveLength(before + 1);
      expect(responses.filter((r) => r.identifier?.[0]?.value === first?.correlationId)).toHaveLength(1);
      running.child.kill('SIGTERM');
      expect(await running.exited).toBe(0);
      running = undefined;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
