import type { CoverageEligibilityResponse } from 'fhir/r4';
import { json } from '../support/http-server';
import { searchFhir } from './harness';
import { r4Errors } from '../../src/adapters/fhir/validate';
import { ChartWriteError } from '../../src/sync/chart-errors';
import { ingestWebhook } from '../../src/sync/ingest-webhook';
import { retryCheck } from '../../src/sync/operations';
import { toOutcome } from '../../src/verification/outcome';
import { posts, resultBody, startWorkerRig, type WorkerRig } from './worker-rig';

/**
 * A check the worker gives up on (the service failing until maxAttempts) is answered in the chart,
 * where the front desk works: an error CoverageEligibilityResponse saying its benefits could not be
 * verified and what to do, the check waiting for a person; a result that comes after all, by
 * `jobs retry` or a late webhook, is written after it.
 */
let rig: WorkerRig;
afterEach(async () => {
  await rig.close();
});

/** A problem that quotes what was sent: it stays out of the chart. */
const unavailable = { title: 'Unavailable for ELLEN RIVERA', status: 503 };
const completed = (correlationId: string) => ({ ...(resultBody('completed-minimal') as object), correlationId });

/** The chart's responses, oldest first. */
async function responses(): Promise<CoverageEligibilityResponse[]> {
  const found = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
  return found.sort((a, b) => Date.parse(a.created) - Date.parse(b.created));
}

const ADVICE = /could not be verified.*Verify the benefits on the payer's portal or by phone\. The operator sends the check again once the service answers/;

describe('a check the worker gives up on', () => {
  it('is answered in the chart: one error response, R4-valid, saying why in short and what to do', async () => {
    rig = await startWorkerRig({ worker: { maxAttempts: 3 }, answer: (_req, res) => json(res, 503, unavailable) });
    await rig.addCheck('unanswered');
    rig.worker.start();
    const row = await rig.reach('unanswered', 'needs-attention', 8000);
    expect(posts(rig.requests)).toHaveLength(3);
    expect(row.lastError).toMatch(/^NotVerified: Verify the benefits/);
    expect(row.written?.verification).toBe(`local-${row.externalId}`);

    const [response, ...more] = await responses();
    expect(more).toEqual([]);
    expect(r4Errors(response as CoverageEligibilityResponse)).toEqual([]);
    expect(response?.outcome).toBe('error');
    expect(response?.disposition).toMatch(/^Failed \(NotVerified\): Benefits could not be verified\. The verification service was unavailable or did not answer \(last: 503\), 3 attempts in all; given up \d{4}-\d\d-\d\d \d\d:\d\d UTC\./);
    expect(response?.disposition?.replace(/\n/g, ' ')).toMatch(ADVICE);
    expect(response?.error?.[0]?.code.coding?.map((c) => c.code)).toEqual(['42', 'NotVerified']);
    // Neither what the service wrote (it may quote the patient) nor where it is.
    expect(JSON.stringify(response)).not.toMatch(/ELLEN|127\.0\.0\.1|localhost/);

    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(rig.events.map((e) => [e.name, e.event.state, e.event.failureKind])).toEqual([
      ['failed', 'result-stored', 'NotVerified'],
      ['written', 'needs-attention', undefined],
      ['needs-attention', 'needs-attention', 'NotVerified'],
    ]);
  });

  it('is written after the earlier result when it was a re-verification: the error response is the chart\'s newest', async () => {
    rig = await startWorkerRig({ worker: { maxAttempts: 2 }, answer: (_req, res, index) => (index === 0 ? json(res, 200, completed('ver-first')) : json(res, 503, unavailable)) });
    await rig.addCheck('stale');
    rig.worker.start();
    await rig.reach('stale', 'written', 5000);
    // Its result gone stale before the visit: verified again now.
    await rig.store.transaction(async (tx) => {
      const row = await tx.getCheck('stale');
      if (row) await tx.putCheck({ ...row, dueAt: new Date().toISOString() });
    });
    rig.worker.kick();
    const row = await rig.reach('stale', 'needs-attention', 8000);
    expect(row.round).toBe(1);
    const chart = await responses();
    expect(chart.map((r) => r.outcome)).toEqual(['complete', 'error']);
    expect(chart[1]?.disposition?.replace(/\n/g, ' ')).toMatch(ADVICE);
  });

  it('is verified again by jobs retry, and a result then is written after the error response', async () => {
    let up = false;
    rig = await startWorkerRig({ worker: { maxAttempts: 2 }, answer: (_req, res) => (up ? json(res, 200, completed('ver-retried')) : json(res, 503, unavailable)) });
    await rig.addCheck('retried');
    rig.worker.start();
    await rig.reach('retried', 'needs-attention', 8000);
    up = true;
    await retryCheck(rig.store, 'retried', new Date());
    rig.worker.kick();
    const row = await rig.reach('retried', 'written', 5000);
    expect(row.correlationId).toBe('ver-retried');
    expect((await responses()).map((r) => r.outcome)).toEqual(['error', 'complete']);
  });

  it('takes a result whose webhook comes after the give-up, and writes it after the error response', async () => {
    // The sends reached the service, whose answers were lost: its result comes by webhook after all.
    rig = await startWorkerRig({ worker: { asyncEnabled: true, maxAttempts: 2 }, answer: (_req, res) => json(res, 503, unavailable) });
    await rig.addCheck('late');
    rig.worker.start();
    const given = await rig.reach('late', 'needs-attention', 8000);
    const body = { ...completed('ver-late'), externalId: given.externalId };
    const delivery = { webhookId: 'msg_late', rawBody: JSON.stringify(body), receivedAt: new Date(), outcome: toOutcome(body) };
    expect(await ingestWebhook(rig.store, rig.worker, delivery, new Date())).toMatchObject({ status: 'applied' });
    rig.worker.kick();
    const row = await rig.reach('late', 'written', 5000);
    expect(row.correlationId).toBe('ver-late');
    expect((await responses()).map((r) => r.outcome)).toEqual(['error', 'complete']);
    // Another round's webhook finds no check by the failure this one held.
    const stray = { ...body, correlationId: 'ver-stray', externalId: 'elig_00000000000000000000000000000000' };
    expect((await ingestWebhook(rig.store, rig.worker, { ...delivery, webhookId: 'msg_stray', rawBody: JSON.stringify(stray), outcome: toOutcome(stray) }, new Date())).status).toBe('ignored');
  });

  it('keeps its error response in the store while the chart is down, and writes it when the chart is back', async () => {
    let chartDown = true;
    rig = await startWorkerRig({
      worker: { maxAttempts: 2 },
      answer: (_req, res) => json(res, 503, unavailable),
      writer: (chart) => ({
        write: (...args) => (chartDown ? Promise.reject(new ChartWriteError('the FHIR server answered 503', { retryable: true })) : chart.write(...args)),
      }),
    });
    await rig.addCheck('chart-down');
    rig.worker.start();
    const waiting = await rig.reach('chart-down', 'result-stored', 8000);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect((await rig.check('chart-down')).state).toBe('result-stored');
    expect(waiting.correlationId).toBe(`local-${waiting.externalId}`);
    chartDown = false;
    await rig.reach('chart-down', 'needs-attention', 5000);
    expect((await responses()).map((r) => r.outcome)).toEqual(['error']);
    expect(posts(rig.requests)).toHaveLength(2);
  });

  it('is never another visit\'s fresh result: a visit of the same plan booked after it is verified for itself', async () => {
    let up = false;
    rig = await startWorkerRig({ worker: { maxAttempts: 2 }, answer: (_req, res) => (up ? json(res, 200, completed('ver-other')) : json(res, 503, unavailable)) });
    await rig.addCheck('first-visit', { coverageFingerprint: 'one-plan' });
    rig.worker.start();
    await rig.reach('first-visit', 'needs-attention', 8000);
    up = true;
    await rig.addCheck('second-visit', { coverageFingerprint: 'one-plan' });
    rig.worker.kick();
    const second = await rig.reach('second-visit', 'written', 5000);
    expect([second.correlationId, second.reusedFrom]).toEqual(['ver-other', undefined]);
    expect(posts(rig.requests)).toHaveLength(3);
  });
});
