import type { ServerResponse } from 'node:http';
import { LoopHeadroom } from '../../src/sync/loop-headroom';
import { json } from '../support/http-server';
import { sleep } from '../support/bookings';
import { until } from './harness';
import { resultBody, startWorkerRig, type WorkerRig } from './worker-rig';

describe('LoopHeadroom', () => {
  it("reads this process's loop kept busy as busy", () => {
    const headroom = new LoopHeadroom(100);
    const spinUntil = Date.now() + 150;
    while (Date.now() < spinUntil);
    expect(headroom.busy()).toBeGreaterThan(0.8);
  });

  it('reads the share of each window of at least windowMs spent busy, and keeps the last full window within a shorter one', () => {
    // Running totals of the loop's time, in ms, as performance.eventLoopUtilization gives them.
    let totals = { idle: 0, active: 0, utilization: 0 };
    const advance = (idle: number, active: number) => (totals = { idle: totals.idle + idle, active: totals.active + active, utilization: 0 });
    const headroom = new LoopHeadroom(100, () => totals);
    advance(10, 140);
    expect(headroom.busy()).toBeCloseTo(140 / 150);
    advance(40, 0);
    expect(headroom.busy()).toBeCloseTo(140 / 150);
    advance(110, 10);
    expect(headroom.busy()).toBeCloseTo(10 / 160);
    advance(0, 100);
    expect(headroom.busy()).toBe(1);
  });
});

describe('the worker when the event loop is busy', () => {
  let rig: WorkerRig;
  afterEach(async () => rig.close());

  /** A rig with `checks` due, whose service holds each verification 200 ms, recording how many are in flight as each arrives. */
  async function heldRig(checks: number, loopBusy: () => number, arriving?: () => number): Promise<number[]> {
    let inFlight = 0;
    const peaks: number[] = [];
    rig = await startWorkerRig({
      worker: { concurrency: 16, loopBusyLimit: 0.85 },
      loopBusy,
      ...(arriving && { arriving }),
      answer: async (_req, res: ServerResponse, index) => {
        peaks.push(++inFlight);
        await sleep(200);
        inFlight--;
        json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: `ver-busy-${index}` });
      },
    });
    for (let i = 0; i < checks; i++) await rig.addCheck(`busy-${i}`);
    return peaks;
  }

  it('keeps only an eighth of its concurrency in hand while the loop is past loopBusyLimit, and all of it once there is room', async () => {
    let busy = 0.95;
    const peaks = await heldRig(40, () => busy);
    rig.worker.start();
    await sleep(1000);
    const whileBusy = peaks.splice(0);
    expect(whileBusy.length).toBeGreaterThan(0);
    expect(Math.max(...whileBusy)).toBeLessThanOrEqual(2);

    busy = 0.2;
    // Waited for, not timed: on a loaded machine the checks after the first eighth take longer to come.
    await until('more than an eighth in hand once there is room', async () => peaks.some((n) => n > 8));
    expect(Math.max(...peaks)).toBeGreaterThan(8);
  }, 30_000);

  it('holds back for a busy loop only while something that arrived is being handled', async () => {
    let arriving = 0;
    // More checks than the worker can finish before the end: each phase has some to take.
    const peaks = await heldRig(120, () => 0.95, () => arriving);
    rig.worker.start();
    await sleep(400);
    // Nothing waits to be answered: a busy loop is the batch's own work, and all of concurrency is used.
    expect(Math.max(...peaks.splice(0))).toBeGreaterThan(8);

    arriving = 1;
    // The checks taken before are answered within 200 ms; what is taken after keeps to the floor.
    await sleep(300);
    peaks.splice(0);
    // Waited for, not timed: on a loaded machine the two in hand take longer than 500 ms to be sent, answered and written.
    await until('a few checks sent while something arrives', async () => peaks.length >= 4);
    expect(Math.max(...peaks)).toBeLessThanOrEqual(2);
  });
});
