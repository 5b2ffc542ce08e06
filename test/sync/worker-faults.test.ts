import { json } from '../support/http-server';
import { until } from './harness';
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
    const written = await until('the slow check written', async () => {
      const row = await rig.check('slow');
      return row.state === 'written' && row;
    }, 10_000);
    expect(written.state).toBe('written');
    expect(posts(rig.requests).map((r) => r.url)).toEqual(['/v2/insurance-verifications']);
  });
});
