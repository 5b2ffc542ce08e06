import type { ServerResponse } from 'node:http';
import { LoopHeadroom } from '../../src/sync/loop-headroom';
import { json } from '../support/http-server';
import { sleep } from '../support/bookings';
import { resultBody, startWorkerRig, type WorkerRig } from './worker-rig';

describe('LoopHeadroom', () => {
  it('reads a loop kept busy as busy, and an idle one as idle, over windows of windowMs', async () => {
    const headroom = new LoopHeadroom(100);
    const spinUntil = Date.now() + 150;
    while (Date.now() < spinUntil);
    expect(headroom.busy()).toBeGreaterThan(0.8);
    // Within the window nothing new is read: the last full window stands.
    expect(headroom.busy()).toBeGreaterThan(0.8);
    await sleep(150);
    expect(headroom.busy()).toBeLessThan(0.5);
  });
});

describe('the worker when the event loop is busy', () => {
  let rig: WorkerRig;
  afterEach(async () => rig.close());

  it('keeps only an eighth of its concurrency in hand while the loop is past loopBusyLimit, and all of it once there is room', async () => {
    let busy = 0.95;
    let inFlight = 0;
    const peaks: number[] = [];
    rig = await startWorkerRig({
      worker: { concurrency: 16, loopBusyLimit: 0.85 },
      loopBusy: () => busy,
      answer: async (_req, res: ServerResponse, index) => {
        peaks.push(++inFlight);
        await sleep(200);
        inFlight--;
        json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: `ver-busy-${index}` });
      },
    });
    for (let i = 0; i < 40; i++) await rig.addCheck(`busy-${i}`);
    rig.worker.start();
    await sleep(1000);
    const whileBusy = peaks.splice(0);
    expect(whileBusy.length).toBeGreaterThan(0);
    expect(Math.max(...whileBusy)).toBeLessThanOrEqual(2);

    busy = 0.2;
    await sleep(600);
    expect(Math.max(...peaks)).toBeGreaterThan(8);
  });
});
