import type { CoverageEligibilityResponse } from 'fhir/r4';
import { connect } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { generateWebhookSecret } from '../../src/sandbox';
import { retryCheck } from '../../src/sync/operations';
import type { StoreTx } from '../../src/sync/job-store';
import { forgetOutageStart, keptOutages } from '../../src/sync/outage-record';
import { WEBHOOK_PATH } from '../../src/verification/webhook';
import { booking, bookingFor } from '../support/bookings';
import { chartOf, searchFhir, startHarness, until, type Harness } from './harness';

/**
 * The webhook as an attacker, a flaky network and the service itself would exercise it, and the
 * service answering 503 for a while: nothing forged is applied, nothing is applied twice, nothing
 * is lost.
 */
describe('webhooks and service faults', () => {
  let h: Harness;
  afterEach(async () => h.close());

  const notify = (appointment: string) => fetch(`${h.httpUrl}/fhir-notifications/Appointment/${appointment}`, { method: 'POST' });
  /** What /healthz says of the service, and dental_elig_service_up. */
  const serviceSaid = async () => {
    const { service } = (await (await fetch(`${h.httpUrl}/healthz`)).json()) as { service: string };
    const up = /^dental_elig_service_up (\d)$/m.exec(await (await fetch(`${h.httpUrl}/metrics`)).text())?.[1];
    return [service, up] as const;
  };

  it('refuses forged and stale deliveries, applies a replay once, and keeps an unreadable one', async () => {
    h = await startHarness({ settings: { webhookDeadlineMs: 60_000 } });
    await h.fhir.seed(chartOf('primary-secondary'));
    // Hold the sandbox's own webhooks back: this test delivers by hand.
    h.sandbox.configureWebhook(undefined);
    await notify('appt-4004');
    const waiting = await until('a check awaiting its result', async () => (await h.store.listChecks({ states: ['awaiting-result'] }))[0]);
    const correlationId = waiting.correlationId as string;
    await h.sandbox.settle();
    const result = await (await fetch(`${h.sandbox.url}/v2/insurance-verifications/${correlationId}`, { headers: { authorization: `Bearer ${h.sandbox.apiKey}` } })).text();

    const secret = h.secret;
    const post = (body: string, headers: Record<string, string>) => fetch(`${h.httpUrl}${WEBHOOK_PATH}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
    const signed = (body: string, id: string, at = new Date()) => {
      const signature = new Webhook(secret).sign(id, at, body);
      return { 'webhook-id': id, 'webhook-timestamp': String(Math.floor(at.getTime() / 1000)), 'webhook-signature': signature };
    };

    const forged = new Webhook(generateWebhookSecret()).sign('msg_forged', new Date(), result);
    expect((await post(result, { ...signed(result, 'msg_forged'), 'webhook-signature': forged })).status).toBe(401);
    expect((await post(result, signed(result, 'msg_stale', new Date(Date.now() - 10 * 60_000)))).status).toBe(401);
    expect((await h.store.listChecks({ states: ['awaiting-result'] })).length).toBeGreaterThan(0);

    expect((await post(result, signed(result, 'msg_1'))).status).toBe(204);
    expect((await post(result, signed(result, 'msg_1'))).status).toBe(204);
    const applied = (await h.store.listMessages({ kind: 'webhook' })).filter((m) => m.dedupeKey === 'msg_1');
    expect(applied).toHaveLength(1);
    await until('the delivered check written', async () => (await h.store.listChecks({ states: ['written'] })).some((c) => c.correlationId === correlationId));

    // A result of a verification started in the service's own application: kept, not applied, and
    // answered 2xx, so the service does not deliver it again.
    const foreign = result.replace(correlationId, 'ver_started_in_the_app');
    expect((await post(foreign, signed(foreign, 'msg_foreign'))).status).toBe(204);
    const kept = (await h.store.listMessages({ kind: 'webhook' })).filter((m) => m.dedupeKey === 'msg_foreign');
    expect(kept.map((m) => [m.status, m.detail, m.raw])).toEqual([['handled', 'no check has this correlation id', foreign]]);

    const unreadable = '{"correlationId": 42, "status": []}';
    expect((await post(unreadable, signed(unreadable, 'msg_bad'))).status).toBe(422);
    const dead = await h.store.listMessages({ status: 'dead', kind: 'webhook' });
    expect(dead.map((m) => m.raw)).toEqual([unreadable]);
  });

  it('takes a sender hanging up mid-body, on the webhook or a notification, for its own fault: nothing kept, nothing said above info', async () => {
    h = await startHarness();
    const { hostname, port } = new URL(h.httpUrl);
    for (const target of [WEBHOOK_PATH, '/fhir-notifications']) {
      const socket = connect(Number(port), hostname);
      await new Promise((resolve) => socket.once('connect', resolve));
      socket.write(`POST ${target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"correlationId":`);
      // The listener has the headers and part of the body, then the connection is gone.
      await new Promise((resolve) => setTimeout(resolve, 100));
      socket.destroy();
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await h.store.listMessages({ status: 'dead' })).toEqual([]);
    expect(h.logs.map((line) => JSON.parse(line) as { level: number; msg: string }).filter((l) => l.level > 30)).toEqual([]);
    expect((await fetch(`${h.httpUrl}/healthz`)).status).toBe(200);
  });

  it('polls for a result whose webhook never comes', async () => {
    h = await startHarness({ settings: { webhookDeadlineMs: 500 } });
    await h.fhir.seed(chartOf('primary-secondary'));
    h.sandbox.configureWebhook(undefined);
    await notify('appt-4004');
    await until('both checks written by polling', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    expect(h.sandbox.requestLog.some((r) => r.method === 'GET' && r.path.startsWith('/v2/insurance-verifications/'))).toBe(true);
    // Webhooks that stopped coming are counted, for an alert, and said once, not for each result.
    expect(await (await fetch(`${h.httpUrl}/metrics`)).text()).toContain('dental_elig_webhooks_total{result="not-received"} 2');
    const warned = h.logs.map((line) => JSON.parse(line) as { level: number; msg: string }).filter((l) => l.level >= 40 && l.msg.startsWith('a result came by polling'));
    expect(warned).toHaveLength(1);
  });

  it('waits out a service answering 503 for a while and then verifies everything once', async () => {
    h = await startHarness({ settings: { maxAttempts: 20 } });
    await h.fhir.seed(chartOf('primary-secondary'));
    h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 503, times: 6, retryAfterSeconds: 0 });
    await notify('appt-4004');
    await until('both checks written after the outage', async () => (await h.store.listChecks({ states: ['written'] })).length === 2, 30_000);
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(2);
    expect(h.sandbox.requestLog.filter((r) => r.status === 503).length).toBeGreaterThanOrEqual(6);
  });

  it('says in /healthz and dental_elig_service_up that the service refuses the API key (401) until a call of it is answered', async () => {
    h = await startHarness();
    await h.fhir.seed(chartOf('primary-secondary'));
    h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 401, times: Infinity });
    await notify('appt-4004');
    const refused = await until('both checks left to a person', async () => {
      const rows = await h.store.listChecks({ states: ['needs-attention'] });
      return rows.length === 2 && rows;
    });
    const [service, up] = await serviceSaid();
    expect(service).toMatch(/^refusing the API key \(401\) since \d{4}-\d\d-\d\dT[^ ]+: checks wait for a person \(jobs retry once the key is replaced\)$/);
    expect(up).toBe('0');

    h.sandbox.clearFaults();
    for (const row of refused) await retryCheck(h.store, row.key, new Date());
    await until('both written once the key is taken', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    expect(await serviceSaid()).toEqual(['ok', '1']);
  });

  it('no longer says the API key refused once a call is refused for anything else, which the key passed to be, but a 408 a proxy answers first', async () => {
    h = await startHarness();
    await h.fhir.seed(chartOf('primary-secondary'));
    h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 401, times: 2 });
    await notify('appt-4004');
    const refused = await until('both checks left to a person', async () => {
      const rows = await h.store.listChecks({ states: ['needs-attention'] });
      return rows.length === 2 && rows;
    });
    expect((await serviceSaid())[1]).toBe('0');
    // A 408 (or 425, 429) may come from a proxy or gateway before the key is read: it says nothing of the key.
    // Every time, while the test reads: the worker sends it again after its backoff, and an answer then would take the key.
    h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 408, times: Infinity });
    const [first, second] = refused.map((row) => row.key);
    await retryCheck(h.store, first ?? '', new Date());
    await until('the 408 handled', async () => (await h.store.listChecks({})).find((row) => row.key === first)?.lastError?.startsWith('408'));
    expect(await serviceSaid()).toEqual([expect.stringMatching(/^refusing the API key \(401\)/), '0']);
    // The key replaced; a send again is refused for one clinic's registration (403): the key was read and taken.
    h.sandbox.clearFaults();
    h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 403, times: Infinity });
    await retryCheck(h.store, second ?? '', new Date());
    // Read again once the gauge says so: /healthz, read first, may tell of the moment before the answer that took the key.
    await until('the key taken again', async () => (await serviceSaid())[1] === '1');
    expect((await serviceSaid())[0]).not.toMatch(/refusing the API key/);
  });

  it('no longer says the API key refused once a refresh of the payer catalog, which uses it too, is answered', async () => {
    h = await startHarness({ settings: { catalogRefreshMs: 300 } });
    await h.fhir.seed(chartOf('primary-secondary'));
    h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 401, times: 2 });
    await notify('appt-4004');
    await until('both checks left to a person', async () => (await h.store.listChecks({ states: ['needs-attention'] })).length === 2);
    // Nothing else is sent: the key taken again is known from the catalog's refresh alone.
    // Read again once the gauge says so: /healthz, read first, may tell of the moment before the answer that took the key.
    await until('the key taken again', async () => (await serviceSaid())[1] === '1');
    expect((await serviceSaid())[0]).not.toMatch(/refusing the API key/);
  });

  it('says one payer portal out in /healthz, not the service, and verifies other payers\' bookings meanwhile', async () => {
    // Each 503 an attempt of the worker's (the client's own retries off), a second apart (the sandbox's Retry-After).
    h = await startHarness({ settings: { maxAttempts: 3, backoffBaseMs: 50, backoffMaxMs: 1000 }, service: { maxRetries: 0 } });
    // SBX-503: the service answers 503 to each, three patients of Cigna Dental's portal.
    for (const id of ['OUT1', 'OUT2', 'OUT3']) await h.sync.receiveHl7(bookingFor(id, 'SBX-503').replace('DOE^JANE', `DOE^${id}`));
    const said = await until('healthz saying the portal is out', async () => {
      const { service } = (await (await fetch(`${h.httpUrl}/healthz`)).json()) as { service: string };
      return /^not answering for payer portal \S+ since \d{4}-\d\d-\d\dT.*: its checks wait for it, the others go on$/.test(service) && service;
    });
    const metrics = await (await fetch(`${h.httpUrl}/metrics`)).text();
    expect(metrics).toMatch(/^dental_elig_service_up 1$/m);
    // An alert's measure of it: one portal out.
    expect(metrics).toMatch(/^dental_elig_payer_portals_out 1$/m);
    // Guardian and MetLife: verified while Cigna's portal is out, not held for it.
    await h.sync.receiveHl7(booking('PORTAL', 0));
    await h.sync.receiveHl7(booking('PORTAL', 3));
    const written = await until('the other payers\' checks written', async () => {
      const rows = await h.store.listChecks({ states: ['written'] });
      return rows.length === 2 && rows;
    });
    expect(written.map((row) => row.check.coverage.payer.name).sort()).toEqual(['Guardian', 'MetLife']);
    const held = await h.store.listChecks({ states: ['received', 'submitted'] });
    expect(held.map((row) => row.check.coverage.payer.name)).toEqual(['Cigna Dental', 'Cigna Dental', 'Cigna Dental']);
    expect(held.every((row) => row.attempts < 3)).toBe(true);
    // The same outage still: the other payers' answers did not end it.
    expect(((await (await fetch(`${h.httpUrl}/healthz`)).json()) as { service: string }).service).toBe(said);
  });

  it('says a payer portal back once another instance sharing the store found it answering, though no check of its own tries it', async () => {
    h = await startHarness({ settings: { maxAttempts: 3, backoffBaseMs: 50, backoffMaxMs: 1000 }, service: { maxRetries: 0 } });
    for (const id of ['ELS1', 'ELS2', 'ELS3']) await h.sync.receiveHl7(bookingFor(id, 'SBX-503').replace('DOE^JANE', `DOE^${id}`));
    const gauge = async () => /^dental_elig_payer_portals_out (\d+)$/m.exec(await (await fetch(`${h.httpUrl}/metrics`)).text())?.[1];
    await until('the portal out', async () => (await gauge()) === '1');
    // Kept in the store after the gauge says it: read before, there would be no portal to forget.
    const portal = await until('the portal\'s outage kept', async () => (await keptOutages(h.store)).portals[0]?.portal);
    // Its checks done by the other instance (left as it would leave them: nothing due), which found the portal answering
    // and forgot its outage in the store.
    const held = await h.store.listChecks({ states: ['received', 'submitted'] });
    expect(held).toHaveLength(3);
    await h.store.transaction(async (tx) => {
      for (const row of held) await tx.putCheck({ ...row, state: 'written', dueAt: undefined, updatedAt: new Date().toISOString() });
    });
    await forgetOutageStart(h.store, portal);
    await until('the portal back here too', async () => (await gauge()) === '0');
    expect(((await (await fetch(`${h.httpUrl}/healthz`)).json()) as { service: string }).service).not.toMatch(/not answering/);
  });

  it('keeps a payer portal out that this worker found while the store could not keep it: no other instance ended it', async () => {
    h = await startHarness({ settings: { maxAttempts: 3, backoffBaseMs: 50, backoffMaxMs: 1000 }, service: { maxRetries: 0 } });
    const { store } = h;
    // The disk full as the portal is found out (SQLite answers reads meanwhile): its start is not kept.
    const full = Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    let reads = 0;
    const transaction = store.transaction.bind(store);
    store.transaction = <T>(work: (tx: StoreTx) => Promise<T>) =>
      transaction((tx) =>
        work(
          new Proxy(tx, {
            get(target, key) {
              if (key === 'setMeta') return (name: string, value: string) => (name === 'service-out-since' ? Promise.reject(full) : target.setMeta(name, value));
              if (key === 'getMeta') return (name: string) => ((reads += name === 'service-out-since' ? 1 : 0), target.getMeta(name));
              const value = Reflect.get(target, key, target) as unknown;
              return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
            },
          }),
        ),
      );
    for (const id of ['KPT1', 'KPT2', 'KPT3']) await h.sync.receiveHl7(bookingFor(id, 'SBX-503').replace('DOE^JANE', `DOE^${id}`));
    const gauge = async () => /^dental_elig_payer_portals_out (\d+)$/m.exec(await (await fetch(`${h.httpUrl}/metrics`)).text())?.[1];
    await until('the portal out', async () => (await gauge()) === '1');
    // Read for portals found back elsewhere, two reads apart past the time the store is given to keep it: not in the store, as it never was.
    const before = reads;
    await until('the store read for portals found back', async () => reads >= before + 4);
    expect(h.logs.filter((line) => line.includes('as another instance found'))).toEqual([]);
    expect(await gauge()).toBe('1');
  });

  it('says in /healthz a payer portal out on its own while the whole service is out too', async () => {
    h = await startHarness({ settings: { maxAttempts: 3, backoffBaseMs: 50, backoffMaxMs: 1000 }, service: { maxRetries: 0 } });
    for (const id of ['OUT1', 'OUT2', 'OUT3']) await h.sync.receiveHl7(bookingFor(id, 'SBX-503').replace('DOE^JANE', `DOE^${id}`));
    const portal = await until('healthz saying the portal is out', async () => {
      const { service } = (await (await fetch(`${h.httpUrl}/healthz`)).json()) as { service: string };
      return /^not answering for (payer portal \S+ since \S+):/.exec(service)?.[1];
    });
    // Guardian's and MetLife's failures: two portals, the whole service.
    h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 503, times: Infinity, retryAfterSeconds: 0 });
    await h.sync.receiveHl7(booking('AWAY', 0));
    await h.sync.receiveHl7(booking('AWAY', 3));
    const service = await until('healthz saying the service is out', async () => {
      const { service } = (await (await fetch(`${h.httpUrl}/healthz`)).json()) as { service: string };
      return service.startsWith('not answering since') && service;
    });
    expect(service).toMatch(new RegExp(`^not answering since \\S+: checks wait for it, and for ${portal.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`));
    expect(await (await fetch(`${h.httpUrl}/metrics`)).text()).toMatch(/^dental_elig_service_up 0$/m);
  });

  it('waits out a service away for longer than the checks\' attempts last, healthz and metrics saying so meanwhile', async () => {
    // The client's own retries off, so that each 503 is an attempt of the worker's.
    h = await startHarness({ settings: { maxAttempts: 3, backoffBaseMs: 50, backoffMaxMs: 1000 }, service: { maxRetries: 0 } });
    await h.fhir.seed(chartOf('primary-secondary'));
    // Two checks of three attempts each: given up after six failures, were each counted.
    h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 503, times: 12 });
    await notify('appt-4004');
    const health = await until('healthz saying the service is out', async () => {
      const answer = await fetch(`${h.httpUrl}/healthz`);
      const body = (await answer.json()) as { service: string };
      return /^not answering since \d{4}-\d\d-\d\dT/.test(body.service) && answer.status;
    });
    // A restart would not help: checks wait for the service in the store.
    expect(health).toBe(200);
    expect(await (await fetch(`${h.httpUrl}/metrics`)).text()).toMatch(/^dental_elig_service_up 0$/m);
    await until('both checks written once the service answers', async () => (await h.store.listChecks({ states: ['written'] })).length === 2, 30_000);
    const responses = (await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(responses.map((r) => r.outcome)).toEqual(['complete', 'complete']);
    expect(h.sandbox.requestLog.filter((r) => r.status === 503)).toHaveLength(12);
    const metrics = await (await fetch(`${h.httpUrl}/metrics`)).text();
    expect(metrics).toMatch(/^dental_elig_service_up 1$/m);
    expect(metrics).not.toMatch(/outcome="failed"/);
    expect(metrics).toMatch(/^dental_elig_failures_total\{kind="NotVerified"\} 0$/m);
  });

  type LogLine = { level: number; msg: string; portalId?: string };
  const logLines = () => h.logs.map((line) => JSON.parse(line) as LogLine);
  const retried503 = (line: LogLine) => / answered 503; retry 1 of 1 in /.test(line.msg);
  /** The log lines after the first that `outage` takes, once three retries of calls trying it follow it. */
  const retriedAfter = (outage: (line: LogLine) => boolean) =>
    until('three calls retried after the outage was said', async () => {
      const all = logLines();
      const after = all.slice(all.findIndex(outage) + 1);
      return all.some(outage) && after.filter(retried503).length >= 3 && after;
    }, 30_000);

  it('says a service outage once: the retries of the calls trying it are at debug until it answers', async () => {
    // The client retrying each call once, as serve's four times: each retry a warning before the outage is said.
    h = await startHarness({ settings: { backoffBaseMs: 50, backoffMaxMs: 200 }, service: { maxRetries: 1 } });
    await h.fhir.seed(chartOf('primary-secondary'));
    h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 503, times: Infinity, retryAfterSeconds: 0 });
    await notify('appt-4004');
    const outage = (line: LogLine) => line.msg.startsWith('the verification service is not answering');
    // Three calls trying it since it was said, each retried: three warnings a minute or so with serve's settings, for as long as it lasts.
    const since = await retriedAfter(outage);
    expect(logLines().filter(outage)).toHaveLength(1);
    expect(since.filter(retried503).map((line) => line.level)).toEqual(since.filter(retried503).map(() => 20));
    h.sandbox.clearFaults();
    await until('both checks written once the service answers', async () => (await h.store.listChecks({ states: ['written'] })).length === 2, 30_000);
  });

  it('says one payer portal out once: the retries of its checks\' sends are at debug, naming the portal, until it answers', async () => {
    // The client retrying each call once, as serve's four times; the portal's sends tried one at a time, every 50 to 200 ms.
    h = await startHarness({ sandbox: { seed: true, timing: { retryAfterSeconds: 0 } }, settings: { backoffBaseMs: 50, backoffMaxMs: 200 }, service: { maxRetries: 1 } });
    // SBX-503: the service answers 503 to each (Retry-After 0, within the client's wait), three patients of Cigna Dental's portal.
    for (const id of ['PO1', 'PO2', 'PO3']) await h.sync.receiveHl7(bookingFor(id, 'SBX-503').replace('DOE^JANE', `DOE^${id}`));
    const outage = (line: LogLine) => line.msg.startsWith('the verification service is not answering for one payer portal');
    const since = await retriedAfter(outage);
    const portal = logLines().find(outage)?.portalId;
    expect(portal).toEqual(expect.any(String));
    // Four warnings a try, a try a minute, for as long as the portal stayed out, with serve's settings: at debug, its portal named.
    expect(since.filter(retried503).map((line) => [line.level, line.portalId])).toEqual(since.filter(retried503).map(() => [20, portal]));
    // Before it was said, the retries warned, as they do of any call: the outage is news.
    expect(logLines().slice(0, logLines().findIndex(outage)).filter(retried503).map((line) => line.level)).toContain(40);
  });

  it('says a service asking for fewer requests (429) at warn once in ten minutes: its client\'s retries and the worker\'s failures alike', async () => {
    h = await startHarness({ settings: { backoffBaseMs: 50, backoffMaxMs: 200 }, service: { maxRetries: 1 } });
    await h.fhir.seed(chartOf('primary-secondary'));
    h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 429, times: Infinity, retryAfterSeconds: 0 });
    await notify('appt-4004');
    const lines = () => h.logs.map((line) => JSON.parse(line) as { level: number; msg: string });
    const retried = (line: { msg: string }) => / answered 429; retry 1 of 1 in /.test(line.msg);
    const all = await until('both checks throttled again and again', async () => {
      const now = lines();
      return now.filter(retried).length >= 6 && now;
    }, 30_000);
    // The first said is the client's first retry, before any check's send failed.
    const warned = all.filter((line) => line.level >= 40).map((line) => line.msg);
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatch(/ answered 429; retry 1 of 1 in .*: the service asks for fewer requests, said once in ten minutes \(lower requestsPerSecond if it lasts\)$/);
    h.sandbox.clearFaults();
    await until('both checks written once it takes them', async () => (await h.store.listChecks({ states: ['written'] })).length === 2, 30_000);
  });

  it('says a service asking for fewer requests (429) when each retry is answered: no check fails, and it is said all the same', async () => {
    h = await startHarness({ service: { maxRetries: 1 } });
    await h.fhir.seed(chartOf('primary-secondary'));
    h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 429, times: 1, retryAfterSeconds: 0 });
    await notify('appt-4004');
    await until('both checks written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2, 30_000);
    expect(h.sandbox.requestLog.filter((r) => r.status === 429)).toHaveLength(1);
    const warned = h.logs.map((line) => JSON.parse(line) as { level: number; msg: string }).filter((line) => line.level >= 40);
    expect(warned.map((line) => line.msg)).toEqual([expect.stringMatching(/ answered 429; retry 1 of 1 in .*lower requestsPerSecond if it lasts\)$/)]);
  });

  it('gives up on a service answering 503 throughout, and says so in the chart for the front desk', async () => {
    h = await startHarness({ settings: { maxAttempts: 2 } });
    await h.fhir.seed(chartOf('primary-secondary'));
    h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 503, times: Infinity });
    await notify('appt-4004');
    await until('both checks given up', async () => (await h.store.listChecks({ states: ['needs-attention'] })).length === 2, 30_000);
    const responses = (await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(responses.map((r) => [r.outcome, r.error?.[0]?.code.coding?.at(-1)?.code])).toEqual([['error', 'NotVerified'], ['error', 'NotVerified']]);
    expect(responses[0]?.disposition).toContain("Verify the benefits on the payer's portal or by phone.");
    // Where operators look: the failures by kind.
    expect(await (await fetch(`${h.httpUrl}/metrics`)).text()).toContain('dental_elig_failures_total{kind="NotVerified"} 2');
  });

  it('ends a synchronous verification that timed out into Pending as Completed in the chart', async () => {
    h = await startHarness({
      sandbox: { timing: { slowMs: 1500 } },
      settings: { pollAfterMs: 300 },
      service: { timeoutMs: 400, maxRetries: 1 },
      webhook: false,
    });
    const slow = chartOf('self').map((r) => (r.resourceType === 'Coverage' ? { ...r, subscriberId: 'SBX-SLOW' } : r));
    await h.fhir.seed(slow);
    await notify('appt-1001');
    const row = await until('the slow check written', async () => (await h.store.listChecks({ states: ['written'] }))[0], 20_000);
    expect(row.mode).toBe('sync');
    const [response] = await searchFhir(h.fhir, 'CoverageEligibilityResponse');
    expect(response).toMatchObject({ outcome: 'complete' });
    // It was Pending on the way, and the Pending was never written.
    expect(h.sandbox.requestLog.some((r) => r.method === 'GET' && r.path.startsWith('/v2/insurance-verifications/'))).toBe(true);
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(1);
  });
});

describe('results that come back late or out of turn', () => {
  let h: Harness;
  afterEach(async () => h.close());

  const notify = (appointment: string) => fetch(`${h.httpUrl}/fhir-notifications/Appointment/${appointment}`, { method: 'POST' });

  it('writes a result whose webhook comes after the check was left to a person for staying pending too long', async () => {
    h = await startHarness({ sandbox: { timing: { asyncCompletionMs: 2500, webhookBackoffMs: 200 } }, settings: { webhookDeadlineMs: 100, pollAfterMs: 100, pendingGiveUpMs: 600 } });
    await h.fhir.seed(chartOf('primary-secondary'));
    await notify('appt-4004');
    await until('both checks left to a person, still pending', async () => {
      const rows = await h.store.listChecks({ states: ['needs-attention'] });
      return rows.length === 2 && rows.every((r) => r.lastError === 'still pending at the service; check it there') && rows;
    });
    await h.sandbox.settle();
    const written = await until('both checks written from their webhooks', async () => {
      const rows = await h.store.listChecks({ states: ['written'] });
      return rows.length === 2 && rows;
    }, 10_000);
    const responses = await searchFhir(h.fhir, 'CoverageEligibilityResponse');
    expect(responses.map((r) => (r as { outcome?: string }).outcome)).toEqual(['complete', 'complete']);
    // Their own round's verification, not a new one.
    expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.startsWith('/v2/insurance-verification'))).toHaveLength(2);
    expect(written.every((r) => r.round === 0)).toBe(true);
  });
});
