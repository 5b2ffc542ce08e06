import type { CoverageEligibilityResponse } from 'fhir/r4';
import { json } from '../support/http-server';
import { searchFhir, until } from './harness';
import { r4Errors } from '../../src/adapters/fhir/validate';
import { ChartWriteError } from '../../src/sync/chart-errors';
import { ingestWebhook } from '../../src/sync/ingest-webhook';
import { dismissed } from '../../src/sync/job-store';
import { dismissCheck, retryCheck } from '../../src/sync/operations';
import type { EligibilityWriter } from '../../src/sync/write-back';
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

/** The round's result, by webhook after all (its sends reached the service, whose answers were lost). */
function lateResult(externalId: string, webhookId = 'msg_late', correlationId = 'ver-late') {
  const body = { ...completed(correlationId), externalId };
  return ingestWebhook(rig.store, rig.worker, { webhookId, rawBody: JSON.stringify(body), receivedAt: new Date(), outcome: toOutcome(body) }, new Date());
}

/** A written check's result gone stale before its visit: verified again now. */
async function reverifyNow(key: string): Promise<void> {
  await rig.store.transaction(async (tx) => {
    const row = await tx.getCheck(key);
    if (row) await tx.putCheck({ ...row, dueAt: new Date().toISOString() });
  });
  rig.worker.kick();
}

/** The chart's writer, failing as a chart that is down while `down()` says so. */
const downWhile = (down: () => boolean) => (chart: EligibilityWriter): EligibilityWriter => ({
  write: (...args) => (down() ? Promise.reject(new ChartWriteError('the FHIR server answered 503', { retryable: true })) : chart.write(...args)),
});

const ADVICE = /could not be verified.*Verify the benefits on the payer's portal or by phone\. The check is sent again once the service answers/;

describe('a check the worker gives up on', () => {
  it('is answered in the chart: one error response, R4-valid, saying why in short and what to do', async () => {
    rig = await startWorkerRig({ worker: { maxAttempts: 3 }, answer: (_req, res) => json(res, 503, unavailable) });
    await rig.addCheck('unanswered');
    rig.worker.start();
    const row = await rig.reach('unanswered', 'needs-attention', 8000);
    expect(posts(rig.requests)).toHaveLength(3);
    // For the operator (jobs list): why and when; the front desk's advice is in the chart.
    expect(row.lastError).toMatch(/^NotVerified: The verification service was unavailable or did not answer \(last: 503\), 3 attempts in all; given up \d{4}-\d\d-\d\d \d\d:\d\d UTC\.$/);
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
    // Nor a time the verification completed at, which an EHR would show as when the benefits were verified.
    expect((response?.extension ?? []).map((e) => e.url.split('/').at(-1))).not.toContain('verification-completed');

    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(rig.events.map((e) => [e.name, e.event.state, e.event.failureKind])).toEqual([
      ['failed', 'result-stored', 'NotVerified'],
      ['written', 'needs-attention', undefined],
      ['needs-attention', 'needs-attention', 'NotVerified'],
    ]);
  });

  it('says when it was given up on the clinic\'s clock where the clinic\'s zone is known', async () => {
    rig = await startWorkerRig({
      worker: { maxAttempts: 1, policy: { freshnessMs: 7 * 86_400_000, reverifyLeadMs: 86_400_000, timeZoneOf: () => 'Pacific/Kiritimati' } },
      answer: (_req, res) => json(res, 503, unavailable),
    });
    await rig.addCheck('kiritimati');
    rig.worker.start();
    await rig.reach('kiritimati', 'needs-attention', 8000);
    const [response] = await responses();
    // UTC+14: the clinic's date and hour, not UTC's.
    const there = new Date(Date.now() + 14 * 3_600_000).toISOString().slice(0, 13).replace('T', ' ');
    expect(response?.disposition).toMatch(new RegExp(`1 attempt in all; given up ${there}:\\d\\d UTC\\+14:00 \\(Pacific/Kiritimati\\)\\.`));
  });

  it('is written after the earlier result when it was a re-verification: the error response is the chart\'s newest', async () => {
    rig = await startWorkerRig({ worker: { maxAttempts: 2 }, answer: (_req, res, index) => (index === 0 ? json(res, 200, completed('ver-first')) : json(res, 503, unavailable)) });
    await rig.addCheck('stale');
    rig.worker.start();
    await rig.reach('stale', 'written', 5000);
    await reverifyNow('stale');
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
    rig = await startWorkerRig({ worker: { asyncEnabled: true, maxAttempts: 2 }, answer: (_req, res) => json(res, 503, unavailable) });
    await rig.addCheck('late');
    rig.worker.start();
    const given = await rig.reach('late', 'needs-attention', 8000);
    expect(await lateResult(given.externalId)).toMatchObject({ status: 'applied' });
    rig.worker.kick();
    const row = await rig.reach('late', 'written', 5000);
    expect(row.correlationId).toBe('ver-late');
    expect((await responses()).map((r) => r.outcome)).toEqual(['error', 'complete']);
    // Another round's webhook finds no check by the failure this one held.
    expect((await lateResult('elig_00000000000000000000000000000000', 'msg_stray', 'ver-stray')).status).toBe('ignored');
  });

  it('takes its late result when a person has dismissed it, and then waits for no person', async () => {
    rig = await startWorkerRig({ worker: { asyncEnabled: true, maxAttempts: 2 }, answer: (_req, res) => json(res, 503, unavailable) });
    await rig.addCheck('dismissed');
    rig.worker.start();
    const given = await rig.reach('dismissed', 'needs-attention', 8000);
    await dismissCheck(rig.store, 'dismissed', new Date());
    expect((await rig.store.counts(new Date().toISOString())).forAPerson).toBe(0);
    expect(await lateResult(given.externalId)).toMatchObject({ status: 'applied' });
    rig.worker.kick();
    const row = await rig.reach('dismissed', 'written', 5000);
    expect(dismissed(row)).toBe(false);
    expect((await responses()).map((r) => r.outcome)).toEqual(['error', 'complete']);
  });

  it('keeps its error response in the store while the chart is down, and writes it when the chart is back', async () => {
    let chartDown = true;
    rig = await startWorkerRig({
      worker: { maxAttempts: 2 },
      answer: (_req, res) => json(res, 503, unavailable),
      writer: downWhile(() => chartDown),
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

  it('writes a result whose webhook comes while its error response waits for the chart in its place', async () => {
    let chartDown = true;
    rig = await startWorkerRig({
      worker: { asyncEnabled: true, maxAttempts: 2 },
      answer: (_req, res) => json(res, 503, unavailable),
      writer: downWhile(() => chartDown),
    });
    await rig.addCheck('late-to-a-down-chart');
    rig.worker.start();
    const waiting = await rig.reach('late-to-a-down-chart', 'result-stored', 8000);
    expect(await lateResult(waiting.externalId)).toMatchObject({ status: 'applied' });
    // The chart back only once a write made after the webhook failed: one of the error response under way when it came,
    // reaching the chart back, would write it first and the result after it, as the next test has it.
    await until('a write of the result failing', async () => {
      const row = await rig.check('late-to-a-down-chart');
      return row.correlationId === 'ver-late' && /^chart write failed/.test(row.lastError ?? '');
    });
    chartDown = false;
    const row = await rig.reach('late-to-a-down-chart', 'written', 5000);
    expect(row.correlationId).toBe('ver-late');
    expect((await responses()).map((r) => r.outcome)).toEqual(['complete']);
  });

  it('writes a result whose webhook comes while its error response is being written after it', async () => {
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    rig = await startWorkerRig({
      worker: { asyncEnabled: true, maxAttempts: 2, leaseMs: 10_000 },
      answer: (_req, res) => json(res, 503, unavailable),
      writer: (chart) => ({
        async write(check, outcome, refs, options) {
          const written = await chart.write(check, outcome, refs, options);
          // The error response is in the chart; its record waits until the webhook has come.
          if (outcome.kind === 'failed') await held;
          return written;
        },
      }),
    });
    await rig.addCheck('late-to-a-write');
    rig.worker.start();
    const waiting = await rig.reach('late-to-a-write', 'result-stored', 8000);
    await until('the error response in the chart', async () => (await responses()).length === 1);
    expect(await lateResult(waiting.externalId)).toMatchObject({ status: 'applied' });
    release();
    const row = await rig.reach('late-to-a-write', 'written', 5000);
    expect(row.correlationId).toBe('ver-late');
    expect((await responses()).map((r) => r.outcome)).toEqual(['error', 'complete']);
  });

  it('writes nothing for a re-verification given up after its plan was dropped: the Coverage is ended, the check withdrawn', async () => {
    let dropped = false;
    rig = await startWorkerRig({
      worker: { maxAttempts: 1 },
      answer: async (_req, res, index) => {
        if (index === 0) return json(res, 200, completed('ver-first'));
        // The PMS drops the plan while the re-verification is at the service (scheduleAppointment's withdrawal).
        await rig.store.transaction(async (tx) => {
          const row = await tx.getCheck('dropped');
          if (row) await tx.putCheck({ ...row, state: 'ending-coverage', dueAt: new Date().toISOString(), planDroppedAt: new Date().toISOString() });
        });
        dropped = true;
        json(res, 503, unavailable);
      },
    });
    await rig.addCheck('dropped');
    rig.worker.start();
    await rig.reach('dropped', 'written', 5000);
    await reverifyNow('dropped');
    await rig.reach('dropped', 'cancelled', 5000);
    expect(dropped).toBe(true);
    expect((await responses()).map((r) => r.outcome)).toEqual(['complete']);
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

describe('a check whose request the service refuses', () => {
  const errorCodes = (r: CoverageEligibilityResponse | undefined) => (r?.error ?? []).flatMap((e) => e.code.coding ?? []).map((c) => c.code);

  it("says to the operator which fields it refused, as the chart does, and tells the office's setup from the patient's data", async () => {
    // A group's office with no credentials stored on the payer's portal: its setup, not the patient's data.
    const refused = { title: 'Unprocessable', status: 422, errors: [{ field: 'portalId', message: 'no credentials are stored for this clinic and portal', code: 'credentials_not_stored' }] };
    rig = await startWorkerRig({ answer: (_req, res) => json(res, 422, refused) });
    await rig.addCheck('refused');
    rig.worker.start();
    const row = await rig.reach('refused', 'needs-attention');
    expect(row.lastError).toBe('SetupRefused: portalId: no credentials are stored for this clinic and portal');
    const [response] = await responses();
    expect(response?.disposition).toMatch(/portalId: no credentials are stored for this clinic and portal/);
    // The front desk is not sent to correct the practice-management system, where nothing is wrong.
    expect(response?.disposition).not.toMatch(/practice-management system/);
    expect(errorCodes(response)).toContain('SetupRefused');
  });

  it("keeps a refusal naming the patient's data, or the office's setup beside it, the front desk's to correct", async () => {
    const refused = {
      title: 'Unprocessable',
      status: 422,
      errors: [
        { field: 'portalId', message: 'no credentials are stored for this clinic and portal', code: 'credentials_not_stored' },
        { field: 'subscriber.memberId', message: "the subscriber's member id 'DD1234567' isn't one this payer issues", code: 'invalid_value' },
        { field: 'subscriber.lastName', message: "'O'Brien' doesn't match the payer's records", code: 'invalid_value' },
      ],
    };
    rig = await startWorkerRig({ answer: (_req, res) => json(res, 422, refused) });
    await rig.addCheck('refused');
    rig.worker.start();
    const row = await rig.reach('refused', 'needs-attention');
    // The value the service quotes is the patient's: jobs list shows the field and why, not the member id.
    // An apostrophe quotes nothing: the words around the value stay as written.
    // A name's own apostrophe is of the value: the name is left out whole.
    expect(row.lastError).toMatch(/^RequestRefused: portalId: .*; subscriber\.memberId: the subscriber's member id '…' isn't one this payer issues; subscriber\.lastName: '…' doesn't match the payer's records$/);
    const [response] = await responses();
    expect(response?.disposition).toMatch(/practice-management system/);
    // The chart, which holds the patient's data, says it whole: the front desk reads which value to correct.
    expect(response?.disposition).toContain("member id 'DD1234567' isn't one");
    expect(errorCodes(response)).toContain('RequestRefused');
  });

  it('reads a 400 naming the fields in errors[] as the refusal a 422 is: answered in the chart, not left to the operator with nothing written', async () => {
    const refused = { title: 'Bad request', status: 400, errors: [{ field: 'subscriber.memberId', message: 'is not a member id this payer issues', code: 'invalid_value' }] };
    rig = await startWorkerRig({ answer: (_req, res) => json(res, 400, refused) });
    await rig.addCheck('refused-400');
    rig.worker.start();
    const row = await rig.reach('refused-400', 'needs-attention');
    expect(row.lastError).toBe('RequestRefused: subscriber.memberId: is not a member id this payer issues');
    const [response] = await responses();
    expect(response?.disposition).toMatch(/subscriber\.memberId: is not a member id this payer issues/);
    expect(errorCodes(response)).toContain('RequestRefused');
    expect(posts(rig.requests)).toHaveLength(1);
  });
});
