import type { ClaimOptions, JobStore } from '../../src/sync/job-store';
import { keptOutages } from '../../src/sync/outage-record';
import { json } from '../support/http-server';
import { until } from './harness';
import { checkRow } from './job-store-contract';
import { resultBody, RIG_OPTIONS, startWorkerRig, type RigStore, type WorkerRig } from './worker-rig';

/**
 * Two instances on one store (`stores`: a PostgreSQL database's two pools; none: one SQLite file): the first gives a
 * check whose visit is today up for a 429 past throttledGiveUpMs, then one for the service unavailable, and stops for
 * good; the second, running since before (it read no throttling at its start), has a verification of its own taken
 * once the service lets sends through. The rig is the caller's to close (`started`).
 */
export async function throttledElsewhere(started: (rig: WorkerRig) => void, stores?: { first: RigStore; second: JobStore }): Promise<{
  throttled: { round: number; now: { state: string; round: number } };
  unavailable: { round: number; now: { state: string; round: number } };
}> {
  let throttling = true;
  const rig = await startWorkerRig({
    // The first instance's own tries a minute apart, as at the defaults: a try before it stopped (backoff.maxMs after the give-up, reached
    // on a slow machine) sent the check again itself, and the second finished that send, the check written before the record was forgotten.
    worker: { maxAttempts: 1, pendingGiveUpMs: 24 * 3_600_000, throttledGiveUpMs: 1000, backoff: { ...RIG_OPTIONS.backoff, maxMs: 60_000 } },
    ...(stores && { store: stores.first }),
    answer: (req, res, index) => {
      if (req.method === 'GET') return json(res, 200, { items: [] });
      if (req.body.includes('ext-unavailable')) return json(res, 503, { title: 'Service Unavailable', status: 503 });
      if (throttling) return json(res, 429, { title: 'Too many requests', status: 429 });
      json(res, 201, { ...(resultBody('completed-minimal') as object), correlationId: `ver-${index}` });
    },
  });
  started(rig);
  // The second instance claims nothing until the first has stopped: the first is the one that gives the checks up.
  let claiming = false;
  const second = stores?.second ?? rig.store;
  const claimsHeld = new Proxy(second, {
    get: (store, name: keyof JobStore) => {
      if (name === 'claimDue') return (options: ClaimOptions) => (claiming ? store.claimDue(options) : Promise.resolve([]));
      const value = store[name];
      return typeof value === 'function' ? value.bind(store) : value;
    },
  });
  const other = rig.another(claimsHeld);
  other.start();
  const today = { ...checkRow('x').check, dateOfService: new Date().toISOString().slice(0, 10) };
  await rig.addCheck('throttled', { check: { ...today, idempotencyKey: 'throttled' } });
  rig.worker.start();
  const throttled = await rig.reach('throttled', 'needs-attention', 8000);
  await rig.addCheck('unavailable', { externalId: 'ext-unavailable', check: { ...today, idempotencyKey: 'unavailable' } });
  const unavailable = await rig.reach('unavailable', 'needs-attention', 8000);
  // The give-up is kept after the check is: waited for, or the first instance could stop before it is there to be taken up.
  await until('the give-up kept', async () => (await keptOutages(rig.store)).throttled);
  await rig.worker.stop();
  throttling = false;
  claiming = true;
  await rig.addCheck('booked-later', { check: { ...today, idempotencyKey: 'booked-later' } });
  await rig.reach('booked-later', 'written', 8000);
  const now = await rig.reach('throttled', 'written', 8000);
  return { throttled: { round: throttled.round, now }, unavailable: { round: unavailable.round, now: await rig.check('unavailable') } };
}
