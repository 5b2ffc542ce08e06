import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { CoverageEligibilityResponse } from 'fhir/r4';
import { json } from '../support/http-server';
import { searchFhir, until } from './harness';
import { checkRow } from './job-store-contract';
import { posts, resultBody, startWorkerRig, type WorkerRig } from './worker-rig';
import { dateBackKept, forgetOutageStart, keepOutageStart, keptOutages } from '../../src/sync/outage-record';
import { OUTAGE_AFTER, ServiceOutage } from '../../src/sync/service-outage';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { ChartWriteError } from '../../src/sync/chart-errors';
import { retryCheck } from '../../src/sync/operations';
import type { EligibilityWriter } from '../../src/sync/write-back';
import type { PayerResolver } from '../../src/domain';
import { ServiceError } from '../../src/verification/errors';

/**
 * The verification service away for longer than a check's attempts last: the checks wait for it in
 * the store, one call at a time tries it, and once it answers each is verified and written once.
 * A check whose visit is today is not held: the front desk is told it could not be verified, in
 * time to call the payer.
 */

const failure = (status: number | undefined, retryAfterMs?: number) =>
  new ServiceError({ operation: 'verify', ...(status !== undefined && { status }), problem: { title: 'x' }, ...(status === undefined && { code: 'ECONNREFUSED' }), ...(retryAfterMs !== undefined && { retryAfterMs }) });

describe('ServiceOutage', () => {
  let clock = 0;
  const log = { info: jest.fn(), warn: jest.fn() };
  const watch = () => new ServiceOutage({ baseMs: 100, maxMs: 300_000 }, () => clock, log);
  beforeEach(() => {
    clock = 1_000_000;
    jest.clearAllMocks();
  });

  it('is out after failures in a row that say so, and an answer between starts the count again', () => {
    const w = watch();
    for (let i = 1; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `check-${i}`, 'a');
    w.answered('a', 'answering-a');
    for (let i = 1; i < OUTAGE_AFTER; i++) w.failed(failure(undefined), 'go', `check-${i}`, 'a');
    expect(w.since).toBeUndefined();
    expect(w.admit(false, 'a', 'check-probe')).toBe('go');
    w.failed(failure(504), 'go', 'check-last', 'a');
    expect(w.since).toEqual(new Date(clock));
    expect(log.warn).toHaveBeenCalledTimes(1);
  });

  it('takes one check failing again and again, with no other sent, for that check\'s and not the service', () => {
    const w = watch();
    for (let i = 0; i < 3 * OUTAGE_AFTER; i++) w.failed(failure(500), 'go', 'choked', 'a');
    expect(w.covers('a')).toBe(false);
    w.failed(failure(503), 'go', 'other', 'a');
    expect(w.covers('a')).toBe(true);
  });

  it('takes a 4xx or an unreadable answer for the service answering, and a 429 for neither', () => {
    const w = watch();
    for (let i = 1; i < OUTAGE_AFTER; i++) w.failed(failure(500), 'go', `check-${i}`, 'a');
    w.failed(failure(429), 'go', 'check-last', 'a');
    expect(w.covers('a')).toBe(false);
    w.failed(failure(422), 'go', 'check-last', 'a');
    for (let i = 1; i < OUTAGE_AFTER; i++) w.failed(failure(500), 'go', `check-${i}`, 'a');
    expect(w.covers('a')).toBe(false);
    w.failed(new ServiceError({ operation: 'verify', code: 'unreadable_answer', problem: {} }), 'go', 'check-last', 'a');
    for (let i = 1; i < OUTAGE_AFTER; i++) w.failed(failure(500), 'go', `check-${i}`, 'a');
    expect(w.covers('a')).toBe(false);
    w.failed(new Error('a fault of this program'), 'go', 'check-last', 'a');
    w.failed(failure(502), 'go', 'check-last', 'a');
    expect(w.covers('a')).toBe(true);
  });

  it('lets one call at a time try it, each later than the last, up to a minute, no sooner than a Retry-After (a 429\'s too)', () => {
    const w = watch();
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `check-${i}`, 'a');
    expect(w.admit(false, 'a', 'check-probe')).toBe('hold');
    // A visit today goes all the same.
    expect(w.admit(true, 'a', 'check-probe')).toBe('go');
    const waits: number[] = [];
    for (let i = 0; i < 12; i++) {
      const from = clock;
      while (w.admit(false, 'a', 'check-probe') !== 'probe') clock += 10;
      waits.push(clock - from);
      expect(w.admit(false, 'a', 'check-probe')).toBe('hold');
      w.failed(failure(503), 'probe', 'check-probe', 'a');
      w.done('probe', 'check-probe');
    }
    expect(waits.slice(0, 5)).toEqual([100, 200, 400, 800, 1600]);
    expect(waits.slice(-2)).toEqual([60_000, 60_000]);
    // The calls that were under way fail too: they put the next probe off no further.
    const next = clock + 60_000;
    w.failed(failure(503), 'go', 'check-last', 'a');
    w.failed(failure(undefined), 'go', 'check-last', 'a');
    clock = next;
    expect(w.admit(false, 'a', 'check-probe')).toBe('probe');
    // A 429 ends nothing, but the next probe waits as long as it asks too.
    for (const status of [503, 429]) {
      w.failed(failure(status, 120_000), 'probe', 'check-probe', 'a');
      w.done('probe', 'check-probe');
      clock += 60_000;
      expect([status, w.admit(false, 'a', 'check-probe')]).toEqual([status, 'hold']);
      clock += 60_000;
      expect(w.admit(false, 'a', 'check-probe')).toBe('probe');
    }
    w.answered('a', 'answering-a');
    w.done('probe', 'check-probe');
    expect(w.covers('a')).toBe(false);
    expect(w.admit(false, 'a', 'check-probe')).toBe('go');
    expect(log.info).toHaveBeenCalledWith(expect.objectContaining({ outageMs: expect.any(Number) }), expect.stringMatching(/answers again/));
  });
  /** What is out: the whole service since, and the portals out on their own. */
  const out = (w: ServiceOutage) => [w.since, w.portalsOut.map((p) => p.portal)];

  it('takes failures all of one payer portal\'s calls for that portal out: the others go, and only its answer ends it', () => {
    const back = jest.fn();
    const w = new ServiceOutage({ baseMs: 100, maxMs: 300_000 }, () => clock, log, { back });
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `check-${i}`, 'a');
    expect(out(w)).toEqual([undefined, ['a']]);
    expect(w.outFor('a')).toEqual(new Date(clock));
    expect(w.admit(false, 'a', 'check-1')).toBe('hold');
    expect(w.admit(false, 'b', 'check-b')).toBe('go');
    // A poll reads the service, not the portal.
    expect(w.admit(false, undefined, 'check-1')).toBe('go');
    // Another portal answering says nothing of this one.
    w.answered('b', 'answering-b');
    expect(w.covers('a')).toBe(true);
    expect(back).not.toHaveBeenCalled();
    clock += 100;
    expect(w.admit(false, 'a', 'check-1')).toBe('probe');
    expect(w.admit(false, 'a', 'check-2')).toBe('hold');
    w.answered('a', 'answering-a');
    w.done('probe', 'check-1');
    expect([...out(w), w.covers('a')]).toEqual([undefined, [], false]);
    expect(back).toHaveBeenCalledWith(new Date(clock - 100), 'a');
  });

  it('counts an answer saying a payer portal is away (SiteMaintenance) as that portal failing: out after OUTAGE_AFTER of more than one check, its probes so answered put off, any other answer ending it', () => {
    const back = jest.fn();
    const w = new ServiceOutage({ baseMs: 100, maxMs: 300_000 }, () => clock, log, { back });
    for (let i = 0; i < OUTAGE_AFTER - 1; i++) w.portalAway('go', `check-${i}`, 'a', 'SiteMaintenance');
    expect(w.covers('a')).toBe(false);
    // One check alone answered so, again and again, is that check's (its attempts), not the portal's.
    const lone = watch();
    for (let i = 0; i < OUTAGE_AFTER * 2; i++) lone.portalAway('go', 'only', 'a', 'SiteMaintenance');
    expect(lone.covers('a')).toBe(false);
    w.portalAway('go', 'check-9', 'a', 'SiteMaintenance');
    expect(out(w)).toEqual([undefined, ['a']]);
    expect(log.warn).toHaveBeenCalledWith(expect.objectContaining({ failure: 'SiteMaintenance', portalId: 'a', failures: OUTAGE_AFTER }), expect.stringMatching(/one payer portal/));
    expect(w.admit(false, 'b', 'check-b')).toBe('go');
    clock += 100;
    expect(w.admit(false, 'a', 'check-1')).toBe('probe');
    w.portalAway('probe', 'check-1', 'a', 'SiteMaintenance');
    w.done('probe', 'check-1');
    clock += 100;
    expect(w.admit(false, 'a', 'check-2')).toBe('hold');
    clock += 100;
    expect(w.admit(false, 'a', 'check-2')).toBe('probe');
    w.answered('a', 'check-2');
    w.done('probe', 'check-2');
    expect([...out(w), w.covers('a')]).toEqual([undefined, [], false]);
    expect(back).toHaveBeenCalledWith(new Date(clock - 300), 'a');
    // None left out: a portal's maintenance is no member id's, and each of them counts again.
    for (let i = 0; i < OUTAGE_AFTER; i++) w.portalAway('go', `check-${i}`, 'a', 'SiteMaintenance');
    expect(w.covers('a')).toBe(true);
  });

  it('never takes payer portals away for the service out: it answered them, which starts the service\'s own row again', () => {
    const w = watch();
    for (let i = 0; i < OUTAGE_AFTER; i++) {
      w.portalAway('go', `a-${i}`, 'a', 'SiteMaintenance');
      w.portalAway('go', `b-${i}`, 'b', 'SiteMaintenance');
    }
    expect(out(w)).toEqual([undefined, ['a', 'b']]);
    const v = watch();
    for (let i = 0; i < OUTAGE_AFTER - 1; i++) v.failed(failure(503), 'go', `c-${i}`, 'c');
    // A call's answer (the worker tells it answered first); a webhook's says nothing of the service's calls.
    v.answered(undefined, 'm-0');
    v.portalAway('go', 'm-0', 'm', 'SiteMaintenance');
    v.failed(failure(503), 'go', 'd-0', 'd');
    expect(out(v)).toEqual([undefined, []]);
  });

  it('ends a portal\'s outage, not the whole service\'s, by its result the service delivered (portalAnswered): its webhooks may come while its API fails every call', () => {
    const w = watch();
    for (let i = 0; i < OUTAGE_AFTER; i++) w.portalAway('go', `a-${i}`, 'a', 'SiteMaintenance');
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `b-${i}`, i % 2 === 0 ? 'b' : 'c');
    expect(out(w)).toEqual([new Date(clock), ['a']]);
    w.portalAnswered('b', 'b-0');
    w.portalAnswered('a', 'a-0');
    expect(out(w)).toEqual([new Date(clock), []]);
  });

  it('takes a request accepted for an asynchronous verification for the service answering, not its portal: the portal\'s count goes on, its outage stays, a probe so taken puts the next off, and the result ends it', () => {
    const w = watch();
    for (let i = 0; i < OUTAGE_AFTER - 1; i++) w.portalAway('go', `check-${i}`, 'a', 'SiteMaintenance');
    w.accepted('go', 'check-x', 'a');
    w.portalAway('go', 'check-y', 'a', 'SiteMaintenance');
    expect(out(w)).toEqual([undefined, ['a']]);
    clock += 100;
    expect(w.admit(false, 'a', 'check-y')).toBe('probe');
    w.accepted('probe', 'check-y', 'a');
    w.done('probe', 'check-y');
    expect(w.covers('a')).toBe(true);
    expect(w.admit(false, 'a', 'check-z')).toBe('hold');
    // Its result, by webhook or poll: anything but the portal away.
    w.answered('a', 'check-y');
    expect(w.covers('a')).toBe(false);
  });

  it('ends a portal\'s outage another instance found over, unless this worker found it out too lately for the store to hold it yet', () => {
    const back = jest.fn();
    const w = new ServiceOutage({ baseMs: 100, maxMs: 300_000 }, () => clock, log, { back });
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `check-${i}`, 'a');
    // Kept in the store as found.
    for (const { portal, since } of w.portalsOut) w.kept(portal, since);
    w.endedElsewhere('a', 5000);
    expect(out(w)).toEqual([undefined, ['a']]);
    clock += 5000;
    w.endedElsewhere('a', 5000);
    expect([...out(w), w.covers('a')]).toEqual([undefined, [], false]);
    // Those given up in it were sent again by the instance that found it back.
    expect(back).not.toHaveBeenCalled();
    expect(log.info).toHaveBeenCalledWith(expect.objectContaining({ portalId: 'a' }), 'the verification service answers again for the payer portal, as another instance found; its checks held go on');
  });

  it('keeps a portal\'s outage the store never held (its keeping failed): its absence there says no other instance ended it', () => {
    const w = watch();
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `check-${i}`, 'a');
    clock += 5000;
    w.endedElsewhere('a', 5000);
    // Another start kept, not this outage's.
    w.kept('a', new Date(clock));
    w.endedElsewhere('a', 5000);
    expect(out(w)).toEqual([undefined, ['a']]);
  });

  it('finds one portal out on a busy day: the other portals\' answers between its failures do not start its count again', () => {
    const w = watch();
    for (let i = 0; i < OUTAGE_AFTER; i++) {
      w.failed(failure(503), 'go', `check-${i % 3}`, 'a');
      w.answered('b', 'answering-b');
    }
    expect(out(w)).toEqual([undefined, ['a']]);
    expect(w.admit(false, 'b', 'check-b')).toBe('go');
    // Its own answer does: one failing alone again after it is not the portal out.
    const v = watch();
    for (let i = 0; i < 2 * OUTAGE_AFTER; i++) {
      v.failed(failure(503), 'go', `check-${i % 3}`, 'a');
      if (i % 2) v.answered('a', 'answering-a');
    }
    expect(out(v)).toEqual([undefined, []]);
  });

  it('does not take failures further apart than ten minutes for a row: a check failing now and then on a quiet portal is not an outage', () => {
    const w = watch();
    for (let i = 0; i < OUTAGE_AFTER - 1; i++) {
      w.failed(failure(503), 'go', 'choked', 'a');
      clock += 3_600_000;
    }
    w.failed(failure(503), 'go', 'another', 'a');
    expect(out(w)).toEqual([undefined, []]);
    for (let i = 0; i < OUTAGE_AFTER - 1; i++) w.failed(failure(503), 'go', `check-${i}`, 'a');
    expect(out(w)).toEqual([undefined, ['a']]);
    expect(w.outFor('a')).toEqual(new Date(clock));
    // Three minutes apart, twelve in all: each within ten of the one before, a row.
    const v = watch();
    const start = clock;
    for (let i = 0; i < OUTAGE_AFTER; i++) {
      v.failed(failure(503), 'go', `check-${i}`, 'b');
      clock += 180_000;
    }
    expect(v.outFor('b')).toEqual(new Date(start));
  });

  it('takes a portal\'s failures for that portal out, not the service, whatever failed before its row started again', () => {
    // Another portal's failure, or a poll's, more than ten minutes before.
    for (const before of ['b', undefined]) {
      const w = watch();
      w.failed(failure(503), 'go', 'before', before);
      clock += 11 * 60_000;
      for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `a-${i}`, 'a');
      expect([before, ...out(w)]).toEqual([before, undefined, ['a']]);
    }
    // A poll's failure in the row that found portal a out, the row across portals started again without it.
    const w = watch();
    for (let i = 0; i < OUTAGE_AFTER - 1; i++) {
      w.failed(failure(503), 'go', `a-${i}`, 'a');
      w.answered('c', 'answering-c');
    }
    w.failed(failure(503), 'go', 'polled', undefined);
    w.failed(failure(503), 'go', 'a-last', 'a');
    expect(out(w)).toEqual([undefined, ['a']]);
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `b-${i % 2}`, 'b');
    expect(out(w)).toEqual([undefined, ['a', 'b']]);
  });

  it('takes failures of two portals, of a call of no portal, or a request that never reached the service for the service out', () => {
    const of = (portals: (string | undefined)[], err = failure(503)) => {
      const w = watch();
      portals.forEach((portal, i) => w.failed(err, 'go', `check-${i}`, portal));
      return out(w);
    };
    expect(of(['a', 'a', 'a', 'a', 'b'])).toEqual([new Date(clock), []]);
    expect(of(['a', 'a', undefined, 'a', 'a'])).toEqual([new Date(clock), []]);
    // Refused: ECONNREFUSED, nothing sent.
    expect(of(['a', 'a', 'a', 'a', 'a'], failure(undefined))).toEqual([new Date(clock), []]);
    // Timed out waiting for an answer: the portal's verification may be what is slow.
    const timedOut = new ServiceError({ operation: 'verify', code: 'UND_ERR_HEADERS_TIMEOUT', problem: { title: 'Timed out' } });
    expect(of(['a', 'a', 'a', 'a', 'a'], timedOut)).toEqual([undefined, ['a']]);
  });

  it('keeps two portals out on their own at once while a third answers: each held, tried and ended by its own answer', () => {
    const went = jest.fn();
    const back = jest.fn();
    const w = new ServiceOutage({ baseMs: 100, maxMs: 300_000 }, () => clock, log, { went, back });
    const startA = clock;
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `a-${i}`, 'a');
    clock += 1000;
    // b's calls fail right after, with no answer between, and again after c's answer: a is out already, so this is b's row, not two portals'.
    for (let i = 0; i < OUTAGE_AFTER; i++) {
      w.failed(failure(503), 'go', `b-${i}`, 'b');
      if (i === 2) w.answered('c', 'answering-c');
    }
    expect(out(w)).toEqual([undefined, ['a', 'b']]);
    // a's first try is due (100 ms after it was found), b's not yet; one call at a time each.
    expect([w.admit(false, 'a', 'a-0'), w.admit(false, 'a', 'a-1'), w.admit(false, 'b', 'b-0'), w.admit(false, 'c', 'c-0')]).toEqual(['probe', 'hold', 'hold', 'go']);
    clock += 200;
    expect(w.admit(false, 'b', 'b-0')).toBe('probe');
    w.failed(failure(503), 'probe', 'a-0', 'a');
    w.done('probe', 'a-0');
    w.answered('b', 'answering-b');
    w.done('probe', 'b-0');
    expect(out(w)).toEqual([undefined, ['a']]);
    expect(back).toHaveBeenCalledWith(new Date(startA + 1000), 'b');
    w.answered('c', 'answering-c');
    expect(out(w)).toEqual([undefined, ['a']]);
    expect(went).toHaveBeenCalledTimes(2);
    expect(log.warn).toHaveBeenCalledTimes(2);
    expect(w.outFor('a')).toEqual(new Date(startA));
  });

  it('holds every call while the whole service is out, and ends it and a portal out on its own, each told apart, when a call of that portal is answered', () => {
    const back = jest.fn();
    const w = new ServiceOutage({ baseMs: 100, maxMs: 300_000 }, () => clock, log, { back });
    const startA = clock;
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `a-${i}`, 'a');
    clock += 1000;
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(undefined), 'go', `c-${i}`, 'c');
    expect(out(w)).toEqual([new Date(clock), ['a']]);
    expect([w.admit(false, 'c', 'c-9'), w.admit(false, undefined, 'c-9')]).toEqual(['hold', 'hold']);
    w.answered('a', 'answering-a');
    expect(out(w)).toEqual([undefined, []]);
    // Told apart: the checks given up since the service went are every portal's, those since a went only a's.
    expect(back.mock.calls).toEqual([[new Date(startA + 1000), undefined], [new Date(startA), 'a']]);
  });

  it('tries a portal out on its own with its own calls while the whole service is out, so that the service\'s try is not one bound to fail', () => {
    const w = watch();
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `a-${i}`, 'a');
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(undefined), 'go', `c-${i}`, 'c');
    expect(out(w)).toEqual([new Date(clock), ['a']]);
    clock += 150;
    // One try each: a's by one of a's checks, the service's by anyone else's.
    expect([w.admit(false, 'a', 'a-0'), w.admit(false, 'c', 'c-0'), w.admit(false, 'a', 'a-1'), w.admit(false, undefined, 'c-1')]).toEqual(['probe', 'probe', 'hold', 'hold']);
    // a failing again is a's: the service's try, still under way, is answered and ends its outage alone.
    w.failed(failure(503), 'probe', 'a-0', 'a');
    w.done('probe', 'a-0');
    expect(w.admit(false, 'a', 'a-1')).toBe('hold');
    w.answered('c', 'answering-c');
    w.done('probe', 'c-0');
    expect(out(w)).toEqual([undefined, ['a']]);
    expect(w.admit(false, 'c', 'c-1')).toBe('go');
  });

  it('keeps in the store the service\'s start and each portal\'s, forgets each apart, and reads a start kept as an ISO time alone as the service\'s', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'elig-outage-record-'));
    const store = SqliteJobStore.open(dir);
    try {
      const at = (minute: number) => new Date(Date.UTC(2026, 10, 25, 9, minute));
      await keepOutageStart(store, at(5), 'a');
      await keepOutageStart(store, at(3), 'a');
      await keepOutageStart(store, at(4), 'a');
      await keepOutageStart(store, at(7));
      await keepOutageStart(store, at(6), 'b');
      expect(await keptOutages(store)).toEqual({ service: at(7), portals: [{ portal: 'a', since: at(3) }, { portal: 'b', since: at(6) }] });
      expect(await forgetOutageStart(store, 'a')).toEqual(at(3));
      expect(await forgetOutageStart(store, 'a')).toBeUndefined();
      expect(await forgetOutageStart(store)).toEqual(at(7));
      expect(await keptOutages(store)).toEqual({ portals: [{ portal: 'b', since: at(6) }] });
      await forgetOutageStart(store, 'b');
      expect(await store.transaction((tx) => tx.getMeta('service-out-since'))).toBe('');
      // As the version before kept it.
      await store.transaction((tx) => tx.setMeta('service-out-since', at(1).toISOString()));
      expect(await keptOutages(store)).toEqual({ service: at(1), portals: [] });
      await store.transaction((tx) => tx.setMeta('service-out-since', '{"portals":{"a":"yesterday"}}'));
      expect(await keptOutages(store)).toEqual({ portals: [] });
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('starts each portal\'s count again once the service answers after it was out: their failures meanwhile were the service\'s', () => {
    const went = jest.fn();
    const w = new ServiceOutage({ baseMs: 100, maxMs: 300_000 }, () => clock, log, { went });
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `check-${i}`, i % 2 ? 'a' : 'b');
    expect(out(w)).toEqual([new Date(clock), []]);
    // Its probes of portal a fail for a while; one of portal b's is answered.
    for (let i = 0; i < OUTAGE_AFTER; i++) {
      clock += 60_000;
      w.failed(failure(503), 'probe', `check-${i}`, 'a');
    }
    w.answered('b', 'answering-b');
    expect(w.since).toBeUndefined();
    // One of a's checks, held until now, fails once: not a row.
    clock += 1000;
    w.failed(failure(503), 'go', 'check-held', 'a');
    expect(out(w)).toEqual([undefined, []]);
    expect(went).toHaveBeenCalledTimes(1);
  });

  it('leaves out of the rows the checks that failed in an outage another check\'s answer ended, until each is answered: a member id its portal chokes on does not find it out again and again', () => {
    const w = watch();
    const failAll = (keys: string[]) => keys.forEach((key) => w.failed(failure(503), 'go', key, 'a'));
    const bad = ['bad-0', 'bad-1', 'bad-2', 'bad-3'];
    failAll([...bad, 'bad-0']);
    expect(w.portalOut('a')).toBe(true);
    clock += 100;
    expect(w.admit(false, 'a', 'bad-4')).toBe('probe');
    w.failed(failure(503), 'probe', 'bad-4', 'a');
    w.done('probe', 'bad-4');
    clock += 60_000;
    expect(w.admit(false, 'a', 'good')).toBe('probe');
    w.answered('a', 'good');
    w.done('probe', 'good');
    // Those that found it and the probe that failed fail on, round after round: their own failures.
    for (let round = 0; round < 3; round++) failAll([...bad, 'bad-4']);
    expect(w.anyOut).toBe(false);
    // The one that ended it is counted as any other: with one of those answered since, they are a row.
    w.answered('a', 'bad-1');
    failAll(['good', 'bad-1', 'bad-0', 'good', 'bad-1']);
    expect(w.anyOut).toBe(false);
    w.failed(failure(503), 'go', 'good', 'a');
    expect(w.portalOut('a')).toBe(true);
  });

  it('lets the worker try the whole service itself once no check has come to try it for two waits past its try\'s time, one call at a time, and never a portal out on its own', () => {
    const back = jest.fn();
    const w = new ServiceOutage({ baseMs: 100, maxMs: 300_000 }, () => clock, log, { back });
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `check-${i}`, i % 2 ? 'a' : 'b');
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `check-${i}`, 'c');
    expect(out(w)).toEqual([new Date(clock), []]);
    // Its try is due in 100 ms, a wait is 200 ms then: nobody has come 500 ms on.
    clock += 499;
    expect(w.tryItself('')).toBe(false);
    clock += 1;
    expect(w.tryItself('')).toBe(true);
    expect(w.tryItself('')).toBe(false);
    expect(w.admit(false, 'a', 'check-1')).toBe('hold');
    w.failed(failure(503), 'probe', '', undefined);
    w.done('probe', '');
    // A check held comes again before the next try (due in 200 ms, a wait 400 ms then): two waits past that, nobody has come since.
    clock += 100;
    expect(w.admit(false, 'a', 'check-1')).toBe('hold');
    clock += 899;
    expect(w.tryItself('')).toBe(false);
    clock += 1;
    expect(w.tryItself('')).toBe(true);
    w.answered(undefined, '');
    expect(w.since).toBeUndefined();
    expect(back).toHaveBeenCalledWith(expect.any(Date), undefined);

    const p = watch();
    for (let i = 0; i < OUTAGE_AFTER; i++) p.failed(failure(503), 'go', `check-${i}`, 'a');
    clock += 3_600_000;
    expect([p.portalOut('a'), p.tryItself('')]).toEqual([true, false]);
  });

  it('leaves none out once the whole service answers, and counts a refused call of one left out: the service away again minutes on is found by the same checks', () => {
    const w = watch();
    const checks = ['check-0', 'check-1', 'check-2', 'check-3', 'check-4'];
    checks.forEach((key, i) => w.failed(failure(503), 'go', key, i % 2 ? 'a' : 'b'));
    expect(w.since).toEqual(new Date(clock));
    clock += 100;
    w.answered('a', 'good');
    expect(w.anyOut).toBe(false);
    clock += 60_000;
    checks.forEach((key, i) => w.failed(failure(503), 'go', key, i % 2 ? 'a' : 'b'));
    expect(w.since).toEqual(new Date(clock));

    const p = watch();
    checks.forEach((key) => p.failed(failure(503), 'go', key, 'a'));
    clock += 100;
    p.answered('a', 'good');
    clock += 60_000;
    checks.forEach((key) => p.failed(failure(undefined), 'go', key, 'a'));
    expect(p.since).toEqual(new Date(clock));
  });

  it('gives the try of an outage to a check held that has not failed in it before those that have, while it is due back', () => {
    const w = watch();
    for (let i = 0; i <= OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `bad-${i % 4}`, 'a');
    expect(w.admit(false, 'a', 'good')).toBe('hold');
    const due = w.holdFor(0, 'a', 'good');
    clock += due;
    expect(w.admit(false, 'a', 'bad-1')).toBe('hold');
    expect(w.admit(false, 'a', 'good')).toBe('probe');
    w.failed(failure(503), 'probe', 'good', 'a');
    w.done('probe', 'good');
    // It failed too: those that failed before it try in turn.
    clock += 60_000;
    expect(w.admit(false, 'a', 'bad-1')).toBe('probe');
    w.failed(failure(503), 'probe', 'bad-1', 'a');
    w.done('probe', 'bad-1');
    // One held that never comes back (answered by webhook, cancelled) holds them back a second past its time at most.
    clock += w.holdFor(0, 'a', 'other') + 1000;
    expect(w.admit(false, 'a', 'bad-2')).toBe('hold');
    clock += 1;
    expect(w.admit(false, 'a', 'bad-2')).toBe('probe');
  });

  it('counts again, a day on, a check left out of the rows', () => {
    const w = watch();
    const bad = ['bad-0', 'bad-1', 'bad-2', 'bad-3', 'bad-4'];
    bad.forEach((key) => w.failed(failure(503), 'go', key, 'a'));
    clock += 100;
    w.answered('a', 'good');
    clock += 24 * 60 * 60_000 - 1;
    bad.forEach((key) => w.failed(failure(503), 'go', key, 'a'));
    expect(w.anyOut).toBe(false);
    clock += 1;
    bad.forEach((key) => w.failed(failure(503), 'go', key, 'a'));
    expect(w.portalOut('a')).toBe(true);
  });

  it('moves what it timed by a clock since stepped back an hour back with it: its next probe comes at its wait, and its end sends again the checks given up since it began', () => {
    const back = jest.fn();
    const w = new ServiceOutage({ baseMs: 100, maxMs: 300_000 }, () => clock, log, { back });
    clock += 3_600_000;
    const began = clock;
    for (let i = 0; i < OUTAGE_AFTER; i++) w.failed(failure(503), 'go', `check-${i}`, 'a');
    expect(w.admit(false, 'a', 'check-probe')).toBe('hold');
    // Set right, an hour back: a check given up in the outage meanwhile is dated back by no more than the step.
    clock -= 3_600_000;
    w.steppedBack(3_600_000);
    clock += 100;
    expect(w.admit(false, 'a', 'check-probe')).toBe('probe');
    w.answered('a', 'check-probe');
    expect(back).toHaveBeenCalledWith(new Date(began - 3_600_000), 'a');
  });

  it('dates back the outages the store keeps as begun after the clock, by the step, and leaves the others', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'elig-kept-'));
    const store = SqliteJobStore.open(dir);
    try {
      const now = new Date();
      await keepOutageStart(store, new Date(now.getTime() + 3_000_000));
      await keepOutageStart(store, new Date(now.getTime() - 60_000), 'before');
      await keepOutageStart(store, new Date(now.getTime() + 600_000), 'ahead');
      await dateBackKept(store, now, 3_600_000);
      expect(await keptOutages(store)).toEqual({
        service: new Date(now.getTime() - 600_000),
        portals: [
          { portal: 'before', since: new Date(now.getTime() - 60_000) },
          { portal: 'ahead', since: new Date(now.getTime() - 3_000_000) },
        ],
      });
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a service away longer than the checks\' attempts last', () => {
  let rig: WorkerRig;
  afterEach(async () => {
    await rig.close();
  });

  const unavailable = { title: 'Unavailable', status: 503 };
  /** The attempts a check has used: the one call trying the service, under way, counts its send until it is held again, the send given back. */
  const attemptsUsed = (row: { state: string; attempts: number }) => row.attempts - (row.state === 'submitted' ? 1 : 0);
  const completed = (n: number) => ({ ...(resultBody('completed-minimal') as object), correlationId: `ver-${n}` });
  /** A day `days` from now, UTC. */
  const inDays = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);
  const addVisit = (key: string, dateOfService: string) => rig.addCheck(key, { check: { ...checkRow(key).check, dateOfService } });
  /** Each check once written or given up, and whether it was written or why not. */
  const settled = async (keys: string[], timeoutMs: number) => {
    const done = await Promise.all(keys.map((key) => until(`${key} done`, async () => {
      const row = await rig.check(key);
      return (row.state === 'written' || row.state === 'needs-attention') && row;
    }, timeoutMs)));
    return done.map((row) => [row.key, row.state, row.state === 'written' ? '' : row.lastError]);
  };
  /** A rig whose service answers 503 until `down` is false, then a result numbering each one it verified. */
  async function awayRig(writer?: (chart: EligibilityWriter) => EligibilityWriter) {
    const service = { down: true, verified: 0 };
    rig = await startWorkerRig({
      worker: { maxAttempts: 3, backoff: { baseMs: 50, maxMs: 400 } },
      answer: (_req, res) => (service.down ? json(res, 503, unavailable) : json(res, 200, completed(++service.verified))),
      ...(writer && { writer }),
    });
    return service;
  }

  it('holds a check whose send went unanswered (a gateway\'s 504) as sent: the service may have taken it, so a cancellation has it asked for under its externalId', async () => {
    rig = await startWorkerRig({ worker: { maxAttempts: 3, backoff: { baseMs: 50, maxMs: 400 } }, answer: (_req, res) => json(res, 504, { title: 'Gateway Timeout', status: 504 }) });
    const keys = Array.from({ length: 6 }, (_, i) => `unanswered-${i}`);
    for (const key of keys) await addVisit(key, inDays(10));
    rig.worker.start();
    await until('the service found out', async () => rig.worker.service.outFor('portal-a') !== undefined);
    // Held, not in hand (due later), and sent before: its externalId in a request the service may have taken.
    const heldAfterSend = async () => {
      const rows = await Promise.all(keys.map((key) => rig.check(key)));
      return rows.filter((row) => /waiting for it/.test(row.lastError ?? '') && Date.parse(row.dueAt ?? '') > Date.now() && rig.requests.some((r) => r.method === 'POST' && r.body.includes(row.externalId)));
    };
    const held = await until('checks held after a send', async () => ((await heldAfterSend()).length >= 2 ? heldAfterSend() : undefined));
    expect(held.map((row) => [row.state, row.submittedAt !== undefined])).toEqual(held.map(() => ['submitted', true]));
  });

  it('holds the batch in the store without using its attempts, tries it one call at a time, and verifies each once when it is back', async () => {
    const service = await awayRig();
    const keys = Array.from({ length: 8 }, (_, i) => `later-${i}`);
    for (const key of keys) await addVisit(key, inDays(10));
    rig.worker.start();
    await until('the service found out', async () => rig.worker.service.outFor('portal-a') !== undefined);
    const atOutage = posts(rig.requests).length;
    // Three attempts with backoff of 50 to 400 ms are used up within a second: three seconds hold each check many times over.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const duringOutage = posts(rig.requests).length - atOutage;
    // One call at a time, each 50, 100, 200, 400, 400... ms after the last: not each check at its own backoff.
    expect(duringOutage).toBeGreaterThanOrEqual(4);
    expect(duringOutage).toBeLessThanOrEqual(12);
    const held = await Promise.all(keys.map((key) => rig.check(key)));
    // Waiting to be sent, or the one call trying the service under way.
    expect(held.map((row) => row.state).filter((state) => state !== 'received' && state !== 'submitted')).toEqual([]);
    expect(held.every((row) => attemptsUsed(row) < 3)).toBe(true);
    expect(held.some((row) => /has not answered for payer portal portal-a since \d{4}-\d\d-\d\d \d\d:\d\d UTC; waiting for it, the wait using no attempt/.test(row.lastError ?? ''))).toBe(true);
    expect(rig.events).toEqual([]);

    service.down = false;
    for (const key of keys) await rig.reach(key, 'written', 8000);
    expect(rig.worker.service.outFor('portal-a')).toBeUndefined();
    const chart = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse?_count=50')) as CoverageEligibilityResponse[];
    expect(chart.map((r) => r.outcome)).toEqual(keys.map(() => 'complete'));
    // Each verified once: one answered send per check.
    expect(service.verified).toBe(keys.length);
    expect(rig.warnings.filter((w) => /not answering/.test(w.msg))).toHaveLength(1);
    expect(rig.infos.filter((i) => /answers again/.test(i.msg))).toHaveLength(1);
    // How many checks were held, each held many times over in three seconds.
    const checksHeld = (rig.infos.find((i) => /answers again/.test(i.msg))?.fields as { held: number }).held;
    expect(checksHeld).toBeGreaterThan(0);
    expect(checksHeld).toBeLessThanOrEqual(keys.length);
    expect(rig.events.filter((e) => e.name === 'failed')).toEqual([]);
  });

  /** Six visits to come and one today, the service away: the one today given up, the others held. */
  async function todayGivenUp() {
    const service = await awayRig();
    for (let i = 0; i < 6; i++) await addVisit(`later-${i}`, inDays(10));
    await addVisit('today', inDays(0));
    rig.worker.start();
    return { service, today: await rig.reach('today', 'needs-attention', 8000) };
  }

  it('does not hold a check whose visit is today: it is given up in time, the chart says so, and it is sent again once the service is back', async () => {
    const { service, today } = await todayGivenUp();
    expect(today.lastError).toMatch(/^NotVerified/);
    expect(rig.worker.service.outFor('portal-a')).toBeDefined();
    const later = await Promise.all(Array.from({ length: 6 }, (_, i) => rig.check(`later-${i}`)));
    expect(later.map((row) => row.state).filter((state) => state !== 'received' && state !== 'submitted')).toEqual([]);
    const told = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    expect(told.map((r) => [r.outcome, r.error?.[0]?.code.coding?.at(-1)?.code])).toEqual([['error', 'NotVerified']]);

    service.down = false;
    const again = await rig.reach('today', 'written', 8000);
    expect(again.round).toBe(today.round + 1);
    for (let i = 0; i < 6; i++) await rig.reach(`later-${i}`, 'written', 8000);
    const all = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse?_count=50')) as CoverageEligibilityResponse[];
    expect(all.filter((r) => r.outcome === 'complete')).toHaveLength(7);
    // Today's visit: the error the front desk was shown, then the result, newest.
    const todays = all.filter((r) => r.identifier?.some((i) => i.value === 'today')).sort((a, b) => Date.parse(a.created) - Date.parse(b.created));
    expect(todays.map((r) => r.outcome)).toEqual(['error', 'complete']);
    expect(rig.infos.filter((i) => /given up while the service was away are sent again/.test(i.msg)).map((i) => i.fields)).toEqual([{ checks: 1 }]);
  });

  it('keeps one response saying a check could not be verified when, sent again as the service answered something else, it is given up again', async () => {
    const { service, today } = await todayGivenUp();
    const [first] = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    // An answer that says nothing of this check's verifications ends the outage (the worker's own read of the payer network
    // ends the whole service's so, another check's answer its portal's): the check is sent again, and fails again.
    rig.worker.service.answered('portal-a', 'another-check');
    await until('given up again', async () => {
      const row = await rig.check('today');
      return row.round === today.round + 1 && row.state === 'needs-attention';
    }, 8000);
    // The later visits, sent once the outage ended, may be given up too (three attempts): today's is the one looked at.
    const ofToday = (type: string) => searchFhir(rig.fhir, `${type}?identifier=${encodeURIComponent('https://dental-elig.dev/fhir/sid/eligibility-check|today')}&_count=50`);
    const told = (await ofToday('CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
    // The one the front desk had, brought up to date: this round's, dated anew.
    expect(told.map((r) => [r.id, r.outcome, r.error?.[0]?.code.coding?.at(-1)?.code])).toEqual([[first?.id, 'error', 'NotVerified']]);
    const again = await rig.check('today');
    expect(told[0]?.identifier?.map((i) => i.value)).toContain(`local-${again.externalId}`);
    expect(Date.parse(told[0]?.created ?? '')).toBeGreaterThan(Date.parse(first?.created ?? ''));
    expect(await ofToday('CoverageEligibilityRequest')).toHaveLength(1);

    // Verified at last (sent again by a person here): the result is a response of its own, beside the failure, not over it.
    service.down = false;
    await retryCheck(rig.store, 'today', new Date());
    rig.worker.kick();
    await rig.reach('today', 'written', 8000);
    const todays = ((await ofToday('CoverageEligibilityResponse')) as CoverageEligibilityResponse[]).sort((a, b) => Date.parse(a.created) - Date.parse(b.created));
    expect(todays.map((r) => [r.id === first?.id, r.outcome])).toEqual([[true, 'error'], [false, 'complete']]);
  });

  it('takes the outage up after a restart: a check given up before it is sent again once the service answers the new worker', async () => {
    const { service, today } = await todayGivenUp();
    const since = rig.worker.service.outFor('portal-a');
    expect(since).toBeDefined();

    // Restarted while it is out; back before the new worker has sent anything.
    await rig.restart();
    service.down = false;
    rig.worker.start();
    const again = await rig.reach('today', 'written', 8000);
    // Taken up from when the worker before found it, its first call the one trying it.
    expect(rig.warnings.filter((w) => /not answering for one payer portal when this worker started/.test(w.msg)).map((w) => w.fields)).toEqual([{ since: since?.toISOString(), portalId: 'portal-a' }]);
    expect(again.round).toBe(today.round + 1);
    for (let i = 0; i < 6; i++) await rig.reach(`later-${i}`, 'written', 8000);
    expect(rig.worker.service.outFor('portal-a')).toBeUndefined();
    expect(rig.infos.filter((i) => /given up while the service was away are sent again/.test(i.msg)).map((i) => i.fields)).toEqual([{ checks: 1 }]);

    // Over for every worker: the next one starts with the service answering.
    await rig.restart();
    rig.worker.start();
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(rig.worker.service.outFor('portal-a')).toBeUndefined();
  });

  it('sends again each check given up while the service was away, though an operator retried one of them as they were read', async () => {
    const service = await awayRig();
    for (let i = 0; i < 5; i++) await addVisit(`later-${i}`, inDays(10));
    for (const key of ['today-a', 'today-b', 'today-c']) await addVisit(key, inDays(0));
    rig.worker.start();
    const given = await Promise.all(['today-a', 'today-b', 'today-c'].map((key) => rig.reach(key, 'needs-attention', 8000)));
    // `jobs retry` on the first of them, between the worker's reading of the checks given up and its sending them again.
    const list = rig.store.listChecks.bind(rig.store);
    rig.store.listChecks = async (filter) => {
      const rows = await list(filter);
      // One of today's: a check held for the service may be between its answer and its write meanwhile.
      const first = rows.find((row) => row.state === 'needs-attention');
      if (first) await retryCheck(rig.store, first.key, new Date());
      return rows;
    };
    service.down = false;
    const again = await Promise.all(['today-a', 'today-b', 'today-c'].map((key) => rig.reach(key, 'written', 8000)));
    expect(again.map((row) => row.round)).toEqual(given.map((row) => row.round + 1));
    expect(rig.warnings.filter((w) => /could not be sent again/.test(w.msg))).toEqual([]);
  });

  it('stops once the checks given up while the service was away are sent again, not while they are being read, so the store closed after it is not read closed', async () => {
    const { service } = await todayGivenUp();
    // The store slow to read them (PostgreSQL over the network, a large needs-attention), released by the test.
    let release = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    let reading = false;
    const list = rig.store.listChecks.bind(rig.store);
    rig.store.listChecks = async (filter) => {
      reading = true;
      await released;
      return list(filter);
    };
    service.down = false;
    await until('the checks given up being read', async () => reading, 8000);
    let stopped = false;
    const stopping = rig.worker.stop().then(() => void (stopped = true));
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(stopped).toBe(false);
    release();
    await stopping;
    // Sent again before stop() returned: queued for the next worker, nothing said of a store it found closed.
    expect((await rig.check('today')).state).toBe('received');
    expect(rig.infos.filter((i) => /given up while the service was away are sent again/.test(i.msg)).map((i) => i.fields)).toEqual([{ checks: 1 }]);
    expect(rig.warnings.filter((w) => /could not be sent again/.test(w.msg))).toEqual([]);
  });

  it('sends again a check given up while the service was away whose error response the chart, away too, had not taken yet', async () => {
    // The practice's line down: neither the service nor the chart answers.
    const chart = { down: true };
    const service = await awayRig((fhir) => ({ write: (...args) => (chart.down ? Promise.reject(new ChartWriteError('the FHIR server did not answer', { retryable: true })) : fhir.write(...args)) }));
    for (let i = 0; i < 5; i++) await addVisit(`later-${i}`, inDays(10));
    await addVisit('today', inDays(0));
    rig.worker.start();
    const given = await until('today given up, its error response waiting for the chart', async () => {
      const row = await rig.check('today');
      return row.state === 'result-stored' && /chart write failed/.test(row.lastError ?? '') && row;
    }, 8000);
    service.down = false;
    await until('the service found back', async () => rig.worker.service.outFor('portal-a') === undefined && service.verified > 0, 8000);
    // The chart back only once the result of the round sent again failed to be written: a write of the error response
    // under way when it was sent again, reaching the chart back, would write that response first and the result after it.
    await until('the result sent again waiting for the chart', async () => {
      const row = await rig.check('today');
      return row.round === given.round + 1 && row.state === 'result-stored' && /chart write failed/.test(row.lastError ?? '');
    }, 8000);
    chart.down = false;
    const again = await rig.reach('today', 'written', 8000);
    expect(again.round).toBe(given.round + 1);
    const todays = (await searchFhir(rig.fhir, 'CoverageEligibilityResponse?identifier=today')) as CoverageEligibilityResponse[];
    expect(todays.map((r) => r.outcome)).toEqual(['complete']);
  });

  it('reads, to send them again, the checks given up since the service went, not every needs-attention check of months', async () => {
    const service = await awayRig();
    const dayAgo = new Date(Date.now() - 86_400_000).toISOString();
    await rig.store.transaction(async (tx) => {
      for (let i = 0; i < 400; i++) await tx.putCheck(checkRow(`refused-${i}`, { state: 'needs-attention', dueAt: undefined, createdAt: dayAgo, updatedAt: dayAgo, lastError: 'PatientNotFound' }));
    });
    for (let i = 0; i < 5; i++) await addVisit(`later-${i}`, inDays(10));
    await addVisit('today', inDays(0));
    rig.worker.start();
    await rig.reach('today', 'needs-attention', 8000);
    const list = rig.store.listChecks.bind(rig.store);
    let read = 0;
    rig.store.listChecks = async (filter) => {
      const rows = await list(filter);
      read += rows.length;
      return rows;
    };
    service.down = false;
    await rig.reach('today', 'written', 8000);
    expect(read).toBeLessThan(100);
  });

  it.each([
    ['a send answered 503', unavailable],
    ['a send gone unanswered (a gateway\'s 504), held as sent', { title: 'Gateway Timeout', status: 504 }],
  ])('does not count the time a check was held against its wait at the service (%s): one held longer than pendingGiveUpMs is polled until its result, not given to a person', async (_case, failure) => {
    const service = { down: true };
    const polled = new Map<string, number>();
    let accepted = 0;
    rig = await startWorkerRig({
      worker: { asyncEnabled: true, webhookDeadlineMs: 20, pendingGiveUpMs: 2000, backoff: { baseMs: 50, maxMs: 400 } },
      answer: (req, res) => {
        if (service.down) return json(res, failure.status, failure);
        if (req.method === 'POST') return json(res, 202, { correlationId: `ver-${++accepted}`, status: 'Pending' });
        const id = req.url.split('/').at(-1) ?? '';
        polled.set(id, (polled.get(id) ?? 0) + 1);
        return json(res, 200, polled.get(id) === 1 ? { correlationId: id, status: 'Pending' } : { ...(resultBody('completed-minimal') as object), correlationId: id });
      },
    });
    const keys = Array.from({ length: 6 }, (_, i) => `later-${i}`);
    for (const key of keys) await addVisit(key, inDays(10));
    rig.worker.start();
    await until('the service found out', async () => rig.worker.service.outFor('portal-a') !== undefined);
    await new Promise((resolve) => setTimeout(resolve, 2500));
    service.down = false;
    expect(await settled(keys, 8000)).toEqual(keys.map((key) => [key, 'written', '']));
  });

  it('does not hold the checks of other payer portals while one portal\'s verifications fail: they are sent at once, and the service is not found out and back at each', async () => {
    const portalOf = (name: string | undefined) => (name === 'Slow Dental' ? 'portal-slow' : 'portal-a');
    const resolver = {
      resolve: ({ name }: { name?: string }) => ({ status: 'resolved', name, commonPayerId: '64246', supportsAsync: true, asyncPortals: [portalOf(name)], syncPortals: [portalOf(name)] }),
    } as unknown as PayerResolver;
    const slow = { down: true };
    let verified = 0;
    rig = await startWorkerRig({
      worker: { maxAttempts: 3, backoff: { baseMs: 50, maxMs: 400 } },
      resolver,
      answer: (req, res) => (slow.down && req.body.includes('portal-slow') ? json(res, 503, unavailable) : json(res, 200, completed(++verified))),
    });
    const addOf = (key: string, name: string) => {
      const { check } = checkRow(key);
      return rig.addCheck(key, { check: { ...check, dateOfService: inDays(10), coverage: { ...check.coverage, payer: { ...check.coverage.payer, name } } } });
    };
    const slowKeys = ['slow-0', 'slow-1', 'slow-2'];
    for (const key of slowKeys) await addOf(key, 'Slow Dental');
    rig.worker.start();
    await until('the slow portal found out', async () => rig.worker.service.portalsOut.some((p) => p.portal === 'portal-slow'));
    const goodKeys = Array.from({ length: 6 }, (_, i) => `good-${i}`);
    for (const key of goodKeys) await addOf(key, 'Guardian');
    rig.worker.kick();
    for (const key of goodKeys) await rig.reach(key, 'written', 5000);
    const sentFor = (key: string) => rig.requests.filter((r) => r.method === 'POST' && r.body.includes(`ext-${key}`)).length;
    expect(goodKeys.map(sentFor)).toEqual(goodKeys.map(() => 1));
    // Found once, for the one portal, and not ended by the others' answers.
    expect(rig.warnings.filter((w) => /not answering/.test(w.msg)).map((w) => (w.fields as { portalId?: string }).portalId)).toEqual(['portal-slow']);
    expect(rig.infos.filter((i) => /answers again/.test(i.msg))).toEqual([]);
    const held = await Promise.all(slowKeys.map((key) => rig.check(key)));
    expect(held.every((row) => attemptsUsed(row) < 3 && row.state !== 'needs-attention')).toBe(true);
    expect(held.some((row) => /has not answered for payer portal portal-slow since .*; waiting for it, the wait using no attempt/.test(row.lastError ?? ''))).toBe(true);

    slow.down = false;
    for (const key of slowKeys) await rig.reach(key, 'written', 8000);
    expect(rig.worker.service.anyOut).toBe(false);
    expect(rig.infos.filter((i) => /answers again/.test(i.msg))).toHaveLength(1);
    expect(rig.events.filter((e) => e.name === 'failed' || e.name === 'needs-attention')).toEqual([]);
  });

  it('gives up the checks a payer portal fails every time once another check of it is answered, rather than finding the portal out again and again', async () => {
    let verified = 0;
    rig = await startWorkerRig({
      worker: { maxAttempts: 3, backoff: { baseMs: 50, maxMs: 400 } },
      // As the sandbox's SBX-503: a Retry-After each time, a put-off that counts no attempt of a check the service's load holds back.
      answer: (req, res) => (req.body.includes('ext-bad') ? json(res, 503, unavailable, { 'retry-after': '1' }) : json(res, 200, completed(++verified))),
    });
    const badKeys = ['bad-0', 'bad-1', 'bad-2', 'bad-3'];
    for (const key of badKeys) await addVisit(key, inDays(10));
    rig.worker.start();
    await until('the portal found out', async () => rig.worker.service.portalOut('portal-a'));
    await addVisit('good', inDays(10));
    rig.worker.kick();
    await rig.reach('good', 'written', 8000);
    const given = await Promise.all(badKeys.map((key) => rig.reach(key, 'needs-attention', 10_000)));
    expect(given.map((row) => row.lastError?.match(/^NotVerified/)?.[0])).toEqual(badKeys.map(() => 'NotVerified'));
    expect(rig.warnings.filter((w) => /not answering/.test(w.msg))).toHaveLength(1);
    expect(rig.infos.filter((i) => /answers again/.test(i.msg))).toHaveLength(1);
    expect(rig.worker.service.anyOut).toBe(false);
  });

  it('puts off, using no attempt, the sends the service asks for less of (429) of the checks that found a portal out, once another check\'s answer ended it', async () => {
    const portal = { down: true, answered: false };
    const limited = new Map<string, number>();
    let verified = 0;
    rig = await startWorkerRig({
      worker: { maxAttempts: 3, backoff: { baseMs: 50, maxMs: 400 } },
      answer: (req, res) => {
        if (portal.down) return json(res, 503, unavailable);
        // The portal back, the first send is answered and the burst of the others held for it is asked to slow down, twice each.
        const key = /ext-(k-\d)/.exec(req.body)?.[1] ?? '';
        if (portal.answered && (limited.get(key) ?? 0) < 2) {
          limited.set(key, (limited.get(key) ?? 0) + 1);
          return json(res, 429, { title: 'Too many requests', status: 429 }, { 'retry-after': '1' });
        }
        portal.answered = true;
        return json(res, 200, completed(++verified));
      },
    });
    const keys = ['k-0', 'k-1', 'k-2', 'k-3'];
    for (const key of keys) await addVisit(key, inDays(10));
    rig.worker.start();
    await until('the portal found out', async () => rig.worker.service.portalOut('portal-a'));
    portal.down = false;
    expect(await settled(keys, 10_000)).toEqual(keys.map((key) => [key, 'written', '']));
    expect([...limited.values()].filter((n) => n === 2)).toHaveLength(keys.length - 1);
  });

  it('tries the whole service itself while it is out and no check is left to try it, and ends the outage on its answer', async () => {
    const resolver = {
      resolve: ({ name }: { name?: string }) => ({ status: 'resolved', name, commonPayerId: '64246', supportsAsync: false, asyncPortals: [], syncPortals: [name === 'Guardian' ? 'portal-a' : 'portal-b'] }),
    } as unknown as PayerResolver;
    const service = { down: true };
    rig = await startWorkerRig({
      worker: { maxAttempts: 2, backoff: { baseMs: 50, maxMs: 400 } },
      resolver,
      answer: (_req, res) => (service.down ? json(res, 503, unavailable) : json(res, 200, completed(1))),
    });
    // Visits today are not held: their attempts used, they are given up, and none is left to try the service.
    const keys = ['today-0', 'today-1', 'today-2', 'today-3'];
    for (const [i, key] of keys.entries()) {
      const { check } = checkRow(key);
      await rig.addCheck(key, { check: { ...check, dateOfService: inDays(0), coverage: { ...check.coverage, payer: { ...check.coverage.payer, name: i % 2 ? 'Guardian' : 'Aetna' } } } });
    }
    rig.worker.start();
    for (const key of keys) await rig.reach(key, 'needs-attention', 5000);
    expect(rig.worker.service.since).toBeDefined();
    const reads = () => rig.requests.filter((r) => r.method === 'GET' && r.url.startsWith('/v2/network/payers'));
    await until('the worker tries the service itself', async () => reads().length >= 2);
    expect(rig.worker.service.since).toBeDefined();

    service.down = false;
    await until('the service found back', async () => rig.worker.service.since === undefined);
    expect(rig.infos.filter((i) => /answers again/.test(i.msg))).toHaveLength(1);
    expect(posts(rig.requests).length).toBeGreaterThan(0);
  });

  it('gives up a check the service fails alone while it answers the others, as before', async () => {
    let verified = 0;
    rig = await startWorkerRig({
      worker: { maxAttempts: OUTAGE_AFTER + 2, backoff: { baseMs: 20, maxMs: 60 }, concurrency: 2 },
      answer: (req, res) => (req.body.includes('ext-choked') ? json(res, 500, { title: 'Internal error', status: 500 }) : json(res, 200, completed(++verified))),
    });
    await addVisit('choked', inDays(10));
    // Others keep coming while it fails: each answered between its sends. A few waiting at a time: on a loaded machine
    // the worker answers fewer than come every 15 ms, and those waiting, due before its next send, went ahead of it.
    let n = 0;
    const others = setInterval(() => void (n - verified < 4 && addVisit(`other-${n++}`, inDays(10)).then(() => rig.worker.kick())), 15);
    try {
      rig.worker.start();
      const row = await rig.reach('choked', 'needs-attention', 10_000);
      expect(row.lastError).toMatch(/^NotVerified/);
      expect(posts(rig.requests).length - verified).toBe(OUTAGE_AFTER + 2);
    } finally {
      clearInterval(others);
    }
    expect(rig.warnings.filter((w) => /not answering/.test(w.msg))).toEqual([]);
  });

  it('gives up a check the service fails alone when no other is being sent (a quiet night): its failures are not the service out', async () => {
    rig = await startWorkerRig({
      worker: { maxAttempts: OUTAGE_AFTER + 3, backoff: { baseMs: 20, maxMs: 60 } },
      answer: (_req, res) => json(res, 500, { title: 'Internal error', status: 500 }),
    });
    await addVisit('choked', inDays(10));
    rig.worker.start();
    const row = await rig.reach('choked', 'needs-attention', 8000);
    expect(row.lastError).toMatch(/^NotVerified/);
    expect(posts(rig.requests)).toHaveLength(OUTAGE_AFTER + 3);
    expect(rig.worker.service.outFor('portal-a')).toBeUndefined();
    expect(rig.warnings.filter((w) => /not answering/.test(w.msg))).toEqual([]);
  });
});
