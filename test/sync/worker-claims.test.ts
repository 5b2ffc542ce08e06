import type { CheckRow } from '../../src/sync/job-store';
import { segment } from '../adapters/hl7/segment';
import { bookingFor, sleep } from '../support/bookings';
import { gate } from '../support/gate';
import { json } from '../support/http-server';
import { posts, resultBody, startWorkerRig, type WorkerRig } from './worker-rig';
import { startHarness, until, type Harness } from './harness';

/**
 * How the worker takes checks from the store: a synchronous answer goes to the chart under the
 * claim that sent it, an asynchronous one before the checks still to send, a check being written
 * gives its place for the service up, and a check stored while a claim is running is looked at as
 * soon as that claim is done, not one idle interval later.
 */
const booking = (n: number) =>
  [
    `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20261123090000||SIU^S12^SIU_S12|CLAIMS-${n}|P|2.5.1`,
    `SCH|APT-C${n}^SC||||||||||^^^20261210093000`,
    `PID|1||P-C${n}^^^SC^MR||DOE^JANE||19800102|F`,
    segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL', 36: `CLAIMS${n}` }),
  ].join('\r');

describe('the worker claiming checks', () => {
  let h: Harness;
  afterEach(async () => {
    jest.restoreAllMocks();
    await h.close();
  });

  it('writes a synchronous result under the claim that sent the check: one claim from received to written', async () => {
    h = await startHarness({ webhook: false });
    const claimed: CheckRow[][] = [];
    const claimDue = h.store.claimDue.bind(h.store);
    jest.spyOn(h.store, 'claimDue').mockImplementation(async (options) => {
      const rows = await claimDue(options);
      claimed.push(rows);
      return rows;
    });
    await h.sync.receiveHl7(booking(1));
    const written = await until('the check written', async () => (await h.store.listChecks({ states: ['written'] }))[0]);
    expect(claimed.flat().map((row) => [row.key, row.state])).toEqual([[written.key, 'received']]);
  });

  it('writes an asynchronous result that came before the checks still to send, booked before it came', async () => {
    // One place, and each send held 100 ms at the service: a result's webhook comes while the next check is being sent.
    h = await startHarness({ sandbox: { timing: { asyncCompletionMs: 0, latencyMs: 100, latencyJitterMs: 0 } }, settings: { concurrency: 1 } });
    const claimed: Array<[string, string]> = [];
    const claimDue = h.store.claimDue.bind(h.store);
    jest.spyOn(h.store, 'claimDue').mockImplementation(async (options) => {
      const rows = await claimDue(options);
      claimed.push(...rows.map((row): [string, string] => [row.key, row.state]));
      return rows;
    });
    for (let i = 0; i < 5; i++) await h.sync.receiveHl7(bookingFor(`ORDER-${i}`, `SBX-COMPLETE-ORDER-${i}`));
    await until('every check written', async () => (await h.store.listChecks({ states: ['written'] })).length === 5, 20_000);
    const states = claimed.map(([, state]) => state);
    // Each sent once, each written once.
    expect(states.filter((state) => state === 'received')).toHaveLength(5);
    expect(states.filter((state) => state === 'result-stored')).toHaveLength(5);
    // The first result went to the chart before the last check was sent (after it, taken by due time).
    expect(states.indexOf('result-stored')).toBeLessThan(states.lastIndexOf('received'));
  });

  it('looks again at once when a check is stored while it is claiming, instead of waiting idleMs', async () => {
    h = await startHarness({ webhook: false, settings: { idleMs: 60_000 } });
    const held = gate();
    const claiming = gate();
    const claimDue = h.store.claimDue.bind(h.store);
    let calls = 0;
    jest.spyOn(h.store, 'claimDue').mockImplementation(async (options) => {
      if (calls++ > 0) return claimDue(options);
      // A claim whose query ran just before the first booking committed: it answers nothing, late.
      claiming.open();
      await held.opened;
      return [];
    });
    await h.sync.receiveHl7(booking(2));
    await claiming.opened;
    // The second booking's kick comes while that claim is still out.
    await h.sync.receiveHl7(booking(3));
    // ... and the turn it asked for passes before the claim answers.
    await new Promise((resolve) => setTimeout(resolve, 50));
    held.open();
    const written = await until('both checks written well before the 60 s idle interval', async () => {
      const rows = await h.store.listChecks({ states: ['written'] });
      return rows.length === 2 && rows;
    }, 10_000);
    expect(written).toHaveLength(2);
  });
});

describe('the worker writing to the chart in places of its own', () => {
  let rig: WorkerRig;
  afterEach(async () => rig.close());

  /** Two places and one chart place, each send answered with a result of its own, each chart write held until `held` opens and counted. */
  async function slowChart(): Promise<{ held: ReturnType<typeof gate>; writes: () => number }> {
    const held = gate();
    let writes = 0;
    rig = await startWorkerRig({
      worker: { concurrency: 2, chartConcurrency: 1 },
      answer: (_req, res, index) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: `ver-${index}` }),
      writer: (chart) => ({
        ...chart,
        async write(...args) {
          writes++;
          await held.opened;
          return chart.write(...args);
        },
      }),
    });
    return { held, writes: () => writes };
  }

  it('sends the next check while one is written, and takes no more than both kinds of place hold', async () => {
    const held = gate();
    let writing = 0;
    let mostWriting = 0;
    rig = await startWorkerRig({
      worker: { concurrency: 1, chartConcurrency: 1 },
      answer: (_req, res, index) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: `ver-${index}` }),
      writer: (chart) => ({
        ...chart,
        async write(...args) {
          mostWriting = Math.max(mostWriting, ++writing);
          try {
            await held.opened;
            return await chart.write(...args);
          } finally {
            writing--;
          }
        },
      }),
    });
    for (const key of ['first', 'second', 'third']) await rig.addCheck(key);
    rig.worker.start();
    // The first check's write holds the one chart place; its place for the service is free, and the second is sent.
    await until('two checks sent while the first is written', async () => posts(rig.requests).length === 2);
    await sleep(200);
    // The second waits for the chart place, and the third for a place of either kind: in hand, 1 + 1.
    expect(posts(rig.requests)).toHaveLength(2);
    expect(rig.worker.busy).toBe(2);
    held.open();
    for (const key of ['first', 'second', 'third']) await rig.reach(key, 'written');
    expect(posts(rig.requests)).toHaveLength(3);
    expect(mostWriting).toBe(1);
  });

  it('ends a Coverage in a chart place, so a check is sent meanwhile', async () => {
    const held = gate();
    let ending = 0;
    rig = await startWorkerRig({
      worker: { concurrency: 1, chartConcurrency: 1 },
      answer: (_req, res, index) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: `ver-${index}` }),
      writer: (chart) => ({
        ...chart,
        async endCoverage(check, droppedAt) {
          ending++;
          await held.opened;
          return (await chart.endCoverage?.(check, droppedAt)) ?? false;
        },
      }),
    });
    const droppedAt = new Date(Date.now() - 60_000).toISOString();
    await rig.addCheck('dropped', { state: 'ending-coverage', dueAt: droppedAt, planDroppedAt: droppedAt });
    rig.worker.start();
    await until('the Coverage being ended', async () => ending === 1);
    await rig.addCheck('to-send');
    rig.worker.kick();
    try {
      // The chart's end of a Coverage holds a chart place, not the one place for the service: the send goes meanwhile.
      await until('the check sent while the Coverage is ended', async () => posts(rig.requests).length === 1, 5000);
    } finally {
      held.open();
    }
    await rig.reach('to-send', 'written');
    await rig.reach('dropped', 'cancelled');
  });

  it('takes results into the chart places free, not all its places, so checks are sent while results wait for the chart', async () => {
    const { held, writes } = await slowChart();
    const overdue = new Date(Date.now() - 60_000).toISOString();
    for (const key of ['result-1', 'result-2', 'result-3', 'result-4']) {
      await rig.addCheck(key, { state: 'result-stored', dueAt: overdue, result: { ...(resultBody('completed-minimal') as object), correlationId: `ver-${key}` } as CheckRow['result'] });
    }
    await rig.addCheck('to-send', { dueAt: new Date(Date.now() - 120_000).toISOString() });
    rig.worker.start();
    try {
      await until('the check sent while a result is written', async () => posts(rig.requests).length === 1, 5000);
      await until('its result waiting for the chart place', async () => writes() === 1 && rig.worker.busy === 2);
      await sleep(200);
      // One result in the one chart place, the sent check's result waiting for it; the other results wait in the store.
      expect(rig.worker.busy).toBe(2);
      expect((await rig.store.listChecks({ states: ['result-stored'] })).length).toBe(5);
    } finally {
      held.open();
    }
    for (const key of ['result-1', 'result-2', 'result-3', 'result-4', 'to-send']) await rig.reach(key, 'written');
    expect(posts(rig.requests)).toHaveLength(1);
  });

  it('writes a result stored while a slow chart has synchronous results waiting in turn with them, not after every send', async () => {
    // Each write waits until the test lets it go: the chart is slower than the service, and each place it frees is contended.
    const gates: Array<() => void> = [];
    let sentWhenWritten: number | undefined;
    rig = await startWorkerRig({
      worker: { concurrency: 2, chartConcurrency: 1 },
      answer: (_req, res, index) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: `ver-${index}` }),
      writer: (chart) => ({
        ...chart,
        async write(check, outcome, ...rest) {
          await new Promise<void>((resolve) => gates.push(resolve));
          if (outcome.verification.correlationId === 'ver-stored') sentWhenWritten = posts(rig.requests).length;
          return chart.write(check, outcome, ...rest);
        },
      }),
    });
    const sends = ['send-0', 'send-1', 'send-2', 'send-3', 'send-4', 'send-5'];
    for (const [i, key] of sends.entries()) await rig.addCheck(key, { dueAt: new Date(Date.now() - 120_000 + i * 1000).toISOString() });
    rig.worker.start();
    await until('one check written and two waiting for the chart place', async () => rig.worker.busy === 3 && gates.length === 1);
    // An asynchronous result stored meanwhile, its webhook come.
    const result = { ...(resultBody('completed-minimal') as object), correlationId: 'ver-stored' } as CheckRow['result'];
    await rig.addCheck('stored', { state: 'result-stored', dueAt: new Date(Date.now() - 60_000).toISOString(), result });
    for (let i = 0; i < sends.length + 1; i++) {
      await until('a write waiting for the chart', async () => gates.length > 0, 5000);
      (gates.shift() as () => void)();
    }
    for (const key of [...sends, 'stored']) await rig.reach(key, 'written');
    // On the previous worker each freed chart place went to the result of a check just sent, and this one was written after all six were sent.
    expect(sentWhenWritten).toBeLessThan(sends.length);
  });

  it('gives back at stop() the results waiting for a chart place, stored, rather than writing each behind a slow chart', async () => {
    const { held, writes } = await slowChart();
    const result = { ...(resultBody('completed-minimal') as object), correlationId: 'ver-stored' } as CheckRow['result'];
    await rig.addCheck('stored', { state: 'result-stored', dueAt: new Date(Date.now() - 120_000).toISOString(), result });
    await rig.addCheck('send-1', { dueAt: new Date(Date.now() - 60_000).toISOString() });
    await rig.addCheck('send-2', { dueAt: new Date(Date.now() - 60_000).toISOString() });
    rig.worker.start();
    await until('one result written and two waiting for the chart place', async () => writes() === 1 && posts(rig.requests).length === 2 && rig.worker.busy === 3);
    const stopped = rig.worker.stop();
    try {
      // The write under way finishes; the two waiting are let go at once, not after it.
      await until('the waiting results given back', async () => rig.worker.busy === 1, 5000);
    } finally {
      held.open();
    }
    await stopped;
    expect(writes()).toBe(1);
    expect((await rig.store.transaction((tx) => tx.getCheck('stored')))?.state).toBe('written');
    // Stored, their leases released: another worker takes them at once and writes them, sending nothing again.
    const next = await rig.store.claimDue({ now: new Date().toISOString(), limit: 10, owner: 'next', leaseMs: 60_000 });
    expect(next.map((c) => [c.key, c.state]).sort()).toEqual([
      ['send-1', 'result-stored'],
      ['send-2', 'result-stored'],
    ]);
  });

  it('sends nothing after stop(): what a claim under way at the stop took is given back, not begun', async () => {
    rig = await startWorkerRig({ worker: { concurrency: 1, chartConcurrency: 1 }, answer: (_req, res) => json(res, 200, resultBody('completed-minimal')) });
    await rig.addCheck('to-send');
    const held = gate();
    const claiming = gate();
    const claimDue = rig.store.claimDue.bind(rig.store);
    jest.spyOn(rig.store, 'claimDue').mockImplementation(async (options) => {
      const rows = await claimDue(options);
      claiming.open();
      await held.opened;
      return rows;
    });
    rig.worker.start();
    await claiming.opened;
    const stopped = rig.worker.stop();
    held.open();
    await stopped;
    expect(posts(rig.requests)).toHaveLength(0);
    expect((await rig.store.listChecks({ states: ['received'] })).map((c) => c.key)).toEqual(['to-send']);
    // Its lease given back: another worker takes it at once.
    expect((await claimDue({ now: new Date().toISOString(), limit: 10, owner: 'next', leaseMs: 60_000 })).map((c) => c.key)).toEqual(['to-send']);
  });
});
