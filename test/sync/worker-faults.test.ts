import { json } from '../support/http-server';
import { posts, resultBody, sleep, startWorkerRig, type WorkerRig } from './worker-rig';

/**
 * Faults of the service as the worker meets them, each on the real parts (a SQLite file, HTTP to a
 * scripted service, the chart on a FHIR server): whatever the service does, a check is sent once
 * per attempt, never in a tight loop, and ends somewhere a person can see it.
 */
describe('the worker when the service misbehaves', () => {
  let rig: WorkerRig;
  afterEach(async () => {
    await rig.close();
  });

  it('keeps its lease while a verification takes longer than leaseMs: one POST, not one per lease', async () => {
    rig = await startWorkerRig({
      worker: { leaseMs: 1000 },
      service: { timeoutMs: 10_000 },
      answer: async (req, res) => {
        await sleep(2500);
        json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: `ver-${req.url.length}` });
      },
    });
    await rig.addCheck('slow');
    rig.worker.start();
    const written = await rig.reach('slow', 'written', 10_000);
    expect(written.state).toBe('written');
    expect(posts(rig.requests).map((r) => r.url)).toEqual(['/v2/insurance-verifications']);
  });
});

describe('the worker when a step fails for a reason of its own', () => {
  let rig: WorkerRig;
  afterEach(async () => {
    await rig.close();
  });

  it('answers a check whose request cannot be built (a catalog payer with no name) in the chart, naming the field, without a loop', async () => {
    rig = await startWorkerRig({ payerName: '', answer: (_req, res) => json(res, 500, { title: 'not to be called' }) });
    await rig.addCheck('nameless');
    rig.worker.start();
    const done = await rig.reach('nameless', 'needs-attention', 5000);
    expect(JSON.stringify(done.result)).toContain('payer.name');
    expect(done.written).toBeDefined();
    expect(rig.requests).toEqual([]);
    expect(rig.errors).toEqual([]);
  });

  it('backs off after an unexpected error and gives the check up after maxAttempts, instead of claiming it again at once', async () => {
    let calls = 0;
    const resolver = {
      resolve: () => {
        calls++;
        throw new Error('catalog index corrupted');
      },
    } as never;
    rig = await startWorkerRig({ resolver, worker: { maxAttempts: 3, backoff: { baseMs: 100, maxMs: 400 } }, answer: (_req, res) => json(res, 500, {}) });
    await rig.addCheck('buggy');
    rig.worker.start();
    const dead = await rig.reach('buggy', 'dead', 5000);
    await sleep(300);
    expect(calls).toBe(3);
    expect(dead.lastError).toBe('gave up after 3 attempts: catalog index corrupted');
    expect(rig.events.map((e) => [e.name, e.event.state])).toEqual([['failed', 'dead']]);
  });
});
