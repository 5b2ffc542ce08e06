import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { generateWebhookSecret, startSandbox } from '../../src/sandbox';
import { frame } from '../../src/service/mllp-framing';
import { client } from '../service/mllp-client';
import { bookingFor } from '../support/bookings';
import { startServe, type Serve } from '../support/serve-process';
import { checkRow } from './job-store-contract';
import { startHarness, until, type Harness } from './harness';
import { RIG_OPTIONS, resultBody, startWorkerRig, type RigStore, type WorkerRig } from './worker-rig';
import { json } from '../support/http-server';
import { dateBackChecks } from '../../src/sync/clock-step';
import { answeredThisRound } from '../../src/sync/job-store';
import type { PayerResolver } from '../../src/domain';

/** serve on SQLite times its checks by this machine's clock: one stepped back since they were stored is said, and what it dated ahead dated back. */
describe('a start on a store whose changes are dated ahead of the clock', () => {
  let dataDir: string;
  let h: Harness | undefined;
  beforeEach(() => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'elig-clock-'));
  });
  afterEach(async () => {
    await h?.close();
    h = undefined;
    rmSync(dataDir, { recursive: true, force: true });
  });

  const storedAt = async (updatedAt: Date) => {
    const store = SqliteJobStore.open(dataDir);
    // Written, nothing due: the start only reads when it was changed.
    await store.transaction((tx) => tx.putCheck(checkRow('elig_stored', { state: 'written', updatedAt: updatedAt.toISOString() })));
    await store.close();
  };
  const clockLines = () => (h?.logs ?? []).filter((line) => line.includes("dated ahead of this machine's clock"));
  /** What a step of the wall clock leaves as it was: the monotonic clock and the timers. */
  const TIMERS = ['hrtime', 'nextTick', 'performance', 'queueMicrotask', 'setImmediate', 'clearImmediate', 'setInterval', 'clearInterval', 'setTimeout', 'clearTimeout'] as const;
  const sends503 = () => (h?.sandbox.requestLog ?? []).filter((r) => r.status === 503).length;

  it('warns once when the newest change is an hour ahead, saying by how much, and not what the check is', async () => {
    await storedAt(new Date(Date.now() + 3_600_000));
    h = await startHarness({ dataDir });
    expect(clockLines()).toHaveLength(1);
    const line = JSON.parse(clockLines()[0] ?? '{}') as { level: number; aheadMs: number; key?: unknown };
    expect(line.level).toBe(40);
    expect(line.aheadMs).toBeGreaterThan(3_500_000);
    expect(line.key).toBeUndefined();
  });

  it('warns once when the clock steps back an hour while it runs, saying by how much, and not at each look after', async () => {
    h = await startHarness({ dataDir });
    expect(clockLines()).toEqual([]);
    // This machine's wall clock set back an hour, its monotonic clock and its timers going on as they were.
    jest.useFakeTimers({ doNotFake: [...TIMERS], advanceTimers: true, now: Date.now() - 3_600_000 });
    try {
      await until('the step said', async () => clockLines().length > 0);
      const line = JSON.parse(clockLines()[0] ?? '{}') as { level: number; aheadMs: number };
      expect(line.level).toBe(40);
      expect(line.aheadMs).toBeGreaterThan(3_500_000);
      // Looked at each second: a few looks later, still said once.
      await new Promise((resolve) => setTimeout(resolve, 3000));
      expect(clockLines()).toHaveLength(1);
    } finally {
      jest.useRealTimers();
    }
  });

  it('dates back, as it starts, the checks changed under a clock an hour ahead: a backoff is its own delay from now, a re-verification due before the visit stays due then', async () => {
    const ahead = () => new Date(Date.now() + 3_600_000);
    // Stored by a sync whose clock ran an hour ahead: a check backing off 2 s for a service answering 503, and one written, its re-verification due the day before its visit.
    const before = await startHarness({ dataDir, now: ahead, settings: { backoffBaseMs: 2000, backoffMaxMs: 2000 } });
    try {
      await before.sync.receiveHl7(bookingFor('B1', 'SBX-503'));
      await before.sync.receiveHl7(bookingFor('W1', 'SBX-COMPLETE'));
      await until('one backing off, one written', async () => {
        const checks = await before.store.listChecks();
        return checks.some((c) => c.state === 'written') && checks.some((c) => c.state === 'received' && c.lastError !== undefined);
      });
    } finally {
      await before.close();
    }
    const stored = SqliteJobStore.open(dataDir);
    const [backingOff, written] = await Promise.all(['received', 'written'].map(async (state) => (await stored.listChecks({ states: [state as 'received' | 'written'] }))[0]));
    await stored.close();
    if (!backingOff?.dueAt || !written?.dueAt) throw new Error('no due times stored');
    expect(Date.parse(backingOff.dueAt)).toBeGreaterThan(Date.now() + 3_500_000);

    h = await startHarness({ dataDir });
    // Sent again once its 2 s are out, not in an hour.
    await until('the check backing off sent again', async () => sends503() > 0);
    const sentAgain = await h.store.transaction((tx) => tx.getCheck(backingOff.key));
    expect(Date.parse(sentAgain?.updatedAt ?? '')).toBeLessThanOrEqual(Date.now());
    const line = JSON.parse(clockLines()[0] ?? '{}') as { aheadMs: number; checks: number };
    expect(line.aheadMs).toBeGreaterThan(3_500_000);
    expect(line.checks).toBe(2);
    const rewritten = await h.store.transaction((tx) => tx.getCheck(written.key));
    expect([rewritten?.state, rewritten?.dueAt]).toEqual(['written', written.dueAt]);
    expect(Date.parse(rewritten?.resultAt ?? '')).toBeLessThanOrEqual(Date.now());
    expect(Date.parse(rewritten?.updatedAt ?? '')).toBeLessThanOrEqual(Date.now());
  });

  it('dates back, once the clock steps back while it runs, the checks changed while it ran ahead: a backoff is its own delay from the step', async () => {
    h = await startHarness({ dataDir, settings: { backoffBaseMs: 2000, backoffMaxMs: 2000 } });
    // The wall clock an hour ahead while a check for a service answering 503 is stored and backs off 2 s, then set right.
    jest.useFakeTimers({ doNotFake: [...TIMERS], advanceTimers: true, now: Date.now() + 3_600_000 });
    let key: string;
    try {
      await h.sync.receiveHl7(bookingFor('B1', 'SBX-503'));
      key = (await until('the check backing off', async () => (await h?.store.listChecks({ states: ['received'] }))?.find((c) => c.lastError !== undefined))).key;
      // Ahead for a backoff and more, as a clock that ran ahead is: the watch has looked at it meanwhile.
      await until('the check sent again while the clock runs ahead', async () => sends503() > 1);
    } finally {
      jest.useRealTimers();
    }
    const sent = sends503();
    await until('the step said', async () => clockLines().length > 0);
    await until('the check backing off sent again', async () => sends503() > sent);
    const line = JSON.parse(clockLines()[0] ?? '{}') as { aheadMs: number; checks: number };
    expect(line.aheadMs).toBeGreaterThan(3_500_000);
    expect(line.checks).toBe(1);
    const row = await h.store.transaction((tx) => tx.getCheck(key));
    expect(Date.parse(row?.updatedAt ?? '')).toBeLessThanOrEqual(Date.now());
  });

  it('probes an outage it found while the clock ran ahead once it steps back, not an hour later: its checks are sent when the service answers', async () => {
    h = await startHarness({ dataDir, settings: { backoffBaseMs: 200, backoffMaxMs: 1000 } });
    const service = h.sandbox;
    service.injectFault({ path: /^\/v2\/insurance-verification/, status: 503, times: Infinity });
    const outageSaid = () => h?.logs.some((line) => line.includes('the verification service is not answering')) ?? false;
    jest.useFakeTimers({ doNotFake: [...TIMERS], advanceTimers: true, now: Date.now() + 3_600_000 });
    try {
      for (let i = 1; i <= 6; i++) await h.sync.receiveHl7(bookingFor(`O${i}`, `SBX-COMPLETE-O${i}`));
      await until('the outage found while the clock runs ahead', async () => outageSaid());
      // Probed in vain twice more meanwhile: the next probe is timed by the clock ahead.
      const sent = sends503();
      await until('the outage probed while the clock runs ahead', async () => sends503() > sent + 1);
      // Ahead for longer than the watch's look, as a clock that ran ahead is.
      await new Promise((resolve) => setTimeout(resolve, 2500));
    } finally {
      jest.useRealTimers();
    }
    await until('the step said', async () => clockLines().length > 0);
    service.clearFaults();
    await until('every check written once the service answers', async () => (await h?.store.listChecks({ states: ['written'] }))?.length === 6, 20_000);
  }, 60_000);

  it('dates back, as serve starts with its host\'s clock set right, the checks it stored while the clock ran an hour ahead', async () => {
    // serve as its own process, its wall clock an hour ahead (its monotonic clock as it is), the service a real one answering 503.
    const sandbox = await startSandbox({ seed: true });
    writeFileSync(path.join(dataDir, 'config.json'), JSON.stringify({ logLevel: 'warn', settings: { backoffBaseMs: 2000, backoffMaxMs: 2000, idleMs: 50 } }));
    const env = { DENTAL_ELIG_BASE_URL: sandbox.url, DENTAL_ELIG_API_KEY: sandbox.apiKey, DENTAL_ELIG_WEBHOOK_SECRET: generateWebhookSecret() };
    const sent503 = () => sandbox.requestLog.filter((r) => r.status === 503).length;
    const clockAhead = { NODE_OPTIONS: `--max-semi-space-size=16 --require ${path.join(__dirname, '../support/clock-ahead.cjs')}`, CLOCK_AHEAD_MS: '3600000' };
    let serving: Serve | undefined;
    try {
      serving = await startServe(dataDir, { ...env, ...clockAhead });
      const sender = await client(serving.mllpPort);
      sender.socket.write(frame(bookingFor('R1', 'SBX-503')));
      expect((await sender.waitFor(1, 15_000))[0]).toContain('MSA|AA|');
      sender.socket.destroy();
      await until('the check sent and backing off', async () => sent503() > 0);
      serving.child.kill('SIGTERM');
      await serving.exited;
      const stored = SqliteJobStore.open(dataDir);
      const [backingOff] = await stored.listChecks();
      await stored.close();
      expect(Date.parse(backingOff?.dueAt ?? '')).toBeGreaterThan(Date.now() + 3_500_000);

      const before = sent503();
      serving = await startServe(dataDir, env);
      // Sent again once its 2 s are out, not in an hour.
      await until('the check sent again', async () => sent503() > before);
      const reopened = SqliteJobStore.open(dataDir);
      const [now] = await reopened.listChecks();
      await reopened.close();
      expect(Date.parse(now?.updatedAt ?? '')).toBeLessThanOrEqual(Date.now());
      expect(Date.parse(now?.dueAt ?? '')).toBeLessThan(Date.now() + 60_000);
    } finally {
      serving?.child.kill('SIGTERM');
      await serving?.exited;
      await sandbox.close();
    }
  }, 90_000);

  it('says nothing of a store changed a moment ago', async () => {
    await storedAt(new Date(Date.now() - 1000));
    h = await startHarness({ dataDir });
    expect(clockLines()).toEqual([]);
  });
});

/** A check the worker has in hand while the clock's step back dates it back: what it stores after keeps the dating. */
describe('a check in hand while it is dated back', () => {
  let rig: WorkerRig | undefined;
  let store: SqliteJobStore | undefined;
  afterEach(async () => {
    await rig?.close();
    await store?.close();
    rig = undefined;
    store = undefined;
  });

  it('sent again after the step keeps its round\'s first send dated back, not as the check in hand had it', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'elig-in-hand-'));
    const opened = SqliteJobStore.open(dir);
    store = opened;
    // The step back's dating comes between the claim and the send's step (the claim's batch committing as the watch saw the step).
    let dateBackNext = false;
    const transaction: SqliteJobStore['transaction'] = async (work) => {
      if (dateBackNext) {
        dateBackNext = false;
        await dateBackChecks(opened, () => new Date(), RIG_OPTIONS.policy);
      }
      return opened.transaction(work);
    };
    const stepped = new Proxy(opened, {
      get(target, prop) {
        if (prop === 'transaction') return transaction;
        const value: unknown = Reflect.get(target, prop, target);
        return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
      },
    }) as RigStore;
    const resolver = { resolve: () => ((dateBackNext = true), { status: 'resolved', name: 'Guardian', commonPayerId: '64246', supportsAsync: true, asyncPortals: ['portal-a'], syncPortals: ['portal-a'] }) } as unknown as PayerResolver;
    rig = await startWorkerRig({ store: stepped, resolver, answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-in-hand' }) });
    // Sent under a clock an hour ahead, its answer lost (a 503), due again now: the clock ahead still when it is claimed.
    const ahead = new Date(Date.now() + 3_600_000).toISOString();
    await rig.addCheck('in-hand', { state: 'received', attempts: 1, submittedAt: ahead, updatedAt: ahead, dueAt: new Date().toISOString() });
    rig.worker.start();
    const row = await rig.reach('in-hand', 'written', 5000);
    expect(Date.parse(row.submittedAt ?? '')).toBeLessThanOrEqual(Date.now());
    expect(answeredThisRound(row)).toBe(true);
  });
});
