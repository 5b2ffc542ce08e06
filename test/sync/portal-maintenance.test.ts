import type { CoverageEligibilityResponse } from 'fhir/r4';
import type { ServerResponse } from 'node:http';
import { json } from '../support/http-server';
import type { RecordedRequest } from '../support/http-server';
import { searchFhir, startHarness, until, type Harness } from './harness';
import { booking, bookingFor } from '../support/bookings';
import { checkRow } from './job-store-contract';
import { resultBody, startWorkerRig, type WorkerRig } from './worker-rig';
import type { PayerResolver } from '../../src/domain';
import { ingestWebhook } from '../../src/sync/ingest-webhook';
import { keptOutages } from '../../src/sync/outage-record';
import type { Worker, WorkerOptions } from '../../src/sync/worker';
import { toOutcome } from '../../src/verification/outcome';

/**
 * A payer portal down for maintenance (a night, a weekend): the service answers each verification
 * of it Failed, SiteMaintenance. Those answers, by the send's answer, a poll or a webhook, are that
 * portal failing: once OUTAGE_AFTER of them find it out, its checks wait for it in the store,
 * using no attempts, one call at a time tries it, the other portals' checks go on, and once it
 * answers every check is verified and written once.
 */
describe('a payer portal down for maintenance', () => {
  let rig: WorkerRig;
  afterEach(async () => {
    await webhooks;
    await rig.close();
  });
  let webhooks: Promise<unknown> = Promise.resolve();

  const inDays = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
  const portalOf = (name: string | undefined) => (name === 'Maint Dental' ? 'portal-m' : 'portal-a');
  const resolver = {
    resolve: ({ name }: { name?: string }) => ({ status: 'resolved', name, commonPayerId: '64246', supportsAsync: true, asyncPortals: [portalOf(name)], syncPortals: [portalOf(name)] }),
  } as unknown as PayerResolver;
  const addOf = (key: string, name: string, days = 10) => {
    const { check } = checkRow(key);
    return rig.addCheck(key, { check: { ...check, dateOfService: inDays(days), coverage: { ...check.coverage, payer: { ...check.coverage.payer, name } } } });
  };
  const maintKeys = Array.from({ length: 10 }, (_, i) => `maint-${i}`);
  const maintenance = (n: number) => ({ ...(resultBody('failed-site-maintenance') as object), correlationId: `ver-m-${n}` });
  const completed = (n: number) => ({ ...(resultBody('completed-minimal') as object), correlationId: `ver-${n}` });
  const options: Partial<WorkerOptions> = { maxAttempts: 3, backoff: { baseMs: 50, maxMs: 400 } };
  /** The sends of the portal in maintenance so far. */
  const maintSends = () => rig.requests.filter((r) => r.method === 'POST' && r.body.includes('portal-m')).length;

  /** A rig whose service answers each synchronous send to portal-m SiteMaintenance while it is `down`, every other Completed. */
  async function syncRig() {
    const portal = { down: true };
    let n = 0;
    rig = await startWorkerRig({
      worker: options,
      resolver,
      answer: (req, res) => json(res, 200, portal.down && req.body.includes('portal-m') ? maintenance(++n) : completed(++n)),
    });
    return portal;
  }

  /** While the portal is out: no check of it given up, each held at some time, its attempts left; then it comes back and each is written once. */
  async function outThenBack(portal: { down: boolean }) {
    for (const key of maintKeys) await addOf(key, 'Maint Dental');
    rig.worker.start();
    await until('the portal found out', async () => rig.worker.service.portalOut('portal-m'), 8000);
    const atOutage = maintSends();
    for (let i = 0; i < 3; i++) await addOf(`other-${i}`, 'Guardian');
    rig.worker.kick();
    // Other portals' checks are written while it is out.
    for (let i = 0; i < 3; i++) await rig.reach(`other-${i}`, 'written', 8000);
    // Three attempts with backoff of 50 to 400 ms are used up within a second or two: three seconds more hold each check many times over.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const held = await Promise.all(maintKeys.map((key) => rig.check(key)));
    expect(held.map((row) => row.state).filter((state) => state !== 'received' && state !== 'submitted' && state !== 'awaiting-result')).toEqual([]);
    expect(held.every((row) => row.attempts < 3)).toBe(true);
    // One call at a time tries it, each 50, 100, 200, 400, 400... ms after the last (a minute at most at the defaults): not each check at its own backoff.
    expect(maintSends() - atOutage).toBeLessThanOrEqual(12);
    expect(rig.events.filter((e) => e.name === 'failed' || e.name === 'needs-attention')).toEqual([]);
    expect(rig.warnings.filter((w) => /not answering/.test(w.msg)).map((w) => w.fields)).toEqual([expect.objectContaining({ portalId: 'portal-m', failure: 'SiteMaintenance' })]);
    // Named on the check its own SiteMaintenance held: each held again since, or the one trying the portal on its way (its
    // poll, asynchronous), says the wait alone, so the one read at a moment may say none; waited for, it is the next try's.
    await until('a check held for the SiteMaintenance it met', async () => {
      const now = await Promise.all(maintKeys.map((key) => rig.check(key)));
      return now.some((row) => /^SiteMaintenance; the verification service has not answered for payer portal portal-m since .*; waiting for it, the wait using no attempt/.test(row.lastError ?? ''));
    });

    portal.down = false;
    for (const key of maintKeys) await rig.reach(key, 'written', 10_000);
    expect(rig.worker.service.anyOut).toBe(false);
    const written = rig.events.filter((e) => e.name === 'written').map((e) => e.event.key);
    expect(maintKeys.map((key) => written.filter((k) => k === key).length)).toEqual(maintKeys.map(() => 1));
    const chart = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse?_count=50')) as CoverageEligibilityResponse[];
    // One response each, complete: none saying the portal was down (retries used up).
    expect(chart.map((r) => r.outcome)).toEqual(Array.from({ length: maintKeys.length + 3 }, () => 'complete'));
    expect(rig.infos.filter((i) => /answers again for the payer portal/.test(i.msg))).toHaveLength(1);
  }

  it('holds its checks, answered SiteMaintenance each time, without using their attempts, and writes each once it is back', async () => {
    const portal = await syncRig();
    await outThenBack(portal);
  });

  /** The service's webhook, received by `worker`'s instance: each result a moment after its request was taken. */
  const deliver = (req: RecordedRequest, correlationId: string, down: boolean, worker = rig.worker) => {
    const { externalId } = JSON.parse(req.body) as { externalId: string };
    const body = { ...(down ? maintenance(0) : completed(0)), correlationId, externalId };
    const delivery = { webhookId: `msg-${correlationId}`, rawBody: JSON.stringify(body), receivedAt: new Date(), outcome: toOutcome(body) };
    const applied = new Promise((resolve) => setTimeout(resolve, 10)).then(() => ingestWebhook(rig.store, worker, delivery, new Date())).then(() => rig.worker.kick());
    webhooks = Promise.all([webhooks, applied]);
  };

  it('counts the SiteMaintenance results that come by webhook: a request taken (202) is not the portal answering', async () => {
    const portal = { down: true };
    let n = 0;
    rig = await startWorkerRig({
      worker: { ...options, asyncEnabled: true, webhookDeadlineMs: 60_000 },
      resolver,
      answer: (req, res: ServerResponse) => {
        if (req.method !== 'POST') return json(res, 404, { title: 'Not found', status: 404 });
        const correlationId = `ver-${++n}`;
        json(res, 202, { correlationId, status: 'Pending' });
        deliver(req, correlationId, portal.down && req.body.includes('portal-m'));
      },
    });
    await outThenBack(portal);
  });

  it('ends a portal\'s outage an instance found when another, taking the results by webhook, hears the portal answer: the first hears only requests taken (202)', async () => {
    const portal = { down: true };
    let n = 0;
    let other: Worker | undefined;
    rig = await startWorkerRig({
      worker: { ...options, asyncEnabled: true, webhookDeadlineMs: 60_000 },
      resolver,
      service: { maxRetries: 0 },
      answer: (req, res: ServerResponse) => {
        if (req.method !== 'POST') return json(res, 404, { title: 'Not found', status: 404 });
        if (portal.down && req.body.includes('portal-m')) return json(res, 503, { title: 'Service Unavailable', status: 503 });
        const correlationId = `ver-${++n}`;
        json(res, 202, { correlationId, status: 'Pending' });
        // The service's webhook URL is the other instance's (a balancer's choice, or the one configured).
        deliver(req, correlationId, false, other);
      },
    });
    other = rig.another();
    for (const key of maintKeys) await addOf(key, 'Maint Dental');
    rig.worker.start();
    await until('the portal found out', async () => rig.worker.service.portalOut('portal-m'), 8000);
    portal.down = false;
    for (const key of maintKeys) await rig.reach(key, 'written', 15_000);
    // Its tries' results all reached the other instance: the store's record of the outage, forgotten there, ends it here.
    await until('the portal found back where it was found out', async () => !rig.worker.service.portalOut('portal-m'), 5000);
    expect(await keptOutages(rig.store)).toEqual({ portals: [] });
  });

  it('ends no outage of the whole service by a webhook: a result the service delivers is its portal\'s answer, not the service answering a call', async () => {
    const api = { down: false };
    const taken: Array<{ req: RecordedRequest; correlationId: string }> = [];
    let n = 0;
    rig = await startWorkerRig({
      worker: { ...options, asyncEnabled: true, webhookDeadlineMs: 60_000 },
      resolver,
      service: { maxRetries: 0 },
      answer: (req, res: ServerResponse) => {
        if (api.down) return json(res, 503, { title: 'Service Unavailable', status: 503 });
        if (req.method !== 'POST') return json(res, 404, { title: 'Not found', status: 404 });
        const correlationId = `ver-${++n}`;
        taken.push({ req, correlationId });
        json(res, 202, { correlationId, status: 'Pending' });
      },
    });
    await addOf('early', 'Guardian');
    rig.worker.start();
    await rig.reach('early', 'awaiting-result');
    api.down = true;
    for (const [i, key] of maintKeys.entries()) await addOf(key, i % 2 === 0 ? 'Maint Dental' : 'Guardian');
    rig.worker.kick();
    const since = await until('the service found out', async () => rig.worker.service.since, 8000);
    // The result of a verification taken before it went: the service's webhooks go on while its API fails every call.
    const early = taken[0] as (typeof taken)[number];
    deliver(early.req, early.correlationId, false);
    await rig.reach('early', 'written', 8000);
    expect(rig.worker.service.since).toEqual(since);
    expect(rig.infos.filter((i) => /answers again/.test(i.msg))).toEqual([]);
    const held = await Promise.all(maintKeys.map((key) => rig.check(key)));
    expect(held.every((row) => row.attempts < 3 && row.state !== 'needs-attention')).toBe(true);
  });

  it('counts the SiteMaintenance results polled for, its webhook not come', async () => {
    const portal = { down: true };
    let n = 0;
    /** Each verification's result as it was decided when sent. */
    const results = new Map<string, object>();
    rig = await startWorkerRig({
      worker: { ...options, asyncEnabled: true, webhookDeadlineMs: 20 },
      resolver,
      answer: (req, res: ServerResponse) => {
        if (req.method === 'POST') {
          const correlationId = `ver-${++n}`;
          results.set(correlationId, { ...(portal.down && req.body.includes('portal-m') ? maintenance(0) : completed(0)), correlationId });
          return json(res, 202, { correlationId, status: 'Pending' });
        }
        const result = results.get(req.url.split('/').at(-1) ?? '');
        return result ? json(res, 200, result) : json(res, 404, { title: 'Not found', status: 404 });
      },
    });
    await outThenBack(portal);
  });

  it('ends no portal\'s outage by a result polled that was produced before it went: only a result produced since is the portal answering now', async () => {
    const portal = { down: true };
    let n = 0;
    const polled: Record<string, () => object> = {
      // The service gives no time of its own: the send's, an hour ago, is all this plugin knows of when it was produced.
      'ver-early': () => ({ ...completed(0), correlationId: 'ver-early' }),
      // Sent as long ago, but completed now, as its own time says.
      'ver-fresh': () => ({ ...completed(0), correlationId: 'ver-fresh', completedAt: new Date().toISOString() }),
    };
    rig = await startWorkerRig({
      worker: options,
      resolver,
      answer: (req, res) => {
        if (req.method === 'GET') return json(res, 200, polled[req.url.split('/').at(-1) ?? '']?.() ?? {});
        json(res, 200, portal.down && req.body.includes('portal-m') ? maintenance(++n) : completed(++n));
      },
    });
    const sentLongAgo = new Date(Date.now() - 3_600_000).toISOString();
    const early = (key: string, correlationId: string, submittedAt: string) => {
      const { check } = checkRow(key);
      const coverage = { ...check.coverage, payer: { ...check.coverage.payer, name: 'Maint Dental' } };
      // Sent before the portal went, its result not come by webhook: polled later.
      return rig.addCheck(key, { state: 'awaiting-result', mode: 'async', portalId: 'portal-m', correlationId, submittedAt, dueAt: new Date(Date.now() + 3_600_000).toISOString(), check: { ...check, dateOfService: inDays(10), coverage } });
    };
    await early('early', 'ver-early', sentLongAgo);
    await early('fresh', 'ver-fresh', sentLongAgo);
    for (const key of maintKeys) await addOf(key, 'Maint Dental');
    rig.worker.start();
    await until('the portal found out', async () => rig.worker.service.portalOut('portal-m'), 8000);
    const pollNow = async (key: string) => {
      await rig.store.transaction(async (tx) => {
        const row = await tx.getCheck(key);
        if (row) await tx.putCheck({ ...row, dueAt: new Date().toISOString() });
      });
      rig.worker.kick();
      return rig.reach(key, 'written', 8000);
    };
    await pollNow('early');
    expect(rig.worker.service.portalOut('portal-m')).toBe(true);
    expect(rig.infos.filter((i) => /answers again for the payer portal/.test(i.msg))).toEqual([]);
    // The portal still down for the others: a result produced since it went ends it all the same.
    await pollNow('fresh');
    await until('the portal found answering', async () => rig.infos.some((i) => /answers again for the payer portal/.test(i.msg)), 5000);
    portal.down = false;
    for (const key of maintKeys) await rig.reach(key, 'written', 10_000);
  });

  it('ends a portal\'s outage by the result polled for a check cancelled with its verification at the service, as by its webhook', async () => {
    const portal = { down: true };
    let n = 0;
    rig = await startWorkerRig({
      worker: options,
      resolver,
      answer: (req, res) => {
        // Completed now, as its own time says: the portal answering since it went.
        if (req.method === 'GET') return json(res, 200, { ...completed(0), correlationId: 'ver-moved', completedAt: new Date().toISOString() });
        json(res, 200, portal.down && req.body.includes('portal-m') ? maintenance(++n) : completed(++n));
      },
    });
    for (const key of maintKeys) await addOf(key, 'Maint Dental');
    rig.worker.start();
    await until('the portal found out', async () => rig.worker.service.portalOut('portal-m'), 8000);
    // Its visit moved while its verification was at the service: followed for its result, which the moved visit takes.
    const { check } = checkRow('moved');
    const at = new Date().toISOString();
    await rig.addCheck('moved', {
      state: 'cancelled',
      mode: 'async',
      portalId: 'portal-m',
      correlationId: 'ver-moved',
      submittedAt: at,
      dueAt: at,
      check: { ...check, dateOfService: inDays(10), coverage: { ...check.coverage, payer: { ...check.coverage.payer, name: 'Maint Dental' } } },
    });
    rig.worker.kick();
    await until('its result taken', async () => (await rig.check('moved')).result !== undefined);
    await until('the portal found answering', async () => rig.infos.some((i) => /answers again for the payer portal/.test(i.msg)), 5000);
    portal.down = false;
    for (const key of maintKeys) await rig.reach(key, 'written', 10_000);
  });

  it('does not hold a check whose visit is today: its retries used up, the chart says the portal is down, and it is sent again once the portal answers', async () => {
    const portal = await syncRig();
    for (let i = 0; i < 6; i++) await addOf(`later-${i}`, 'Maint Dental');
    await addOf('today', 'Maint Dental', 0);
    rig.worker.start();
    const today = await rig.reach('today', 'needs-attention', 8000);
    expect(today.lastError).toBe('SiteMaintenance: The payer portal is down for maintenance. (retries used up)');
    expect(rig.worker.service.portalOut('portal-m')).toBe(true);
    const later = await Promise.all(Array.from({ length: 6 }, (_, i) => rig.check(`later-${i}`)));
    expect(later.map((row) => row.state).filter((state) => state !== 'received' && state !== 'submitted')).toEqual([]);

    portal.down = false;
    const again = await rig.reach('today', 'written', 8000);
    expect(again.round).toBeGreaterThan(today.round);
    for (let i = 0; i < 6; i++) await rig.reach(`later-${i}`, 'written', 8000);
    const chart = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse?_count=50')) as CoverageEligibilityResponse[];
    const todays = chart.filter((r) => r.identifier?.some((i) => i.value === 'today')).sort((a, b) => Date.parse(a.created) - Date.parse(b.created));
    expect(todays.map((r) => r.outcome)).toEqual(['error', 'complete']);
    expect(rig.infos.filter((i) => /given up while the service was away are sent again/.test(i.msg)).map((i) => i.fields)).toEqual([{ checks: 1 }]);
  });
});

describe('a payer portal down for maintenance, through the sandbox and serve', () => {
  let h: Harness;
  afterEach(async () => h.close());

  const healthz = async () => ((await (await fetch(`${h.httpUrl}/healthz`)).json()) as { service: string }).service;
  /** The asynchronous verifications the sandbox was sent: in this test, until the other payers' bookings, all Cigna Dental's. */
  const asyncSends = () => h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path === '/v2/insurance-verification-requests').length;

  it('holds ten checks of Cigna\'s portal while it is down, tries it about once a backoffMaxMs, verifies other payers meanwhile, and writes each once it is back', async () => {
    h = await startHarness({ settings: { maxAttempts: 3, backoffBaseMs: 50, backoffMaxMs: 1000 }, service: { maxRetries: 0 } });
    h.sandbox.portalMaintenance('cignaforhcp', true);
    const ids = Array.from({ length: 10 }, (_, i) => `MNT${i}`);
    // Cigna Dental is verified asynchronously at the sandbox: each SiteMaintenance comes by its signed webhook.
    for (const id of ids) await h.sync.receiveHl7(bookingFor(id, `MEMBER${id}`).replace('DOE^JANE', `DOE^${id}`));
    await until('healthz saying the portal is out', async () => /^not answering for payer portal cignaforhcp since /.test(await healthz()), 10_000);
    expect(await (await fetch(`${h.httpUrl}/metrics`)).text()).toMatch(/^dental_elig_payer_portals_out 1$/m);
    const atOutage = asyncSends();
    // Three attempts with backoff of 50 ms to 1 s are used up within two seconds: five hold each check past them.
    await new Promise((resolve) => setTimeout(resolve, 5000));
    // One call at a time tries it, each 50, 100, ... 1,000 ms after the last: some six in five seconds (one a minute at the defaults).
    expect(asyncSends() - atOutage).toBeLessThanOrEqual(9);
    const held = await h.store.listChecks({ limit: 50 });
    expect(held.map((row) => row.state).filter((state) => !['received', 'submitted', 'awaiting-result'].includes(state))).toEqual([]);
    expect(held.every((row) => row.attempts < 3)).toBe(true);

    // Guardian and MetLife: verified while Cigna's portal is down.
    await h.sync.receiveHl7(booking('MNTOK', 0));
    await h.sync.receiveHl7(booking('MNTOK', 3));
    const others = await until('the other payers\' checks written', async () => {
      const rows = await h.store.listChecks({ states: ['written'] });
      return rows.length === 2 && rows;
    }, 10_000);
    expect(others.map((row) => row.check.coverage.payer.name).sort()).toEqual(['Guardian', 'MetLife']);
    expect(await healthz()).toMatch(/^not answering for payer portal cignaforhcp since /);

    h.sandbox.portalMaintenance('cignaforhcp', false);
    await until('every check written', async () => (await h.store.listChecks({ states: ['written'] })).length === 12, 15_000);
    expect(await h.store.listChecks({ states: ['needs-attention'] })).toEqual([]);
    const chart = (await searchFhir(h.fhir, 'CoverageEligibilityResponse?_count=50')) as CoverageEligibilityResponse[];
    // One response each, complete: none said the portal was down (retries used up).
    expect(chart.map((r) => r.outcome)).toEqual(chart.map(() => 'complete'));
    expect(chart).toHaveLength(12);
    await until('healthz saying the service answers', async () => !/not answering/.test(await healthz()));
  });
});
