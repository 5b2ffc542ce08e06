import type { ServerResponse } from 'node:http';
import { json } from '../support/http-server';
import { sleep } from '../support/bookings';
import type { Coverage, CoverageEligibilityResponse } from 'fhir/r4';
import { searchFhir, until } from './harness';
import { ChartWriteError } from '../../src/sync/chart-errors';
import { StoreUnavailableError, type StoreTx } from '../../src/sync/job-store';
import type { CoverageInfo, PayerResolver } from '../../src/domain';
import { endDroppedPlans, scheduleAppointment } from '../../src/sync/schedule';
import { ingestWebhook } from '../../src/sync/ingest-webhook';
import { toOutcome } from '../../src/verification/outcome';
import { storeRetryWaitMs } from '../../src/sync/worker';
import { retryAsRead, retryCheck } from '../../src/sync/operations';
import { forgetThrottled, keptOutages } from '../../src/sync/outage-record';
import { gets, posts, resultBody, RIG_OPTIONS, startWorkerRig, type WorkerRig } from './worker-rig';
import { checkRow } from './job-store-contract';
import { gate } from '../support/gate';
import { throttledElsewhere } from './throttled-elsewhere';

/**
 * Faults of the service as the worker meets them, each on the real parts (a SQLite file, HTTP to a
 * scripted service, the chart on a FHIR server): whatever the service does, a check is sent once
 * per attempt, never in a tight loop, and ends somewhere a person can see it.
 */
let rig: WorkerRig;
afterEach(async () => {
  await rig.close();
});

describe('the worker when the service misbehaves', () => {
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
    expect(posts(rig.requests)).toEqual(['/v2/insurance-verifications']);
  });
});

describe('the worker when the service answers with a verification it cannot read', () => {
  // A result that is no object: nothing of it can be read.
  const unreadable = { correlationId: 'ver-odd', status: 'Completed', result: ['call the payer'] };

  it('writes one with a figure it cannot read (words where a number goes), left out and kept in the response, as any other', async () => {
    const odd = { correlationId: 'ver-odd', status: 'Completed', result: { plan: { status: 'Active' }, data: { maximums: [{ amount: 'call the payer' }] } } };
    rig = await startWorkerRig({ answer: (_req, res) => json(res, 200, odd) });
    await rig.addCheck('odd-figure');
    rig.worker.start();
    const row = await rig.reach('odd-figure', 'written', 5000);
    expect(row.result).toEqual(odd);
    expect(posts(rig.requests)).toEqual(['/v2/insurance-verifications']);
  });

  it('keeps a synchronous answer it cannot read for a person, naming the element, and does not send it again', async () => {
    rig = await startWorkerRig({ worker: { maxAttempts: 3 }, answer: (_req, res) => json(res, 200, unreadable) });
    await rig.addCheck('odd');
    rig.worker.start();
    const row = await rig.reach('odd', 'needs-attention', 5000);
    await sleep(300);
    expect(posts(rig.requests)).toEqual(['/v2/insurance-verifications']);
    expect(row.result).toEqual(unreadable);
    expect(row.dueAt).toBeUndefined();
    expect(row.lastError).toMatch(/^Unexpected response body: result: /);
    expect(rig.events.map((e) => [e.name, e.event.state])).toEqual([['needs-attention', 'needs-attention']]);
  });

  it('keeps an asynchronous one it polled for a person too, rather than polling it until it has been pending too long', async () => {
    rig = await startWorkerRig({
      worker: { asyncEnabled: true, webhookDeadlineMs: 20, pendingGiveUpMs: 60_000 },
      answer: (req, res) => (req.method === 'POST' ? json(res, 202, { correlationId: 'ver-odd', status: 'Pending' }) : json(res, 200, unreadable)),
    });
    await rig.addCheck('odd-async');
    rig.worker.start();
    const row = await rig.reach('odd-async', 'needs-attention', 5000);
    await sleep(300);
    expect(gets(rig.requests)).toEqual(['/v2/insurance-verifications/ver-odd']);
    expect(row.result).toEqual(unreadable);
    expect(row.correlationId).toBe('ver-odd');
    expect(row.lastError).toMatch(/^Unexpected response body: result: /);
  });
});

describe('the worker when the service says to try again later', () => {
  it('writes a retry-later failure that outlasts maxAttempts to the chart and puts the check where a person sees it', async () => {
    rig = await startWorkerRig({
      worker: { maxAttempts: 3 },
      answer: (_req, res) => json(res, 200, { ...(resultBody('failed-site-maintenance') as object), correlationId: `ver-maint-${rig.requests.length}` }),
    });
    await rig.addCheck('maintenance');
    rig.worker.start();
    const row = await rig.reach('maintenance', 'needs-attention', 5000);
    expect(posts(rig.requests)).toHaveLength(3);
    expect(row.written).toBeDefined();
    expect(row.dueAt).toBeUndefined();
    expect(row.lastError).toBe('SiteMaintenance: The payer portal is down for maintenance. (retries used up)');
    expect(await rig.store.listChecks({ states: ['needs-attention'] })).toHaveLength(1);
    expect(rig.events.filter((e) => e.name === 'needs-attention').map((e) => e.event.failureKind)).toEqual(['SiteMaintenance']);
  });
});

describe('the worker when the service refuses a verification (403)', () => {
  it('leaves it to a person, saying at warn which clinic and portal it was for', async () => {
    rig = await startWorkerRig({ answer: (_req, res) => json(res, 403, { title: 'Forbidden', status: 403 }) });
    await rig.addCheck('forbidden');
    rig.worker.start();
    const row = await rig.reach('forbidden', 'needs-attention');
    expect(rig.warnings.filter((w) => w.msg === 'verification refused by the service; needs attention').map((w) => w.fields)).toEqual([
      { key: 'forbidden', status: 403, clinicId: row.check.clinicId, portalId: row.portalId },
    ]);
    expect(row.check.clinicId).toMatch(/\S/);
  });
});

describe('the worker when the service asks it to wait (Retry-After)', () => {
  const throttle = (res: ServerResponse) => json(res, 429, { title: 'Too many requests', status: 429 }, { 'retry-after': '1' });

  it('waits as long as Retry-After says, and a throttled send does not use up an attempt', async () => {
    const sentAt: number[] = [];
    rig = await startWorkerRig({
      worker: { maxAttempts: 1, backoff: { baseMs: 20, maxMs: 50 } },
      answer: (_req, res, index) => {
        sentAt.push(Date.now());
        if (index < 2) return throttle(res);
        json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-after-wait' });
      },
    });
    await rig.addCheck('throttled');
    rig.worker.start();
    const row = await rig.reach('throttled', 'written', 8000);
    expect(row.correlationId).toBe('ver-after-wait');
    expect(sentAt).toHaveLength(3);
    expect((sentAt[1] ?? 0) - (sentAt[0] ?? 0)).toBeGreaterThanOrEqual(950);
    expect((sentAt[2] ?? 0) - (sentAt[1] ?? 0)).toBeGreaterThanOrEqual(950);
  });

  // Retry-After as the spec allows it, an hour: delta-seconds, or an HTTP-date (whole seconds).
  const retryAfterForms: Array<[string, () => { header: string; notBefore: (answeredAt: number) => number }]> = [
    ['delta-seconds', () => ({ header: '3600', notBefore: (answeredAt) => answeredAt + 3_600_000 })],
    ['an HTTP-date', () => {
      const header = new Date(Date.now() + 3_600_000).toUTCString();
      return { header, notBefore: () => Date.parse(header) };
    }],
  ];
  describe.each([429, 503])('a %i', (status) => {
    it.each(retryAfterForms)('with a Retry-After in %s longer than the backoff puts the next send off past it: another check sent meanwhile, this one not', async (_form, form) => {
      const { header, notBefore } = form();
      let answeredAt = 0;
      const sendsOf = (key: string) => rig.requests.filter((r) => r.method === 'POST' && r.body.includes(`"ext-${key}"`)).length;
      rig = await startWorkerRig({
        worker: { maxAttempts: 3, pendingGiveUpMs: 24 * 3_600_000 },
        answer: (_req, res) => {
          if (sendsOf('put-off') === 1 && answeredAt === 0) {
            answeredAt = Date.now();
            return json(res, status, { title: 'Slow down', status }, { 'retry-after': header });
          }
          json(res, 201, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-meanwhile' });
        },
      });
      await rig.addCheck('put-off');
      rig.worker.start();
      const waiting = await until('put off', async () => {
        const row = await rig.check('put-off');
        return row.state === 'received' && row.lastError !== undefined && row;
      });
      expect(Date.parse(waiting.dueAt ?? '')).toBeGreaterThanOrEqual(notBefore(answeredAt));
      // Longer than its backoff (backoffMaxMs 400) has passed: a check due is claimed with the one added now, or before it.
      await sleep(1000);
      await rig.addCheck('meanwhile');
      await rig.reach('meanwhile', 'written');
      expect([sendsOf('put-off'), sendsOf('meanwhile')]).toEqual([1, 1]);
      expect(await rig.check('put-off')).toMatchObject({ state: 'received', dueAt: waiting.dueAt });
    });
  });

  it('polls the verification of a check cancelled while at the service no sooner than Retry-After says, as an awaited one', async () => {
    const polledAt: number[] = [];
    rig = await startWorkerRig({
      answer: (_req, res, index) => {
        polledAt.push(Date.now());
        if (index < 1) return throttle(res);
        json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-followed' });
      },
    });
    // Its visit moved while its verification was at the service: followed for the result the moved visit takes.
    const at = new Date().toISOString();
    await rig.addCheck('followed', { state: 'cancelled', correlationId: 'ver-followed', mode: 'async', submittedAt: at, dueAt: at });
    rig.worker.start();
    const taken = await until('its result taken', async () => {
      const row = await rig.check('followed');
      return row.result !== undefined && row;
    });
    expect(taken).toMatchObject({ state: 'cancelled', result: { correlationId: 'ver-followed' } });
    expect(gets(rig.requests)).toHaveLength(2);
    expect((polledAt[1] ?? 0) - (polledAt[0] ?? 0)).toBeGreaterThanOrEqual(950);
  });

  it('says a service that keeps asking for fewer requests once, not at each check\'s send', async () => {
    rig = await startWorkerRig({ worker: { maxAttempts: 1, pendingGiveUpMs: 60_000 }, answer: (_req, res) => json(res, 429, { title: 'Too many requests', status: 429 }, { 'retry-after': '0' }) });
    await rig.addCheck('throttled-a');
    await rig.addCheck('throttled-b');
    rig.worker.start();
    await until('sent again and again', async () => posts(rig.requests).length >= 8, 8000);
    const said = rig.warnings.filter((w) => /429/.test(w.msg));
    expect(said.map((w) => w.msg)).toEqual(['the service asks for fewer requests (429); will retry: said once in ten minutes (lower requestsPerSecond if it lasts)']);
    expect(rig.warnings.filter((w) => w.msg === 'the service failed; will retry')).toEqual([]);
  });

  it('uses no attempt on a 429 that says no Retry-After either: the service asking for less says nothing of the check', async () => {
    rig = await startWorkerRig({
      worker: { maxAttempts: 2 },
      answer: (_req, res, index) => (index < 4 ? json(res, 429, { title: 'Too many requests', status: 429 }) : json(res, 201, resultBody('completed-minimal'))),
    });
    await rig.addCheck('throttled-unsaid');
    rig.worker.start();
    const row = await rig.reach('throttled-unsaid', 'written', 8000);
    expect(posts(rig.requests)).toHaveLength(5);
    expect(row.lastError).toBeUndefined();
    expect(rig.events.map((e) => e.name)).toEqual(['verified', 'written']);
  });

  it('gives a check the service throttles for longer than pendingGiveUpMs up, saying so in the chart', async () => {
    rig = await startWorkerRig({ worker: { maxAttempts: 1, pendingGiveUpMs: 1500 }, answer: (_req, res) => throttle(res) });
    await rig.addCheck('throttled-for-ever');
    rig.worker.start();
    const row = await rig.reach('throttled-for-ever', 'needs-attention', 8000);
    expect(posts(rig.requests)).toHaveLength(2);
    expect(row.lastError).toMatch(/^NotVerified: /);
    expect(JSON.stringify(row.result)).toContain('The verification service put it off past the time a verification may wait; given up');
    // Sends put off are not counted as attempts: a count would say one.
    expect(JSON.stringify(row.result)).not.toMatch(/attempts? in all/);
  });

  it('puts a send off for no load of the service\'s a tenth of the time its round has waited, not Retry-After alone, and says it again at debug', async () => {
    rig = await startWorkerRig({
      worker: { maxAttempts: 1, pendingGiveUpMs: 24 * 3_600_000, backoff: { baseMs: 20, maxMs: 600_000 } },
      answer: (_req, res) => json(res, 503, { title: 'Unavailable', status: 503 }, { 'retry-after': '1' }),
    });
    // A round first sent an hour ago, its last send put off as this one will be: one member id its portal chokes on.
    await rig.addCheck('stuck', { submittedAt: new Date(Date.now() - 3_600_000).toISOString(), lastError: '503: Unavailable' });
    rig.worker.start();
    const row = await until('put off', async () => {
      const now = await rig.check('stuck');
      return posts(rig.requests).length === 1 && now.state === 'received' && now.lastError === '503: Unavailable' && now.dueAt !== undefined && Date.parse(now.dueAt) > Date.now() && now;
    });
    // Six minutes, where Retry-After said a second: sent every ten seconds, it was 8,000 rounds a day.
    expect(Date.parse(row.dueAt ?? '') - Date.now()).toBeGreaterThan(300_000);
    expect(row.attempts).toBe(0);
    expect(rig.warnings.filter((w) => w.msg === 'the service failed; will retry')).toEqual([]);
  });

  it('counts the sends of a check whose visit is today, failing with a Retry-After, so the front desk hears in time', async () => {
    rig = await startWorkerRig({
      worker: { maxAttempts: 2, pendingGiveUpMs: 24 * 3_600_000 },
      answer: (_req, res) => json(res, 503, { title: 'Unavailable', status: 503 }, { 'retry-after': '1' }),
    });
    await rig.addCheck('today', { check: { ...checkRow('today').check, dateOfService: new Date().toISOString().slice(0, 10) } });
    rig.worker.start();
    // Put off without counting, it would have waited a day (pendingGiveUpMs), the visit long over.
    const row = await rig.reach('today', 'needs-attention', 8000);
    expect(row.lastError).toMatch(/^NotVerified: /);
    expect(JSON.stringify(row.result)).toContain('2 attempts in all');
    expect(posts(rig.requests)).toHaveLength(2);
  });

  /**
   * A rig whose service answers verifications' sends 429 until `stop()` (its reads, as a rate limit of one endpoint
   * leaves them), and a check `key` whose visit is today, given up into the chart once throttledGiveUpMs (1 s) has
   * passed: the check as given up.
   */
  /** Checks `key` and `more` given up throttled on their visit's day; `triesEveryMs`: the longest wait between the worker's own tries (backoff.maxMs). */
  const throttledToday = async (key: string, more: string[] = [], triesEveryMs = RIG_OPTIONS.backoff.maxMs) => {
    let throttling = true;
    rig = await startWorkerRig({
      worker: { maxAttempts: 1, pendingGiveUpMs: 24 * 3_600_000, throttledGiveUpMs: 1000, backoff: { ...RIG_OPTIONS.backoff, maxMs: triesEveryMs } },
      answer: (req, res, index) => {
        if (req.method === 'GET') return json(res, 200, { items: [] });
        if (throttling) return json(res, 429, { title: 'Too many requests', status: 429 });
        json(res, 201, { ...(resultBody('completed-minimal') as object), correlationId: `ver-${index}` });
      },
    });
    // What the store is asked of the service's outages and throttlings (the one meta row they share), and told to keep, in order.
    const kept: string[] = [];
    let read = 0;
    const transaction = rig.store.transaction.bind(rig.store);
    rig.store.transaction = (work) =>
      transaction((tx) =>
        work(Object.assign(Object.create(tx) as StoreTx, {
          getMeta: (k: string) => ((read += 1), tx.getMeta(k)),
          setMeta: (k: string, v: string) => (kept.push(v), tx.setMeta(k, v)),
        })),
      );
    for (const k of [key, ...more]) await rig.addCheck(k, { check: { ...checkRow(k).check, dateOfService: new Date().toISOString().slice(0, 10) } });
    rig.worker.start();
    for (const k of more) await rig.reach(k, 'needs-attention', 8000);
    return { given: await rig.reach(key, 'needs-attention', 8000), stop: () => void (throttling = false), kept, reads: () => read };
  };

  it('gives a check whose visit is today, throttled (429) past throttledGiveUpMs, up into the chart, and sends it again once the service answers', async () => {
    // Put off until pendingGiveUpMs, it would have been told nothing until the day after its visit.
    const { given, stop } = await throttledToday('today-throttled');
    expect(given.lastError).toMatch(/^NotVerified: The verification service put it off past the time a verification for a visit today may wait; given up /);
    expect(rig.events.map((e) => [e.name, e.event.failureKind])).toEqual([['failed', 'NotVerified'], ['written', undefined], ['needs-attention', 'NotVerified']]);
    const sentBefore = posts(rig.requests).length;
    // Nothing else is sent: the worker sends the check again itself, and the service takes it.
    stop();
    const written = await rig.reach('today-throttled', 'written', 8000);
    expect(written.round).toBe(given.round + 1);
    expect(posts(rig.requests)).toHaveLength(sentBefore + 1);
    expect(rig.infos.map((i) => i.msg)).toContain('one check given up while the service asked for fewer requests is sent again; the others once the service takes it');
    const responses = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(responses.map((r) => r.outcome).sort()).toEqual(['complete', 'error']);
  });

  it('sends one check given up for a 429 again while the service still answers its reads, the others once a send is taken, none given up again meanwhile', async () => {
    const { stop } = await throttledToday('first-given', ['second-given']);
    const rounds = { first: (await rig.check('first-given')).round, second: (await rig.check('second-given')).round };
    const sendsOf = async (key: string) => {
      const row = await rig.check(key);
      return rig.requests.filter((r) => r.method === 'POST' && r.body.includes(row.externalId)).length;
    };
    // One of them is the worker's try: sent, answered 429, sent again, as long as the service throttles.
    const probe = await until('one check sent again, three times', async () => {
      for (const key of ['first-given', 'second-given']) {
        const row = await rig.check(key);
        if (row.round > rounds[key === 'first-given' ? 'first' : 'second'] && (await sendsOf(key)) >= 3) return key;
      }
      return undefined;
    }, 15_000);
    const other = probe === 'first-given' ? 'second-given' : 'first-given';
    // A payer list read each minute, answered, sent them all again before: given up again at throttledGiveUpMs, their chart responses rewritten.
    expect(await rig.check(other)).toMatchObject({ state: 'needs-attention', round: rounds[other === 'first-given' ? 'first' : 'second'] });
    expect((await rig.check(probe)).state).not.toBe('needs-attention');
    expect(rig.events.filter((e) => e.name === 'written')).toHaveLength(2);
    stop();
    for (const key of [probe, other]) expect((await rig.reach(key, 'written', 8000)).round).toBeGreaterThan(rounds[key === 'first-given' ? 'first' : 'second']);
    const responses = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(responses.map((r) => r.outcome).sort()).toEqual(['complete', 'complete', 'error', 'error']);
  });

  it('keeps when a throttling\'s first check was given up once, not again at each check given up after it', async () => {
    // The worker's own tries a minute apart: a try's read of the record, come before the stop on a slow machine, would count.
    const { kept, reads } = await throttledToday('throttled-1', ['throttled-2', 'throttled-3'], 60_000);
    await until('the give-up kept', async () => kept.length > 0);
    await rig.worker.stop();
    expect(kept).toHaveLength(1);
    // Once as the worker started (takeUpOutage), once to keep the first give-up: not once more for each of the others.
    expect(reads()).toBe(2);
    expect(kept[0]).toMatch(/^\{"portals":\{\},"throttled":"\d{4}-/);
  });

  it('sends a check given up for a 429 on its visit\'s day again once another instance, running since before, has a send taken: the one that gave it up stopped for good', async () => {
    const { throttled, unavailable } = await throttledElsewhere((two) => (rig = two));
    expect(throttled.now.round).toBe(throttled.round + 1);
    // Given up for another reason: not the throttling's to send again.
    expect(unavailable.now).toMatchObject({ state: 'needs-attention', round: unavailable.round });
    expect(await keptOutages(rig.store)).toEqual({ portals: [] });
  });

  it('sends a check given up for a 429 after another instance took the throttling\'s record up again all the same: that instance sent again only those given up before', async () => {
    // This worker's own tries a minute apart, as they are at the defaults: the check is given up before its next.
    const { given, stop, kept } = await throttledToday('taken-up-elsewhere', [], 60_000);
    // The give-up is kept after the check is: the record is there to be taken up.
    await until('the give-up kept', async () => kept.length > 0);
    // Another instance's send taken: its transaction forgets the record and sends again the check given up by then.
    const now = new Date();
    expect(await forgetThrottled(rig.store)).toBeDefined();
    expect(await retryAsRead(rig.store, given, now)).toBe(true);
    // A rate limit that lets some sends through and not others: this worker gives another check up, the record gone.
    await rig.addCheck('given-up-after', { check: { ...checkRow('given-up-after').check, dateOfService: now.toISOString().slice(0, 10) } });
    const after = await rig.reach('given-up-after', 'needs-attention', 8000);
    stop();
    const written = await rig.reach('given-up-after', 'written', 8000);
    expect(written.round).toBe(after.round + 1);
    expect(await rig.reach('taken-up-elsewhere', 'written', 8000)).toMatchObject({ round: given.round + 1 });
  });

  it('sends a check whose answer was lost, then given up for a 429 on its visit\'s day, again under the externalId its lost send went by: verified once', async () => {
    // A service that keeps each verification under its externalId, and answers a send repeated under it with that one.
    const made = new Map<string, string>();
    let throttling = true;
    rig = await startWorkerRig({
      worker: { maxAttempts: 3, pendingGiveUpMs: 24 * 3_600_000, throttledGiveUpMs: 1000 },
      answer: (req, res, index) => {
        if (req.method === 'GET') return json(res, 200, { items: [] });
        const { externalId } = JSON.parse(req.body) as { externalId: string };
        if (made.size === 0) {
          // Verified, its answer lost at the gateway.
          made.set(externalId, `ver-${index}`);
          return json(res, 504, { title: 'Gateway Timeout', status: 504 });
        }
        // The gateway's rate limit, in front of the service.
        if (throttling) return json(res, 429, { title: 'Too many requests', status: 429 });
        const correlationId = made.get(externalId) ?? `ver-${index}`;
        made.set(externalId, correlationId);
        json(res, 201, { ...(resultBody('completed-minimal') as object), correlationId, externalId });
      },
    });
    await rig.addCheck('lost-then-throttled', { check: { ...checkRow('lost-then-throttled').check, dateOfService: new Date().toISOString().slice(0, 10) } });
    rig.worker.start();
    const given = await rig.reach('lost-then-throttled', 'needs-attention', 8000);
    expect(given.lastError).toMatch(/^NotVerified: The verification service put it off past the time a verification for a visit today may wait; /);
    throttling = false;
    const written = await rig.reach('lost-then-throttled', 'written', 8000);
    expect(written.round).toBe(given.round + 1);
    // The service's one verification, made at the first send: none made for the send again.
    expect([...made.values()]).toEqual(['ver-0']);
    expect((written.result as { correlationId: string }).correlationId).toBe('ver-0');
    const responses = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(responses.map((r) => r.outcome).sort()).toEqual(['complete', 'error']);
  });

  it('retries a check given up unverified under its round\'s externalId within a day of the give-up, and under a new one after: a verification its lost send made days before is not taken as fresh', async () => {
    rig = await startWorkerRig({ answer: (_req, res) => json(res, 503, { title: 'Unavailable', status: 503 }) });
    const givenUp = async (key: string, resultAt: Date) => {
      await rig.addCheck(key);
      const { externalId } = await rig.check(key);
      const failure = { correlationId: `local-${externalId}`, status: 'Failed', result: { type: 'https://dental-elig.dev/problems/NotVerified', title: 'Benefits could not be verified', detail: 'The verification service was unavailable' } };
      await rig.addCheck(key, { state: 'needs-attention', result: failure, resultAt: resultAt.toISOString(), correlationId: failure.correlationId, dueAt: undefined });
      return externalId;
    };
    const now = new Date();
    const hourAgo = await givenUp('given-up-an-hour-ago', new Date(now.getTime() - 3_600_000));
    const daysAgo = await givenUp('given-up-two-days-ago', new Date(now.getTime() - 2 * 86_400_000));
    expect((await retryCheck(rig.store, 'given-up-an-hour-ago', now)).externalId).toBe(hourAgo);
    const later = await retryCheck(rig.store, 'given-up-two-days-ago', now);
    expect([later.round, later.externalId === daysAgo]).toEqual([1, false]);
  });

  it('sends a check its chart already says not verified of, answered 429, no longer once its visit\'s day is over: given up, not sent for pendingGiveUpMs', async () => {
    rig = await startWorkerRig({
      worker: { maxAttempts: 1, pendingGiveUpMs: 24 * 3_600_000, throttledGiveUpMs: 1000 },
      answer: (req, res) => (req.method === 'GET' ? json(res, 200, { items: [] }) : json(res, 429, { title: 'Too many requests', status: 429 })),
    });
    // Given up on its visit's day, its failure written, and sent again (a send taken, or tryThrottled's): still put off as that day ended.
    // Over everywhere: its zone unknown, a day is over once it is in the earliest zone (UTC-12), which UTC's yesterday is not until noon UTC.
    const dayOver = new Date(Date.now() - 2 * 86_400_000).toISOString().slice(0, 10);
    const sentAgain = new Date().toISOString();
    await rig.addCheck('told-yesterday', {
      check: { ...checkRow('told-yesterday').check, dateOfService: dayOver },
      round: 1,
      submittedAt: sentAgain,
      written: { requestId: 'req-told', responseId: 'resp-told', verification: 'local-ext-told-yesterday', round: 0 },
    });
    rig.worker.start();
    const row = await rig.reach('told-yesterday', 'needs-attention', 8000);
    expect(row.lastError).toMatch(/^NotVerified: The verification service put it off until the visit's day was over; given up /);
    expect(posts(rig.requests)).toHaveLength(1);
    // Not one of a throttling's to send again: its visit is over.
    expect(await keptOutages(rig.store)).toEqual({ portals: [] });
  });

  it('gives a check whose chart says its office\'s setup was refused, retried once fixed, then throttled on its visit\'s day, up at throttledGiveUpMs: the chart said no "not verified"', async () => {
    // The office had no credentials on the portal (SetupRefused); its administrator stored them and retried the check.
    const refused = { title: 'Unprocessable', status: 422, errors: [{ field: 'portalId', message: 'no credentials are stored for this clinic and portal', code: 'credentials_not_stored' }] };
    let fixed = false;
    rig = await startWorkerRig({
      worker: { maxAttempts: 1, pendingGiveUpMs: 24 * 3_600_000, throttledGiveUpMs: 1000 },
      answer: (req, res) => {
        if (req.method === 'GET') return json(res, 200, { items: [] });
        if (!fixed) return json(res, 422, refused);
        json(res, 429, { title: 'Too many requests', status: 429 });
      },
    });
    await rig.addCheck('setup-fixed', { check: { ...checkRow('setup-fixed').check, dateOfService: new Date().toISOString().slice(0, 10) } });
    rig.worker.start();
    const refusedRow = await rig.reach('setup-fixed', 'needs-attention', 8000);
    expect(refusedRow.lastError).toMatch(/^SetupRefused: /);
    fixed = true;
    await retryCheck(rig.store, 'setup-fixed', new Date());
    // Taken for one its chart says not verified of, it waited pendingGiveUpMs (or its visit's day out), the chart saying the setup was refused.
    const given = await rig.reach('setup-fixed', 'needs-attention', 8000);
    expect(given.lastError).toMatch(/^NotVerified: The verification service put it off past the time a verification for a visit today may wait; given up /);
    const responses = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(responses.map((r) => r.disposition ?? '').some((d) => /could not be verified/i.test(d))).toBe(true);
  });

  it('sends a check given up for a 429 on its visit\'s day again once the service answers a worker started since: the store keeps when it was given up', async () => {
    const { given, stop } = await throttledToday('throttled-restart');
    // serve restarted before any call was answered: what the first worker knew of the throttling went with it.
    await rig.restart();
    stop();
    rig.worker.start();
    const written = await rig.reach('throttled-restart', 'written', 8000);
    expect(written.round).toBe(given.round + 1);
    // Sent again once: the record is gone with it, forgotten as its send is answered, beside its write to the chart.
    await until('the throttling forgotten', async () => (await keptOutages(rig.store)).throttled === undefined);
    expect(await keptOutages(rig.store)).toEqual({ portals: [] });
  });
});

describe('the worker waiting for an asynchronous result', () => {
  it('takes a 401 on the poll of a check cancelled with its verification at the service for the API key refused, and lets the check go to no person', async () => {
    rig = await startWorkerRig({ worker: { asyncEnabled: true }, answer: (_req, res) => json(res, 401, { title: 'Unauthorized', status: 401 }) });
    const now = new Date().toISOString();
    // Its visit moved while the verification was at the service: followed for its result (followCancelled).
    await rig.addCheck('moved-away', { state: 'cancelled', mode: 'async', portalId: 'portal-1', correlationId: 'ver-moved', submittedAt: now, dueAt: now });
    rig.worker.start();
    await until('the API key said refused', async () => rig.worker.keyRefusedSince !== undefined);
    const row = await until('the check let go', async () => {
      const check = await rig.check('moved-away');
      return check.dueAt === undefined && check;
    });
    expect(row.state).toBe('cancelled');
    expect(gets(rig.requests)).toHaveLength(1);
    expect(rig.events).toEqual([]);
  });

  const accepted = (res: ServerResponse) => json(res, 202, { correlationId: 'ver-lost', status: 'Pending' });

  it('sends a verification the service keeps forgetting (404 on poll) maxAttempts times, then gives it up, measuring the wait from the first send', async () => {
    const sentAt: number[] = [];
    rig = await startWorkerRig({
      worker: { asyncEnabled: true, maxAttempts: 3, webhookDeadlineMs: 20, pendingGiveUpMs: 60_000 },
      answer: (req, res) => {
        if (req.method !== 'POST') return json(res, 404, { title: 'Not found', status: 404 });
        sentAt.push(Date.now());
        accepted(res);
      },
    });
    await rig.addCheck('forgotten');
    rig.worker.start();
    const given = await rig.reach('forgotten', 'needs-attention', 5000);
    await sleep(300);
    expect(posts(rig.requests)).toHaveLength(3);
    expect(gets(rig.requests)).toHaveLength(3);
    expect(JSON.stringify(given.result)).toContain('The verification service lost the verification each time, 3 attempts in all');
    expect(Date.parse(given.submittedAt ?? '')).toBeLessThan(sentAt[1] ?? 0);
    expect(rig.events.map((e) => [e.name, e.event.failureKind])).toEqual([['failed', 'NotVerified'], ['written', undefined], ['needs-attention', 'NotVerified']]);
  });

  it('sends a check given up for a verification the service forgot each time (404 on poll) again under a new externalId: the old one answers only the one it forgot', async () => {
    // A service that keeps each verification under its externalId (answering a send repeated under it with that one),
    // and has lost the first it made: a poll of it is 404, whatever is sent under its externalId.
    const made = new Map<string, string>();
    rig = await startWorkerRig({
      worker: { asyncEnabled: true, maxAttempts: 3, webhookDeadlineMs: 20, pendingGiveUpMs: 60_000 },
      answer: (req, res, index) => {
        if (req.method === 'GET') {
          if (req.url.endsWith('/ver-0')) return json(res, 404, { title: 'Not found', status: 404 });
          return json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: req.url.split('/').at(-1) });
        }
        const { externalId } = JSON.parse(req.body) as { externalId: string };
        const correlationId = made.get(externalId) ?? `ver-${made.size === 0 ? 0 : index}`;
        made.set(externalId, correlationId);
        json(res, 202, { correlationId, status: 'Pending' });
      },
    });
    await rig.addCheck('forgotten-again');
    rig.worker.start();
    const given = await rig.reach('forgotten-again', 'needs-attention', 5000);
    expect(JSON.stringify(given.result)).toContain('The verification service lost the verification each time');
    // Sent under the externalId of the verification the service lost, it would be given up so again, at each retry.
    await retryCheck(rig.store, 'forgotten-again', new Date());
    const written = await rig.reach('forgotten-again', 'written', 5000);
    expect(written.externalId).not.toBe(given.externalId);
    expect(written.correlationId).not.toBe('ver-0');
  });

  it('counts a result polled as a webhook not received only for an asynchronous send: a synchronous one answered Pending has none to come', async () => {
    // A payer verified synchronously (its catalog entry has no async portal) while a webhook is configured for the others.
    const missed: string[] = [];
    rig = await startWorkerRig({
      worker: { asyncEnabled: true },
      resolver: { resolve: () => ({ status: 'resolved', name: 'Guardian', commonPayerId: '64246', supportsAsync: false, asyncPortals: [], syncPortals: ['portal-a'] }) } as unknown as PayerResolver,
      webhookMissed: (key) => void missed.push(key),
      answer: (req, res) =>
        req.method === 'POST' ? json(res, 201, { correlationId: 'ver-sync', status: 'Pending' }) : json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-sync' }),
    });
    await rig.addCheck('sync-pending');
    rig.worker.start();
    const written = await rig.reach('sync-pending', 'written', 5000);
    expect([written.mode, posts(rig.requests), gets(rig.requests).length]).toEqual(['sync', ['/v2/insurance-verifications'], 1]);
    expect(missed).toEqual([]);
  });

  it('counts no webhook as not received when it came while the poll was under way: the webhook took the result, written once', async () => {
    const missed: string[] = [];
    const webhookIn = gate();
    let polled = () => {};
    const polling = new Promise<void>((resolve) => (polled = resolve));
    rig = await startWorkerRig({
      worker: { asyncEnabled: true },
      webhookMissed: (key) => void missed.push(key),
      answer: async (req, res) => {
        if (req.method === 'POST') return json(res, 201, { correlationId: 'ver-race', status: 'Pending' });
        polled();
        await webhookIn.opened;
        json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-race' });
      },
    });
    await rig.addCheck('race');
    rig.worker.start();
    await polling;
    const body = { ...(resultBody('completed-minimal') as object), correlationId: 'ver-race' };
    const applied = await ingestWebhook(rig.store, rig.worker, { webhookId: 'msg_race', rawBody: JSON.stringify(body), receivedAt: new Date(), outcome: toOutcome(body) }, new Date());
    webhookIn.open();
    expect(applied.status).toBe('applied');
    await rig.reach('race', 'written', 5000);
    await until('the poll done', async () => rig.worker.busy === 0);
    expect([posts(rig.requests).length, gets(rig.requests).length, rig.events.filter((e) => e.name === 'written').length]).toEqual([1, 1, 1]);
    expect(missed).toEqual([]);
  });

  it('polls at once when the send, repeated after its answer was lost, is answered with a verification already done', async () => {
    // The first send's answer never comes (the service took it); the same externalId sent again is
    // answered with that verification, Completed by now: its webhook came while no check had its id.
    rig = await startWorkerRig({
      worker: { asyncEnabled: true, webhookDeadlineMs: 60_000 },
      service: { timeoutMs: 200 },
      answer: (req, res, index) => {
        if (req.method === 'GET') return json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-done' });
        if (index === 0) return;
        json(res, 201, { correlationId: 'ver-done', status: 'Completed' });
      },
    });
    await rig.addCheck('answer-lost');
    rig.worker.start();
    const written = await rig.reach('answer-lost', 'written', 5000);
    expect(written.correlationId).toBe('ver-done');
    expect(posts(rig.requests)).toHaveLength(2);
    expect(gets(rig.requests)).toHaveLength(1);
  });

  /**
   * A check whose send's answer (`answerWith`) is held back until its Completed result has come by
   * webhook (the service done sooner than its answer reaches us): no check has the correlation id yet.
   */
  const webhookBeforeAnswer = async (key: string, answerWith: (res: ServerResponse) => void) => {
    let release = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    rig = await startWorkerRig({
      worker: { asyncEnabled: true, webhookDeadlineMs: 60_000 },
      answer: async (req, res) => {
        if (req.method !== 'POST') return json(res, 404, { title: 'Not found', status: 404 });
        await released;
        answerWith(res);
      },
    });
    await rig.addCheck(key);
    rig.worker.start();
    const sent = await rig.reach(key, 'submitted', 5000);
    const body = { ...(resultBody('completed-minimal') as object), correlationId: 'ver-early', externalId: sent.externalId };
    const delivery = { webhookId: `msg_${key}`, rawBody: JSON.stringify(body), receivedAt: new Date(), outcome: toOutcome(body) };
    const applied = await ingestWebhook(rig.store, rig.worker, delivery, new Date());
    release();
    return { applied, body, delivery };
  };

  it('applies a result whose webhook comes before the answer to its send, the check known by the externalId it was sent under', async () => {
    const { applied, body, delivery } = await webhookBeforeAnswer('early', (res) => json(res, 201, { correlationId: 'ver-early', status: 'Pending' }));
    expect(applied.status).toBe('applied');
    const written = await rig.reach('early', 'written', 5000);
    expect(written.correlationId).toBe('ver-early');
    // Written from the webhook: no poll after the deadline, no second send.
    expect([posts(rig.requests).length, gets(rig.requests).length]).toEqual([1, 0]);
    // Another round's webhook under an externalId no send is under way for is kept, not applied.
    const stray = { ...body, correlationId: 'ver-stray', externalId: 'elig_00000000000000000000000000000000' };
    expect((await ingestWebhook(rig.store, rig.worker, { ...delivery, webhookId: 'msg_stray', rawBody: JSON.stringify(stray), outcome: toOutcome(stray) }, new Date())).status).toBe('ignored');
  });

  it('keeps, not applies, a webhook naming a check\'s correlation id under another externalId: another request\'s result', async () => {
    rig = await startWorkerRig({ worker: { asyncEnabled: true, webhookDeadlineMs: 60_000 }, answer: (req, res) => (req.method === 'POST' ? json(res, 201, { correlationId: 'ver-mixed', status: 'Pending' }) : json(res, 404, { title: 'Not found', status: 404 })) });
    await rig.addCheck('mixed');
    rig.worker.start();
    const waiting = await rig.reach('mixed', 'awaiting-result', 5000);
    const body = { ...(resultBody('completed-minimal') as object), correlationId: 'ver-mixed', externalId: 'elig_another_patients_request' };
    const delivery = { webhookId: 'msg_mixed', rawBody: JSON.stringify(body), receivedAt: new Date(), outcome: toOutcome(body) };
    expect(await ingestWebhook(rig.store, rig.worker, delivery, new Date())).toEqual({ status: 'dead', detail: expect.stringContaining('names externalId elig_another_patients_request, not the one the check with its correlation id was sent under') });
    expect((await rig.check('mixed')).state).toBe('awaiting-result');
    expect(waiting.externalId).not.toBe('elig_another_patients_request');
    expect((await rig.store.listMessages({ status: 'dead', kind: 'webhook' })).map((m) => m.raw)).toEqual([delivery.rawBody]);
  });

  it('says nothing of a refused send whose result a webhook applied meanwhile: the check is written, no person is called', async () => {
    const { applied } = await webhookBeforeAnswer('refused-late', (res) => json(res, 403, { type: 'about:blank', title: 'Forbidden', status: 403 }));
    expect(applied.status).toBe('applied');
    await rig.reach('refused-late', 'written', 5000);
    await sleep(200);
    expect(rig.events.filter((e) => e.name === 'needs-attention')).toEqual([]);
  });

  it('sends as a verification of its own a request the service refuses for an externalId it holds another request under', async () => {
    // The first send's answer was lost, and its body has changed since (the payer catalog synced again):
    // the service refuses the same externalId for a different request. No data is wrong; nothing goes to the chart.
    rig = await startWorkerRig({
      worker: { asyncEnabled: false },
      answer: (req, res) => {
        const { externalId } = JSON.parse(req.body) as { externalId: string };
        if (externalId === firstId) return json(res, 422, { type: 'about:blank', title: 'Unprocessable', status: 422, errors: [{ field: 'externalId', code: 'conflict', message: 'this externalId was already used for a different request' }] });
        json(res, 201, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-own', externalId });
      },
    });
    await rig.addCheck('conflicted');
    const firstId = (await rig.check('conflicted')).externalId;
    rig.worker.start();
    const written = await rig.reach('conflicted', 'written', 5000);
    expect([written.round, written.correlationId, written.externalId === firstId]).toEqual([1, 'ver-own', false]);
    expect(posts(rig.requests)).toHaveLength(2);
  });

  it('looks once more when a verification has been pending too long: a result whose webhook never came is written, not left to a person', async () => {
    rig = await startWorkerRig({
      worker: { asyncEnabled: true, webhookDeadlineMs: 20, pollAfterMs: 100, pendingGiveUpMs: 400, backoff: { baseMs: 50, maxMs: 250 } },
      answer: async (req, res) => {
        if (req.method === 'POST') return accepted(res);
        // Done at the service just as the wait is up, by the worker's own reckoning (from the
        // submittedAt it stored before sending: on a loaded machine the send arrives later); its webhook was lost.
        const { submittedAt } = await rig.check('last-look');
        if (Date.now() < Date.parse(submittedAt ?? '') + 400) return json(res, 200, { correlationId: 'ver-lost', status: 'Pending' });
        json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-lost' });
      },
    });
    await rig.addCheck('last-look');
    rig.worker.start();
    expect((await rig.reach('last-look', 'written', 5000)).correlationId).toBe('ver-lost');
  });

  it('leaves a verification to a person once it has been pending too long, though Pending webhooks keep coming more often than its polls', async () => {
    rig = await startWorkerRig({
      worker: { asyncEnabled: true, webhookDeadlineMs: 20, pollAfterMs: 10_000, pendingGiveUpMs: 500 },
      answer: (req, res) => (req.method === 'POST' ? accepted(res) : json(res, 200, { correlationId: 'ver-lost', status: 'Pending' })),
    });
    await rig.addCheck('chatty');
    rig.worker.start();
    await rig.reach('chatty', 'awaiting-result', 5000);
    const pending = { correlationId: 'ver-lost', status: 'Pending' };
    const sending = setInterval(() => {
      const id = `msg_${Date.now()}_${Math.random()}`;
      void ingestWebhook(rig.store, rig.worker, { webhookId: id, rawBody: JSON.stringify(pending), receivedAt: new Date(), outcome: toOutcome(pending) }, new Date()).catch(() => undefined);
    }, 50);
    try {
      expect((await rig.reach('chatty', 'needs-attention', 3000)).lastError).toBe('still pending at the service; check it there');
    } finally {
      clearInterval(sending);
    }
  });

  it('polls a verification that stays Pending less and less often, about as often as it has been pending', async () => {
    const polledAt: number[] = [];
    rig = await startWorkerRig({
      random: () => 1,
      worker: { asyncEnabled: true, webhookDeadlineMs: 100, pollAfterMs: 100, backoff: { baseMs: 50, maxMs: 60_000 } },
      answer: (req, res) => {
        if (req.method === 'POST') return accepted(res);
        polledAt.push(Date.now());
        json(res, 200, { correlationId: 'ver-lost', status: 'Pending' });
      },
    });
    await rig.addCheck('slow-payer');
    rig.worker.start();
    await sleep(3000);
    const gaps = polledAt.slice(1).map((t, i) => t - (polledAt[i] ?? 0));
    // Pending since the send: waits of about 0.1, 0.2, 0.4, 0.8, 1.6 s, not 0.1 s each time.
    expect(polledAt.length).toBeGreaterThanOrEqual(4);
    expect(polledAt.length).toBeLessThanOrEqual(7);
    for (let i = 1; i < gaps.length; i++) expect(gaps[i]).toBeGreaterThan((gaps[i - 1] ?? 0) * 1.2);
    expect(gaps.at(-1)).toBeGreaterThanOrEqual(700);
    expect((await rig.check('slow-payer')).state).toBe('awaiting-result');
  });
});

describe('the worker when a step fails for a reason of its own', () => {
  it('answers a check whose request cannot be built (a catalog payer with no name) in the chart, naming the field, without a loop', async () => {
    rig = await startWorkerRig({ payerName: '', answer: (_req, res) => json(res, 500, { title: 'not to be called' }) });
    await rig.addCheck('nameless');
    rig.worker.start();
    const done = await rig.reach('nameless', 'needs-attention', 5000);
    expect(JSON.stringify(done.result)).toContain('payer.name');
    expect(done.written).toBeDefined();
    expect(rig.requests).toHaveLength(0);
    expect(rig.errors).toEqual([]);
  });

  it('backs off after an unexpected error and gives the check up after maxAttempts, instead of claiming it again at once, saying so in the chart', async () => {
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
    const given = await rig.reach('buggy', 'needs-attention', 5000);
    await sleep(300);
    expect(calls).toBe(3);
    // The chart has the plugin's words, not the fault's.
    expect(JSON.stringify(given.result)).toContain('This plugin failed at each attempt, 3 attempts in all');
    expect(JSON.stringify(given.result)).not.toContain('catalog index');
    expect(rig.events.map((e) => [e.name, e.event.state])).toEqual([['failed', 'result-stored'], ['written', 'needs-attention'], ['needs-attention', 'needs-attention']]);
  });

  it('gives a check up as dead when what fails is the record of its write: nothing more can be written for it', async () => {
    rig = await startWorkerRig({ worker: { maxAttempts: 2, backoff: { baseMs: 50, maxMs: 100 } }, answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-unrecorded' }) });
    await rig.addCheck('unrecorded');
    const { store } = rig;
    const real = store.transaction.bind(store);
    // Every record of a write fails, for a reason other than the store being away (a fault of this program's).
    store.transaction = ((work) =>
      real(async (tx) => {
        const put = tx.putCheck.bind(tx);
        return work(Object.assign(Object.create(tx) as typeof tx, { putCheck: (row: Parameters<typeof put>[0]) => (row.written ? Promise.reject(new Error('row too large')) : put(row)) }));
      })) as typeof store.transaction;
    rig.worker.start();
    const dead = await rig.reach('unrecorded', 'dead', 5000);
    expect(dead.lastError).toBe('gave up after 2 attempts: row too large');
    expect(rig.events.map((e) => [e.name, e.event.state])).toEqual([['verified', 'result-stored'], ['failed', 'dead']]);
  });

  it('says which check the service failed and when it is tried again, quoting nothing the service wrote', async () => {
    let n = 0;
    rig = await startWorkerRig({
      worker: { backoff: { baseMs: 100, maxMs: 400 } },
      answer: (_req, res) => {
        // A problem that quotes what was sent: it stays out of the log.
        if (++n === 1) return json(res, 503, { title: 'Unavailable for ELLEN RIVERA', status: 503 });
        json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-after-503' });
      },
    });
    await rig.addCheck('put-back');
    rig.worker.start();
    await rig.reach('put-back', 'written');
    const said = rig.warnings.filter((w) => w.msg === 'the service failed; will retry');
    expect(said).toHaveLength(1);
    expect(said[0]?.fields).toMatchObject({ key: 'put-back', step: 'send', failure: 503, attempts: 1 });
    expect((said[0]?.fields as { retryInMs: number }).retryInMs).toBeGreaterThan(0);
    expect(JSON.stringify(rig.warnings)).not.toContain('ELLEN');
  });
});

describe('the worker when the job store does not answer', () => {
  it('says so once and looks again less and less often, then takes up the checks when it answers', async () => {
    rig = await startWorkerRig({ worker: { idleMs: 20 }, answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-back' }) });
    await rig.addCheck('after-outage');
    const claim = rig.store.claimDue.bind(rig.store);
    let down = true;
    let looks = 0;
    rig.store.claimDue = (options) => (looks++, down ? Promise.reject(new Error('connect ECONNREFUSED')) : claim(options));
    rig.worker.start();
    await sleep(1500);
    // At 20 ms a look that would be 75; waiting twice as long after each failure, 6.
    expect(looks).toBeLessThanOrEqual(7);
    expect(rig.errors).toEqual(['worker could not read the job store; trying again, less and less often']);
    down = false;
    expect((await rig.reach('after-outage', 'written', 5000)).state).toBe('written');
    expect(rig.errors).toHaveLength(1);
  });

  it('looks again at most 5 s apart however long the store was away, so its checks go on within 5 s of its return', () => {
    // At the default idleMs: 1, 2 and 4 s after the first failures, then every 5 s (PostgreSQL back after a long outage used to wait up to 30 s).
    expect([1, 2, 3, 4, 5, 10, 40].map((failures) => storeRetryWaitMs(500, failures))).toEqual([1000, 2000, 4000, 5000, 5000, 5000, 5000]);
    // A worker told to look less often than that when idle is not made to look more often when the store fails.
    expect(storeRetryWaitMs(8000, 3)).toBe(8000);
  });

  it('says a full disk once, however many looks find a check due they cannot lease and nothing else', async () => {
    rig = await startWorkerRig({ worker: { idleMs: 20 }, answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-room' }) });
    await rig.addCheck('to-send');
    const claim = rig.store.claimDue.bind(rig.store);
    let full = true;
    let looks = 0;
    rig.store.claimDue = (options) => (looks++, claim(options));
    // As SQLite on a full disk: a claim that leases a check fails writing the lease, one of nothing answers.
    const take = (rig.store as unknown as { leases: { take: { run: (...args: unknown[]) => unknown } } }).leases.take;
    const run = take.run.bind(take);
    take.run = (...args) => {
      if (full) throw Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
      return run(...args);
    };
    rig.worker.start();
    await until('three looks at the full store', async () => looks >= 3, 5000);
    const said = () => rig.warnings.map((w) => w.msg).filter((msg) => msg.startsWith('the job store'));
    expect(said()).toEqual(['the job store is out of reach: checks, messages and webhooks wait for it, and nothing more is said until it answers']);
    full = false;
    expect((await rig.reach('to-send', 'written', 5000)).state).toBe('written');
    expect(said()).toHaveLength(2);
  });

  it('releases a check whose step the store went away under once it answers, rather than leaving it until its lease ends', async () => {
    rig = await startWorkerRig({ worker: { idleMs: 20, leaseMs: 60_000 }, answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-released' }) });
    await rig.addCheck('lost-step');
    const { store } = rig;
    const transaction = store.transaction.bind(store);
    const release = store.release.bind(store);
    // Claimed, then the store goes away: the step, its record of the failure and the release all fail.
    let down = true;
    const away = () => Promise.reject(new Error('connect ECONNREFUSED'));
    store.transaction = ((work) => (down ? away() : transaction(work))) as typeof store.transaction;
    store.release = (key, owner) => (down ? away() : release(key, owner));
    rig.worker.start();
    await until('the failed step not recorded', async () => rig.errors.some((msg) => msg.startsWith('could not record a failed step')));
    down = false;
    expect((await rig.reach('lost-step', 'written', 5000)).state).toBe('written');
    expect(posts(rig.requests)).toHaveLength(1);
  });
});

describe('the worker when the job store goes away under a step', () => {
  const outages = [
    ['PostgreSQL out of reach', () => new StoreUnavailableError(new Error('Connection terminated unexpectedly'))],
    ['SQLite on a full disk', () => Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' })],
  ] as const;
  const said = ['the job store is out of reach: checks, messages and webhooks wait for it, and nothing more is said until it answers', 'the job store answers again'];
  /** The warnings of the store's watch. */
  const outageLines = () => rig.warnings.map((w) => w.msg).filter((msg) => msg.startsWith('the job store'));
  /** The check once written or dead, read past the faults the test puts in the worker's way. */
  const settled = (read: WorkerRig['store']['transaction'], key: string) =>
    until(`check ${key} written or dead`, async () => {
      const row = await read((tx) => tx.getCheck(key));
      return (row?.state === 'written' || row?.state === 'dead') && row;
    });

  it.each(outages)('uses no attempt of a check whose step the store failed (%s): one allowed, it is verified, not given up', async (_store, outage) => {
    rig = await startWorkerRig({ worker: { maxAttempts: 1 }, answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-one-attempt' }) });
    await rig.addCheck('one-attempt');
    const { store } = rig;
    const read = store.transaction.bind(store);
    // The step marking the check sent fails; the store answers the next transaction, which records a step's failure.
    let calls = 0;
    store.transaction = ((work) => (++calls === 1 ? Promise.reject(outage()) : read(work))) as typeof store.transaction;
    rig.worker.start();
    const row = await settled(read, 'one-attempt');
    expect({ state: row.state, lastError: row.lastError }).toEqual({ state: 'written', lastError: undefined });
    expect(posts(rig.requests)).toHaveLength(1);
    expect(rig.errors).toEqual([]);
    expect(outageLines()).toEqual(said);
  });

  it('keeps the service\'s answer while the store is away and records it once it is back: the check is not sent again', async () => {
    let down = false;
    let sent = 0;
    rig = await startWorkerRig({
      answer: (_req, res) => {
        // Answered, and the store goes away before the answer is recorded.
        if (++sent === 1) down = true;
        json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-kept' });
      },
    });
    await rig.addCheck('kept');
    const { store } = rig;
    const read = store.transaction.bind(store);
    // Away, the store fails every call, as one out of reach does.
    for (const method of ['transaction', 'claimDue', 'release', 'extendLease'] as const) {
      const real = (store[method] as (...args: unknown[]) => Promise<unknown>).bind(store);
      Object.assign(store, { [method]: (...args: unknown[]) => (down ? Promise.reject(new StoreUnavailableError(new Error('connect ECONNREFUSED 127.0.0.1:5432'))) : real(...args)) });
    }
    rig.worker.start();
    await until('the answer in hand', async () => down);
    await sleep(400);
    expect((await read((tx) => tx.getCheck('kept')))?.state).toBe('submitted');
    down = false;
    const row = await settled(read, 'kept');
    expect({ state: row.state, correlationId: row.correlationId, attempts: row.attempts }).toEqual({ state: 'written', correlationId: 'ver-kept', attempts: 0 });
    await sleep(200);
    expect(posts(rig.requests)).toHaveLength(1);
    expect(rig.errors).toEqual([]);
    expect(outageLines()).toEqual(said);
  });

  /**
   * A rig whose check's chart write reads the patient's plans through the store, whose transactions from that
   * first write on fail while its claims answer, as PostgreSQL's do when their queries time out (a SQLite file
   * another process holds fails the claims too, at BEGIN IMMEDIATE, and the worker then looks less and less often).
   */
  async function timingOut(key: string) {
    const state = { timingOut: false, writes: 0, refused: 0 };
    rig = await startWorkerRig({
      answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: `ver-${key}` }),
      writer: (chart) => ({
        async write(check, outcome, refs, options) {
          if (++state.writes === 1) state.timingOut = true;
          await options?.insuredUnder?.();
          return chart.write(check, outcome, refs, options);
        },
      }),
    });
    await rig.addCheck(key);
    const { store } = rig;
    const read = store.transaction.bind(store);
    const timedOut = () => Promise.reject(new StoreUnavailableError(new Error('Query read timeout')));
    store.transaction = ((work) => (state.timingOut ? ((state.refused += 1), timedOut()) : read(work))) as typeof store.transaction;
    rig.worker.start();
    await until('the store timing out', async () => state.timingOut);
    return { state, read };
  }

  it('pauses a check whose step the store failed while its claims go on, rather than taking it again at once: the chart is not called in a loop', async () => {
    const { state, read } = await timingOut('held');
    await sleep(1500);
    const heldFor = state.writes;
    state.timingOut = false;
    const row = await settled(read, 'held');
    expect({ state: row.state, attempts: row.attempts, lastError: row.lastError }).toEqual({ state: 'written', attempts: 0, lastError: undefined });
    // Each pause longer than the last, from idleMs (20 ms) up to a second: a handful of writes in 1.5 s, not one per claim.
    expect(heldFor).toBeLessThanOrEqual(8);
    expect(rig.errors).toEqual([]);
    // A claim answered after transactions that asked for no change failed is the store answering: each time said so.
    const lines = outageLines();
    expect(lines).toEqual(lines.map((_, i) => said[i % 2]));
    expect(lines.length % 2).toBe(0);
  });

  it('gives a check it pauses for the store back at once when it stops, not once the pause is over', async () => {
    const { state } = await timingOut('stopped');
    // Past the pauses of 20 to 640 ms: the one after the next try of the store is a second long. (The check is read again
    // before its write, so the store away, the chart is not called: the store's tries tell the pauses.)
    await sleep(1400);
    const before = state.refused;
    await until('the next try of the store', async () => state.refused > before);
    const stopping = Date.now();
    await rig.worker.stop();
    expect(Date.now() - stopping).toBeLessThan(400);
    state.timingOut = false;
  });

  it('uses no attempt when the store cannot give a check its rate-limit token: it goes with the process\'s own bucket, its attempts left to the service\'s failures', async () => {
    let n = 0;
    rig = await startWorkerRig({
      worker: { maxAttempts: 2, rateLimits: { perSecond: 50 } },
      // One failure of the service's own, which the second attempt outlives.
      answer: (_req, res) => (++n === 1 ? json(res, 503, { title: 'Service Unavailable', status: 503 }) : json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-token' })),
    });
    await rig.addCheck('token');
    const { store } = rig;
    const read = store.transaction.bind(store);
    const take = store.takeRateToken.bind(store);
    let tokens = 0;
    store.takeRateToken = (...args) => (++tokens === 1 ? Promise.reject(new StoreUnavailableError(new Error('Connection terminated unexpectedly'))) : take(...args));
    rig.worker.start();
    const row = await settled(read, 'token');
    expect({ state: row.state, lastError: row.lastError }).toEqual({ state: 'written', lastError: undefined });
    expect(posts(rig.requests)).toHaveLength(2);
    expect(rig.errors).toEqual([]);
    expect(outageLines()).toEqual(said);
  });
});

describe('the worker when something around it fails after a step is done', () => {
  it('leaves a written check as written when a listener of its event throws: no second verification, no dead check', async () => {
    let n = 0;
    rig = await startWorkerRig({
      worker: { maxAttempts: 1 },
      answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: `ver-listener-${++n}` }),
      onEvent: (name) => {
        if (name === 'written') throw new Error('a listener of the embedding service failed');
      },
    });
    await rig.addCheck('listened');
    rig.worker.start();
    const written = await rig.reach('listened', 'written');
    await sleep(600);
    const after = await rig.check('listened');
    expect({ state: after.state, round: after.round, dueAt: after.dueAt }).toEqual({ state: 'written', round: written.round, dueAt: written.dueAt });
    expect(posts(rig.requests)).toHaveLength(1);
    expect(rig.errors).toContain('a listener of the sync events failed');
  });

  it('puts a pending verification in needs-attention when the service puts its poll off past pendingGiveUpMs', async () => {
    rig = await startWorkerRig({
      worker: { asyncEnabled: true, webhookDeadlineMs: 20, pendingGiveUpMs: 60_000 },
      answer: (req, res) => {
        if (req.method === 'POST') return json(res, 202, { correlationId: 'ver-put-off', status: 'Pending' });
        json(res, 503, { title: 'Unavailable', status: 503 }, { 'retry-after': String(30 * 86400) });
      },
    });
    await rig.addCheck('put-off');
    rig.worker.start();
    const row = await rig.reach('put-off', 'needs-attention');
    expect(row).toMatchObject({ state: 'needs-attention', lastError: 'still pending at the service; check it there' });
    expect(row.dueAt).toBeUndefined();
    expect(gets(rig.requests)).toHaveLength(1);
    expect(rig.events.map((e) => [e.name, e.event.detail])).toContainEqual(['needs-attention', 'pending too long']);
  });
});

describe('the worker when the appointment changes while it writes', () => {
  const swapped = (coverage: CoverageInfo): CoverageInfo => ({ ...coverage, order: 'secondary' });

  /**
   * A check whose first write is held back while the plans swap under it, as scheduleAppointment
   * does on an S14 (or an A08 corrects their dates): the stored check takes the change, its state
   * unchanged. Gives what each write states of the Coverage (`seen`), the order unless said.
   */
  async function swapDuringFirstWrite(
    key: string,
    answer: Parameters<typeof startWorkerRig>[0]['answer'],
    change: (coverage: CoverageInfo) => CoverageInfo = swapped,
    seen: (coverage: CoverageInfo) => string = (coverage) => coverage.order,
  ): Promise<string[]> {
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    const writtenOrders: string[] = [];
    rig = await startWorkerRig({
      answer,
      writer: (chart) => ({
        async write(check, outcome, refs, options) {
          writtenOrders.push(seen(check.coverage));
          if (writtenOrders.length === 1) await held;
          return chart.write(check, outcome, refs, options);
        },
      }),
    });
    await rig.addCheck(key);
    rig.worker.start();
    await until('the first write under way', async () => writtenOrders.length === 1);
    await rig.store.transaction(async (tx) => {
      const row = await tx.getCheck(key);
      if (!row) throw new Error('no check');
      await tx.putCheck({ ...row, check: { ...row.check, coverage: change(row.check.coverage) } });
    });
    release();
    return writtenOrders;
  }

  it('writes a check again whose order of benefits changed while its write was in flight, rather than marking the stale write done', async () => {
    const writtenOrders = await swapDuringFirstWrite('swapped', (req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: `ver-${req.url.length}` }));
    await until('written with the new order', async () => writtenOrders.at(-1) === 'secondary' && (await rig.check('swapped')).state === 'written', 10_000);
    expect(writtenOrders).toEqual(['primary', 'secondary']);
  });

  it("writes a check again whose plan's dates were corrected while its write was in flight", async () => {
    const written = await swapDuringFirstWrite(
      'redated',
      (req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: `ver-${req.url.length}` }),
      (coverage) => ({ ...coverage, period: { start: '2026-01-01', end: '2026-12-31' } }),
      (coverage) => coverage.period?.end ?? 'open',
    );
    await until('written with the corrected dates', async () => written.at(-1) === '2026-12-31' && (await rig.check('redated')).state === 'written', 10_000);
    expect(written).toEqual(['open', '2026-12-31']);
  });

  it('tells a person of a failure whose first write a swap of the plans overtook, once', async () => {
    const writtenOrders = await swapDuringFirstWrite('swapped-failure', (_req, res) =>
      json(res, 200, { ...(resultBody('failed-patient-not-found') as object), correlationId: 'ver-not-found' }),
    );
    await rig.reach('swapped-failure', 'needs-attention', 10_000);
    await sleep(200);
    expect(writtenOrders).toEqual(['primary', 'secondary']);
    expect(rig.events.filter((e) => e.name === 'needs-attention').map((e) => e.event.failureKind)).toEqual(['PatientNotFound']);
  });

  it('leaves a re-verification the service refused waiting for a person when the plans swap, rather than writing the last round\'s result again', async () => {
    let refuse = false;
    rig = await startWorkerRig({
      answer: (_req, res) => (refuse ? json(res, 401, { title: 'Unauthorized', status: 401 }) : json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-first' })),
    });
    await rig.addCheck('reverified');
    rig.worker.start();
    await rig.reach('reverified', 'written');
    refuse = true;
    // Its result gone stale before the visit: verified again, and the service refuses the key.
    await rig.store.transaction(async (tx) => {
      const row = await tx.getCheck('reverified');
      if (!row) throw new Error('no check');
      await tx.putCheck({ ...row, dueAt: new Date().toISOString() });
    });
    const refused = await rig.reach('reverified', 'needs-attention');
    expect(refused.lastError).toMatch(/^401/);
    const swapped = { ...refused.check, coverage: { ...refused.check.coverage, order: 'secondary' as const } };
    await rig.store.transaction((tx) =>
      scheduleAppointment(tx, { key: 'appt-swap', patientKey: refused.patientKey, dateOfService: swapped.dateOfService, status: 'booked', checks: [swapped], basis: {} }, { now: new Date(), policy: RIG_OPTIONS.policy }),
    );
    await sleep(300);
    expect(await rig.check('reverified')).toMatchObject({ state: 'needs-attention', round: 1, lastError: refused.lastError });
  });
});

describe('the worker when the chart refuses a write', () => {
  it('says so at warn with what the chart answered, as it does a refusal of the service, not only that the check needs attention', async () => {
    rig = await startWorkerRig({
      answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-refused' }),
      // A static token expired: the chart answers 401, and no renewed token is asked for.
      writer: () => ({ write: () => Promise.reject(new ChartWriteError('the FHIR server answered 401 to the search for what the chart holds: request (login)', { retryable: false, status: 401 })) }),
    });
    await rig.addCheck('refused');
    rig.worker.start();
    const row = await rig.reach('refused', 'needs-attention', 10_000);
    expect(row.lastError).toMatch(/^chart write refused: .*401/);
    const said = rig.warnings.filter((w) => w.msg.startsWith('chart write refused'));
    expect(said).toHaveLength(1);
    expect(said[0]?.fields).toMatchObject({ key: 'refused', status: 401, err: expect.stringContaining('answered 401') });
  });

  it('writes the result again at jobs retry once the chart takes it, without verifying it again', async () => {
    let refusing = true;
    rig = await startWorkerRig({
      answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-refused' }),
      writer: (chart) => ({
        write: (...args) => (refusing ? Promise.reject(new ChartWriteError('the FHIR server answered 403 to the transaction', { retryable: false, status: 403 })) : chart.write(...args)),
      }),
    });
    await rig.addCheck('refused');
    rig.worker.start();
    const refused = await rig.reach('refused', 'needs-attention', 10_000);
    expect(posts(rig.requests)).toHaveLength(1);
    // The permission fixed: the result the service gave is as good as it was, and one verification is what it cost.
    refusing = false;
    const retried = await retryCheck(rig.store, 'refused', new Date());
    expect(retried).toMatchObject({ state: 'result-stored', round: refused.round, externalId: refused.externalId, correlationId: 'ver-refused' });
    rig.worker.kick();
    await rig.reach('refused', 'written', 10_000);
    expect(posts(rig.requests)).toHaveLength(1);
    const written = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(written.map((r) => r.outcome)).toEqual(['complete']);
  });

  it('verifies again at jobs retry a check whose failure the chart refused, as --failure-kind asks once the credentials are fixed', async () => {
    let refusing = true;
    rig = await startWorkerRig({
      answer: (req, res) => {
        const { externalId } = JSON.parse(req.body) as { externalId: string };
        if (refusing) json(res, 200, { ...(resultBody('failed-invalid-credentials') as object), correlationId: 'ver-credentials', externalId });
        else json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-fixed' });
      },
      writer: (chart) => ({
        write: (...args) => (refusing ? Promise.reject(new ChartWriteError('the FHIR server answered 403 to the transaction', { retryable: false, status: 403 })) : chart.write(...args)),
      }),
    });
    await rig.addCheck('refused-failure');
    rig.worker.start();
    const refused = await rig.reach('refused-failure', 'needs-attention', 10_000);
    expect(refused.lastError).toMatch(/^chart write refused: /);
    // The credentials and the chart's permission fixed: the failure they caused says nothing any more.
    refusing = false;
    const retried = await retryCheck(rig.store, 'refused-failure', new Date());
    expect(retried).toMatchObject({ state: 'received', round: refused.round + 1 });
    rig.worker.kick();
    await rig.reach('refused-failure', 'written', 10_000);
    expect(posts(rig.requests)).toHaveLength(2);
    const written = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(written.map((r) => r.outcome)).toEqual(['complete']);
  });
});

describe('the worker ending the Coverage of a plan the PMS dropped', () => {
  it('tries again while the chart cannot take it, then ends it once and withdraws the check', async () => {
    const tries: boolean[] = [];
    rig = await startWorkerRig({
      answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-dropped' }),
      writer: (chart) => ({
        write: (...args) => chart.write(...args),
        async endCoverage(check, droppedAt) {
          if (tries.length === 0) {
            tries.push(false);
            throw new ChartWriteError('the FHIR server did not answer the write ending a Coverage in time', { retryable: true });
          }
          const ended = (await chart.endCoverage?.(check, droppedAt)) ?? false;
          tries.push(ended);
          return ended;
        },
      }),
    });
    // An HL7 check: its Patient and Coverage are this plugin's, found or made by identifier.
    const fhirCheck = checkRow('dropped').check;
    await rig.addCheck('dropped', { check: { ...fhirCheck, source: { kind: 'hl7', messageControlId: 'M-1', messageType: 'SIU^S12', receivedAt: fhirCheck.source.receivedAt } } });
    rig.worker.start();
    const written = await rig.reach('dropped', 'written', 10_000);
    const droppedAt = new Date().toISOString();
    await rig.store.transaction((tx) => tx.putCheck({ ...written, state: 'ending-coverage', dueAt: droppedAt, planDroppedAt: droppedAt }));
    const withdrawn = await rig.reach('dropped', 'cancelled', 10_000);
    expect(withdrawn.lastError).toBe('the PMS no longer sends this plan: its Coverage ended in the chart');
    expect(tries).toEqual([false, true]);
    expect(rig.warnings.map((w) => w.msg)).toContain('ending a Coverage in the chart failed; will retry');
    // Ended once: a second try finds it ended, and ends nothing.
    await rig.store.transaction((tx) => tx.putCheck({ ...withdrawn, state: 'ending-coverage', dueAt: new Date().toISOString(), planDroppedAt: droppedAt }));
    expect((await rig.reach('dropped', 'cancelled', 10_000)).lastError).toBe('the PMS no longer sends this plan: no active Coverage of it in the chart to end');
    expect(tries).toEqual([false, true, false]);
  });

  it('says the chart takes writes again only when a write reached it, not for a Coverage ending that sent nothing while it is down', async () => {
    let down = true;
    rig = await startWorkerRig({
      answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-down' }),
      writer: (chart) => ({
        write: (...args) => (down ? Promise.reject(new ChartWriteError('the FHIR server could not be reached (ECONNREFUSED)', { retryable: true })) : chart.write(...args)),
        // A FHIR-sourced check's Coverage is the EHR's: ending it sends nothing to the chart.
        endCoverage: (check, droppedAt) => chart.endCoverage?.(check, droppedAt) ?? Promise.resolve(false),
      }),
    });
    await rig.addCheck('waiting');
    rig.worker.start();
    await until('the chart said down', async () => rig.warnings.some((w) => w.msg === 'chart write failed; will retry'));
    const droppedAt = new Date().toISOString();
    await rig.addCheck('gone', { state: 'ending-coverage', planDroppedAt: droppedAt });
    await until('its ending done', async () => (await rig.check('gone')).state !== 'ending-coverage');
    expect(rig.infos.filter((i) => i.msg === 'the chart takes writes again')).toEqual([]);
    down = false;
    await rig.reach('waiting', 'written', 10_000);
    expect(rig.infos.filter((i) => i.msg === 'the chart takes writes again')).toHaveLength(1);
  });

  it('cancels the Coverage of a plan the PMS drops while the worker is dating it: the drop, its last word, is carried out next', async () => {
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    let reached: () => void = () => undefined;
    const dating = new Promise<void>((resolve) => (reached = resolve));
    const ends: Array<{ dated: boolean; ended: boolean }> = [];
    rig = await startWorkerRig({
      answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-dated' }),
      writer: (chart) => ({
        write: (...args) => chart.write(...args),
        async endCoverage(check, droppedAt) {
          // The first, dating it, reaches the chart only after the PMS has dropped the plan.
          if (ends.length === 0) (reached(), await held);
          const ended = (await chart.endCoverage?.(check, droppedAt)) ?? false;
          ends.push({ dated: check.coverage.period !== undefined, ended });
          return ended;
        },
      }),
    });
    // An HL7 patient of one sender (a namespace, not a URI), whose record speaks for their plans.
    const fhirCheck = checkRow('dated').check;
    const patient = { ...fhirCheck.patient, identifiers: [{ system: 'SC', type: 'MR', value: 'P-77' }] };
    await rig.addCheck('dated', { check: { ...fhirCheck, patient, source: { kind: 'hl7', messageControlId: 'M-1', messageType: 'SIU^S12', sendingFacility: 'BSD-MAIN', receivedAt: fhirCheck.source.receivedAt } } });
    rig.worker.start();
    const written = await rig.reach('dated', 'written', 10_000);
    // The PMS ends the plan the day before the visit (closingCheck), then drops it while the worker is dating its Coverage.
    const end = new Date(Date.parse(`${written.check.dateOfService}T00:00:00Z`) - 86_400_000).toISOString().slice(0, 10);
    const datedAt = new Date().toISOString();
    const dated = { ...written.check, coverage: { ...written.check.coverage, period: { end } } };
    await rig.store.transaction((tx) => tx.putCheck({ ...written, check: dated, state: 'ending-coverage', dueAt: datedAt, planDroppedAt: datedAt }));
    await dating;
    const { memberId: _m, ...person } = written.check.patient;
    const record = { patient: person, coverages: [], appointments: [], updatedAt: new Date().toISOString(), messageControlId: 'M-2' };
    await rig.store.transaction((tx) => endDroppedPlans(tx, written.patientKey, record, [written.check.subscriber.memberId], new Date(Date.parse(datedAt) + 1).toISOString()));
    release();
    await until('its check done', async () => (await rig.check('dated')).state === 'cancelled');
    expect((await rig.check('dated')).lastError).toBe('the PMS no longer sends this plan: its Coverage ended in the chart');
    expect(ends).toEqual([{ dated: true, ended: true }, { dated: false, ended: true }]);
    const coverage = (await searchFhir(rig.fhir, 'Coverage')).find((c) => (c as Coverage).period?.end === end) as Coverage | undefined;
    expect(coverage?.status).toBe('cancelled');
  });

  it('keeps the chart\'s answer while the store is away and records it once it is back: the Coverage is not ended a second time', async () => {
    const ends: boolean[] = [];
    let away = false;
    rig = await startWorkerRig({
      answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-ended-away' }),
      writer: (chart) => ({
        write: (...args) => chart.write(...args),
        async endCoverage(check, droppedAt) {
          const ended = (await chart.endCoverage?.(check, droppedAt)) ?? false;
          ends.push(ended);
          // Ended in the chart, and the store goes away before that is recorded.
          away = ends.length === 1;
          return ended;
        },
      }),
    });
    const fhirCheck = checkRow('ended-away').check;
    await rig.addCheck('ended-away', { check: { ...fhirCheck, source: { kind: 'hl7', messageControlId: 'M-1', messageType: 'SIU^S12', receivedAt: fhirCheck.source.receivedAt } } });
    rig.worker.start();
    const written = await rig.reach('ended-away', 'written', 10_000);
    const { store } = rig;
    const read = store.transaction.bind(store);
    // Its first call after the end fails as a store out of reach does; the store answers the next.
    store.transaction = ((work) => {
      if (!away) return read(work);
      away = false;
      return Promise.reject(new StoreUnavailableError(new Error('Connection terminated unexpectedly')));
    }) as typeof store.transaction;
    const droppedAt = new Date().toISOString();
    await read((tx) => tx.putCheck({ ...written, state: 'ending-coverage', dueAt: droppedAt, planDroppedAt: droppedAt }));
    const withdrawn = await rig.reach('ended-away', 'cancelled', 10_000);
    expect(withdrawn.lastError).toBe('the PMS no longer sends this plan: its Coverage ended in the chart');
    expect(ends).toEqual([true]);
  });

  it('ends the Coverage a first write under way made when the patient turns self-pay meanwhile, rather than leave it active', async () => {
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    const ends: boolean[] = [];
    rig = await startWorkerRig({
      answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-midwrite' }),
      writer: (chart) => ({
        async write(...args) {
          await held;
          return chart.write(...args);
        },
        async endCoverage(check, droppedAt) {
          const ended = (await chart.endCoverage?.(check, droppedAt)) ?? false;
          ends.push(ended);
          return ended;
        },
      }),
    });
    const fhirCheck = checkRow('midwrite').check;
    // A patient of one sender (a local assigning authority): their record holds every plan they have.
    const check = {
      ...fhirCheck,
      patient: { ...fhirCheck.patient, identifiers: [{ system: 'SC', value: 'P-1', type: 'MR' }] },
      source: { kind: 'hl7' as const, messageControlId: 'M-1', messageType: 'SIU^S12', sendingFacility: 'BSD', receivedAt: fhirCheck.source.receivedAt },
    };
    const patientKey = 'hl7|BSD|MR|1';
    const { memberId: _m, ...patient } = check.patient;
    await rig.addCheck('midwrite', { check, patientKey });
    await rig.store.transaction((tx) =>
      tx.putAppointment({ key: 'appt-midwrite', patientKey, dateOfService: check.dateOfService, status: 'booked', checkKeys: ['midwrite'], basis: {}, updatedAt: new Date().toISOString() }),
    );
    rig.worker.start();
    await rig.reach('midwrite', 'result-stored');
    // An A08 while the first write waits on the chart: the patient pays for themselves now.
    const now = new Date();
    await rig.store.transaction(async (tx) => {
      await tx.putPatient(patientKey, { patient, coverages: [], insuranceKnown: true, appointments: [], updatedAt: now.toISOString(), messageControlId: 'M-2' });
      await scheduleAppointment(tx, { key: 'appt-midwrite', patientKey, dateOfService: check.dateOfService, status: 'self-pay', checks: [], basis: {} }, { now, policy: RIG_OPTIONS.policy });
    });
    release();
    const withdrawn = await rig.reach('midwrite', 'cancelled', 10_000);
    expect(withdrawn.lastError).toBe('the PMS no longer sends this plan: its Coverage ended in the chart');
    expect(ends).toEqual([true]);
  });

  it('sends a visit of the plan stated again at once, not waiting for the answer a check withdrawn for the plan\'s drop still takes, which it would not reuse', async () => {
    rig = await startWorkerRig({
      // Long: waiting for the withdrawn check's answer, the restated plan's visit would still be waiting when looked at.
      worker: { webhookDeadlineMs: 10 * 60_000 },
      answer: (_req, res) => json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-restated' }),
    });
    const droppedAt = new Date().toISOString();
    // Its request at the service when the plan was dropped: its Coverage ended, it is withdrawn.
    await rig.addCheck('dropped', { state: 'ending-coverage', coverageFingerprint: 'one-plan', submittedAt: droppedAt, planDroppedAt: droppedAt });
    rig.worker.start();
    await rig.reach('dropped', 'cancelled');
    await rig.addCheck('restated', { coverageFingerprint: 'one-plan' });
    const restated = await until('the restated plan\'s visit sent, or waiting', async () => {
      const row = await rig.check('restated');
      return (row.state === 'written' || row.lastError?.startsWith('waiting for the verification')) && row;
    });
    expect(restated.state).toBe('written');
    expect(posts(rig.requests)).toHaveLength(1);
  });
});

describe('a verification the service completes after its Partial', () => {
  const deliver = (body: object, webhookId: string) =>
    ingestWebhook(rig.store, rig.worker, { webhookId, rawBody: JSON.stringify(body), receivedAt: new Date(), outcome: toOutcome(body) }, new Date());

  it('updates the chart\'s Partial response in place with the Completed, and leaves a Completed as it is when a Partial comes after it', async () => {
    // Without the fixture's externalId: the answer to a send is checked against the one sent.
    const partial = { ...(resultBody('partial') as object), correlationId: 'ver-gaps', externalId: undefined };
    rig = await startWorkerRig({ answer: (_req, res) => json(res, 200, partial) });
    await rig.addCheck('gaps');
    rig.worker.start();
    const written = await rig.reach('gaps', 'written');
    const responses = async () => ((await searchFhir(rig.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[]).map((r) => [r.id, r.outcome]);
    const [first] = await responses();
    expect(first?.[1]).toBe('partial');

    const completed = { ...(resultBody('completed-minimal') as object), correlationId: 'ver-gaps', externalId: written.externalId };
    expect(await deliver(completed, 'msg_completed')).toMatchObject({ status: 'applied' });
    rig.worker.kick();
    await until('the Completed written', async () => (await responses())[0]?.[1] === 'complete');
    expect((await rig.reach('gaps', 'written')).correlationId).toBe('ver-gaps');
    expect(await responses()).toEqual([[first?.[0], 'complete']]);

    // The Partial again (a retried delivery of the earlier one, say) does not take the gaps back.
    expect(await deliver({ ...partial, externalId: written.externalId }, 'msg_partial_again')).toMatchObject({ status: 'ignored' });
    // Nor does another verification's Completed.
    expect(await deliver({ ...completed, correlationId: 'ver-other' }, 'msg_other')).toMatchObject({ status: 'ignored' });
    expect(await responses()).toEqual([[first?.[0], 'complete']]);
    expect(posts(rig.requests)).toEqual(['/v2/insurance-verifications']);
  });

  it('takes the Completed that comes while the Partial is still on its way to the chart, and writes it after', async () => {
    const partial = { ...(resultBody('partial') as object), correlationId: 'ver-gaps', externalId: undefined };
    const held = gate();
    let writes = 0;
    rig = await startWorkerRig({
      answer: (_req, res) => json(res, 200, partial),
      writer: (chart) => ({
        ...chart,
        async write(...args) {
          if (++writes === 1) await held.opened;
          return chart.write(...args);
        },
      }),
    });
    await rig.addCheck('gaps');
    rig.worker.start();
    await until('the Partial being written', async () => writes === 1);
    const externalId = (await rig.store.transaction((tx) => tx.getCheck('gaps')))?.externalId;
    const completed = { ...(resultBody('completed-minimal') as object), correlationId: 'ver-gaps', externalId };
    try {
      expect(await deliver(completed, 'msg_completed_early')).toMatchObject({ status: 'applied' });
    } finally {
      held.open();
    }
    const responses = async () => ((await searchFhir(rig.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[]).map((r) => r.outcome);
    await until('the Completed written after the Partial', async () => writes === 2);
    await rig.reach('gaps', 'written');
    expect(await responses()).toEqual(['complete']);
  });
});

describe('the worker and the rate limits', () => {
  it("draws a poll from the service's bucket alone, not its portal's: a poll reads the service, and the portal's sends wait for none of it", async () => {
    rig = await startWorkerRig({
      worker: { asyncEnabled: true, webhookDeadlineMs: 20, rateLimits: { perSecond: 1000, perPortalPerSecond: 1000 } },
      answer: (req, res) => (req.method === 'POST' ? json(res, 202, { correlationId: 'ver-polled', status: 'Pending' }) : json(res, 200, { ...(resultBody('completed-minimal') as object), correlationId: 'ver-polled' })),
    });
    const drawn: string[] = [];
    const take = rig.store.takeRateToken.bind(rig.store);
    rig.store.takeRateToken = (bucket, perSecond, now) => (drawn.push(bucket), take(bucket, perSecond, now));
    await rig.addCheck('polled');
    rig.worker.start();
    await rig.reach('polled', 'written', 5000);
    expect(gets(rig.requests).length).toBeGreaterThan(0);
    expect(drawn.filter((b) => b.startsWith('portal:'))).toEqual(['portal:portal-a']);
    expect(drawn.filter((b) => b === 'service')).toHaveLength(posts(rig.requests).length + gets(rig.requests).length);
  });
});
