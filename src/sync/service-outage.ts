import { ServiceError, UNREADABLE_ANSWER } from '../verification/errors';

/**
 * Failures in a row, of more than one check, that make the service out: one check's sends failing
 * alone (a request the service chokes on, the only one sent on a quiet night) is that check's to
 * give up, however often it is sent; checks failing with no answer between is the service.
 */
export const OUTAGE_AFTER = 5;
/** Failures further apart than this are not in a row: a check failing now and then for hours, on a quiet night or a quiet portal, is not an outage. */
const ROW_SPAN_MS = 10 * 60_000;
/** The longest between two calls that try a service found out: it is found back within this. */
const PROBE_MAX_MS = 60_000;
/** How late a check held may come back (the worker busy, its claim waiting for a tick) and still be the one to try an outage before those that failed in it. */
const UNTRIED_LATE_MS = 1000;
/** How long a check found failing on its own is left out of the rows: past its attempts and its round's wait at the service, at the defaults. */
const ALONE_MS = 24 * 60 * 60_000;

/** What a call to the service may do now: go, go as the one call that tries a service found out, or wait. */
export type Pass = 'go' | 'probe' | 'hold';

export interface OutageWatchLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/**
 * Whether a failure says the service is out rather than anything of the check: no answer (a
 * timeout, a refused or reset connection), 408, 425 or 5xx. A 429 is an answer (the service is
 * there, asking for less) and says neither; any other status, or a body this plugin cannot read,
 * is the service answering.
 */
function saysOut(err: ServiceError): boolean | undefined {
  if (err.status === 429) return undefined;
  return err.code !== UNREADABLE_ANSWER && err.mayPassLater;
}

/**
 * The verification service as the worker's calls find it. Out after OUTAGE_AFTER failures in a
 * row (saysOut), of more than one check, with no answer between, until a call is answered:
 * meanwhile one call at a time tries it (`probe`), each later than the one before (from
 * backoff.baseMs, doubling, up to a minute, and no sooner than a Retry-After), and the others wait
 * (`hold`) without using their check's attempts. A batch booked while the service is away then
 * waits for it in the store, rather than being given up check by check once their attempts run
 * out, each into the chart as not verified. Said once when it goes, once when it is back.
 *
 * A payer portal is out on its own after OUTAGE_AFTER failures in a row of the verifications sent
 * to it (5xx or time-outs, or answers saying the portal itself away: portalAway), counted until it answers, whatever the other portals' calls get
 * meanwhile: only its checks wait and try it, its answer ends it, and the other portals' checks go
 * on, rather than being held until a probe happened to be one of theirs. Two portals out at once
 * are two such outages. The whole service is out when the failures in a row across every call come
 * from two portals or more, or one says the service itself is away: a request that never reached
 * it (refused, no such host), or a call of no portal (a poll: it reads the service, not the portal).
 * The checks that failed in a portal's outage another check's answer ended fail on their own (a member id
 * the portal chokes on): they are not counted until answered (`alone`).
 */
export class ServiceOutage {
  /** The failures since the service last answered any call. */
  private row = new FailureRow();
  /** The failures of each portal's calls since it last answered: on a busy day the other portals' answers come between them. */
  private readonly portalRows = new Map<string, FailureRow>();
  /** The whole service out. */
  private service: Outage | undefined;
  /** The portals out on their own. */
  private readonly portals = new Map<string, Outage>();
  /**
   * The checks that failed in a portal's outage another check's answer ended, and since when: their
   * failures are their own (a member id the payer's portal chokes on), not counted in a row until
   * they are answered, or they would find their portal out again each time it came back.
   */
  private readonly alone = new Map<string, number>();
  /**
   * Checks whose visit's day had come given up while the service asked for fewer requests (429), since when (the first
   * of them), until a verification's send is answered otherwise (throttleOver): those are sent again then. A 429 ends
   * nothing, and a read answered says nothing of sends (a rate limit is often an endpoint's), so the worker sends one of
   * them again itself meanwhile (throttledTry), no sooner than a wait and than any 429's Retry-After.
   */
  private throttled: { since: number; nextTry: number } | undefined;

  constructor(
    private readonly backoff: { baseMs: number; maxMs: number },
    private readonly now: () => number,
    private readonly log: OutageWatchLog,
    private readonly told: {
      /** Told when the service (`portal` undefined) or a portal is found out, with when it was found failing. */
      went?: (since: Date, portal: string | undefined) => void;
      /** Told when it answers again, with when it was found failing: once for the service's outage, once for a portal's. */
      back?: (since: Date, portal: string | undefined) => void;
    } = {},
  ) {}

  /** When the failures that found the whole service out began; undefined while it answers (a portal out on its own or none). */
  get since(): Date | undefined {
    return this.service && new Date(this.service.since);
  }

  /** The portals out on their own, and since when. */
  get portalsOut(): Array<{ portal: string; since: Date }> {
    return [...this.portals].map(([portal, outage]) => ({ portal, since: new Date(outage.since) }));
  }

  /** Whether anything is out: the service, or a portal. */
  get anyOut(): boolean {
    return this.service !== undefined || this.portals.size > 0;
  }

  /** Since when the outage a call to `portal` (undefined: of no portal) waits for began; undefined when it need not wait. */
  outFor(portal: string | undefined): Date | undefined {
    const outage = this.covering(portal);
    return outage && new Date(outage.since);
  }

  /** Whether `portal` is out on its own (the whole service out or not). */
  portalOut(portal: string | undefined): boolean {
    return portal !== undefined && this.portals.has(portal);
  }

  /** Whether the check `key`'s failures at its portal are its own: it failed in the portal's outage another check's answer ended, and has not been answered since. */
  failsAlone(key: string): boolean {
    const since = this.alone.get(key);
    return since !== undefined && this.now() - since < ALONE_MS;
  }

  /**
   * Since when the outage a call to `portal` waits for began, once the check `key`'s answer saying the portal away
   * (portalAway) is counted: the one it is in, or the one it will find. A webhook's step, its answer told once its
   * transaction has committed, holds the check that will find its portal out, as the send's answer does.
   */
  outOnceAway(portal: string, key: string): Date | undefined {
    const outage = this.covering(portal);
    if (outage) return new Date(outage.since);
    const row = this.portalRows.get(portal)?.copy() ?? new FailureRow();
    row.add(key, this.now(), portal);
    return row.saysOut ? new Date(row.since) : undefined;
  }

  /** Whether a call to `portal` waits for an outage. */
  covers(portal: string | undefined): boolean {
    return this.covering(portal) !== undefined;
  }

  /**
   * Out since `since`, as a process before this one found it (killed or restarted meanwhile, or
   * another instance on the store): its first call tries the service, and an answer ends it as it
   * ends one found here, those given up since then sent again.
   */
  resume(since: Date, portal?: string): void {
    const at = since.getTime();
    if (portal !== undefined) {
      if (this.portals.has(portal)) return;
      const outage = new Outage(at, this.now());
      // Read from the store.
      outage.stored = true;
      this.portals.set(portal, outage);
      this.log.warn({ since: since.toISOString(), portalId: portal }, 'the verification service was not answering for one payer portal when this worker started; its checks wait for it without using their attempts, one call at a time tries it');
      return;
    }
    if (this.service) return;
    this.service = new Outage(at, this.now());
    this.log.warn({ since: since.toISOString() }, 'the verification service was not answering when this worker started; checks wait for it without using their attempts, one call at a time tries it');
  }

  /** The pass for the check `key`'s call to `portal` about to go; `urgent` goes whatever is out (it uses its attempts as before). */
  admit(urgent: boolean, portal: string | undefined, key: string): Pass {
    const outage = this.covering(portal);
    if (outage) outage.asked = this.now();
    if (urgent || !outage) return 'go';
    if (outage.prober !== undefined || this.now() < outage.nextProbe || this.untriedWaits(outage, key)) return 'hold';
    outage.prober = key;
    return 'probe';
  }

  /**
   * Whether the worker tries the whole service itself now, with a call `key` of no check: it is out
   * and no check has come to try it for two waits past its try's time (those held were answered by
   * webhook or cancelled, or none is left), so that /healthz and the gauge do not say it out until
   * the next booking. A portal out on its own has no such call: only a verification tries it.
   */
  tryItself(key: string): boolean {
    const outage = this.service;
    if (!outage) return false;
    if (outage.prober !== undefined) return false;
    if (this.now() < Math.max(outage.nextProbe, outage.asked) + 2 * this.probeWait(outage)) return false;
    outage.prober = key;
    return true;
  }

  /** The check `key`'s call a pass let go is over: a probe's place is free again. */
  done(pass: Pass, key: string): void {
    if (pass !== 'probe') return;
    for (const outage of [this.service, ...this.portals.values()]) if (outage?.prober === key) outage.prober = undefined;
  }

  /**
   * A check whose visit's day had come given up at `at` while the service asked for fewer requests (429): sent again
   * once a verification's send is answered (throttleOver). The worker sends one of them again itself (throttledTry), no
   * sooner than a try's wait from now.
   */
  gaveUpThrottled(at: Date): void {
    const since = at.getTime();
    if (this.throttled) this.throttled.since = Math.min(this.throttled.since, since);
    else this.throttled = { since, nextTry: this.now() + this.throttleWait() };
  }

  /** Since when checks were given up while the service asked for fewer requests, when the worker is to send one of them again now: at most once a wait. */
  throttledTry(): Date | undefined {
    const throttled = this.throttled;
    if (!throttled || this.now() < throttled.nextTry) return undefined;
    throttled.nextTry = this.now() + this.throttleWait();
    return new Date(throttled.since);
  }

  /** A verification's send answered other than 429 (or the throttling ended by another instance, or with nothing left to send): since when checks were given up in it, forgotten. */
  throttleOver(): Date | undefined {
    const throttled = this.throttled;
    this.throttled = undefined;
    return throttled && new Date(throttled.since);
  }

  /**
   * This machine's clock has stepped back `stepMs` (SQLite: a sync goes by it), as the checks are dated back
   * (dateBackChecks): what was timed by it while it ran ahead (each outage's next probe and last ask, each held check's
   * return, the next throttled try) comes that much sooner, or no call would try an outage until the step was out, and
   * every check dated back would be held again for it; and when each outage and throttling began is that much earlier,
   * or the checks given up in it, dated back, would be before it, and not sent again at its end (givenUpSince).
   */
  steppedBack(stepMs: number): void {
    const at = this.now();
    const back = (time: number) => (time > at ? time - stepMs : time);
    for (const outage of [this.service, ...this.portals.values()]) {
      if (!outage) continue;
      outage.since = back(outage.since);
      outage.nextProbe = back(outage.nextProbe);
      outage.asked = back(outage.asked);
      for (const [key, due] of outage.held) outage.held.set(key, back(due));
    }
    for (const row of [this.row, ...this.portalRows.values()]) row.steppedBack(back);
    for (const [key, since] of this.alone) this.alone.set(key, back(since));
    if (this.throttled) this.throttled = { since: back(this.throttled.since), nextTry: back(this.throttled.nextTry) };
  }

  /** The wait between tries of a service that asked for fewer requests: as the longest between tries of an outage. */
  private throttleWait(): number {
    return Math.min(this.backoff.maxMs, PROBE_MAX_MS);
  }

  /** How long a check whose call to `portal` is held waits before it is looked at again: past the next probe, spread over the wait between probes, so the held ones do not all come at once. */
  holdFor(random: number, portal: string | undefined, key: string): number {
    const outage = this.covering(portal);
    if (!outage) return 0;
    const wait = Math.max(0, outage.nextProbe - this.now()) + Math.round(random * this.probeWait(outage));
    outage.held.set(key, this.now() + wait);
    return wait;
  }

  /** A call of the check `key` to `portal` the service answered, in any way but a failure that says it is out. */
  answered(portal: string | undefined, key: string): void {
    this.alone.delete(key);
    this.row = new FailureRow();
    const whole = this.service;
    if (whole) {
      this.log.info({ outageMs: this.now() - whole.since, held: whole.held.size }, 'the verification service answers again; the checks held for it go on');
      this.service = undefined;
      // The portals' failures while the service was away were its own: a portal's count starts again, or one failure after would find it out, since before.
      this.portalRows.clear();
      // Told apart from the portal's: the checks given up since the service went are every portal's, those since the portal went only its.
      this.told.back?.(new Date(whole.since), undefined);
    }
    this.portalAnswered(portal, key);
  }

  /**
   * The check `key`'s verification answered by its portal, by a result the service delivered (a
   * webhook) or a call answered: it ends that portal's outage, not the whole service's, which only a
   * call answered ends (answered): the service's webhooks may come while its API fails every call.
   * A result produced at `producedAt` (undefined: now) before the portal's failures began, polled or
   * delivered since (its send's before the portal went), says nothing of the portal since: it ends nothing.
   */
  portalAnswered(portal: string | undefined, key: string, producedAt?: number): void {
    this.alone.delete(key);
    if (portal === undefined) return;
    const own = this.portals.get(portal);
    const failing = own?.since ?? this.portalRows.get(portal)?.since;
    if (producedAt !== undefined && failing !== undefined && producedAt < failing) return;
    this.portalRows.delete(portal);
    if (!own) return;
    const now = this.now();
    this.log.info({ outageMs: now - own.since, held: own.held.size, portalId: portal }, 'the verification service answers again for the payer portal; its checks held go on');
    this.portals.delete(portal);
    // Only a portal's: a member id chokes one portal, and the whole service's outage was found by two portals or the service itself away.
    this.leaveAlone(own.failed, key, now);
    this.told.back?.(new Date(own.since), portal);
  }

  /**
   * The portal's outage found failing at `since` is in the store (this worker kept it, or found a
   * start kept before): gone from there since, another instance forgot it. One whose keeping failed
   * (the store out of reach, SQLite's disk full) was never there, and its absence says nothing.
   */
  kept(portal: string, since: Date): void {
    const own = this.portals.get(portal);
    if (own?.since === since.getTime()) own.stored = true;
  }

  /**
   * The portal's outage over because another instance sharing the store found it answering (its
   * answer forgot the outage there), when the store held it (kept) and this worker found it out
   * more than `foundBeforeMs` ago: a read begun before it was kept does not hold it. Its checks
   * held here go; those given up in it were sent again by the instance that found it back.
   */
  endedElsewhere(portal: string, foundBeforeMs: number): void {
    const own = this.portals.get(portal);
    if (!own?.stored || this.now() - own.foundAt < foundBeforeMs) return;
    this.portals.delete(portal);
    this.portalRows.delete(portal);
    this.log.info({ outageMs: this.now() - own.since, held: own.held.size, portalId: portal }, 'the verification service answers again for the payer portal, as another instance found; its checks held go on');
  }

  /**
   * A call of the check `key` to `portal` that failed: counted when the failure says the service
   * is out, an answer when it says the service is there. Only a probe's failure puts the next
   * probe off further: the calls under way when the service went fail together, and say no more
   * than the first.
   */
  failed(err: unknown, pass: Pass, key: string, portal: string | undefined): void {
    if (!(err instanceof ServiceError)) return;
    const out = saysOut(err);
    if (out === false) return this.answered(portal, key);
    // Asked for less while it is out: the next probe waits as long as it asks, not for the next check due.
    if (out === undefined) {
      const outage = this.covering(portal);
      if (outage && pass === 'probe') outage.nextProbe = Math.max(outage.nextProbe, this.now() + (err.retryAfterMs ?? this.probeWait(outage)));
      // Any send's: the one sent again for a throttling (throttledTry) is a check's like the others.
      if (this.throttled) this.throttled.nextTry = Math.max(this.throttled.nextTry, this.now() + (err.retryAfterMs ?? 0));
      return;
    }
    this.outFailure({ failure: err.status ?? err.code ?? 'network', notSent: err.notSent === true, retryAfterMs: err.retryAfterMs }, pass, key, portal);
  }

  /**
   * The check `key`'s verification answered by the service with a failure that says its payer's
   * portal itself is away (a kind marked portalAway: SiteMaintenance), by the call's answer (told
   * answered first), a poll or a webhook: the portal failed, counted in the portal's row as a 5xx of
   * it is. Never left out as a check failing alone: a portal's maintenance is no member id's.
   */
  portalAway(pass: Pass, key: string, portal: string, kind: string): void {
    this.alone.delete(key);
    this.outFailure({ failure: kind, answered: true }, pass, key, portal);
  }

  /**
   * The service took the check `key`'s request to `portal` for an asynchronous verification: the
   * service answered, but the portal answers with the result, by webhook or poll (answered or
   * portalAway). A probe so taken is over without the portal's word: the next waits as after a failure.
   */
  accepted(pass: Pass, key: string, portal: string | undefined): void {
    this.answered(undefined, key);
    const own = portal === undefined ? undefined : this.portals.get(portal);
    if (!own || pass !== 'probe') return;
    own.nextProbe = Math.max(own.nextProbe, this.now() + this.probeWait(own));
    own.probes++;
  }

  /** A failure that says `portal` (or the service) is out, by a call that failed or an answer saying the portal away (`answered`). */
  private outFailure(failure: OutFailure, pass: Pass, key: string, portal: string | undefined): void {
    const at = this.now();
    // A check left out fails on its own only at its portal: a request that never reached the service, or a call of no portal, says the service away whoever made it.
    const own = !failure.notSent && portal !== undefined && this.failsAlone(key);
    const found = own ? undefined : this.counted(failure, key, at, portal);
    const outage = found ?? this.covering(portal);
    if (!outage) return;
    const retryAfter = at + (failure.retryAfterMs ?? 0);
    if (!found && pass !== 'probe') {
      outage.nextProbe = Math.max(outage.nextProbe, retryAfter);
      return;
    }
    outage.failed.add(key);
    outage.nextProbe = Math.max(at + this.probeWait(outage), retryAfter);
    outage.probes++;
  }

  /**
   * Whether the check `key`, which failed in `outage` already, leaves the try to one that has not
   * and is held for it (due back, or due back within a wait or UNTRIED_LATE_MS ago: a check answered
   * meanwhile by webhook, or cancelled, never comes): checks a portal fails every time would
   * otherwise try it again and again while a good one held among them waits its turn.
   */
  private untriedWaits(outage: Outage, key: string): boolean {
    if (!outage.failed.has(key)) return false;
    const late = this.now() - Math.max(this.probeWait(outage), UNTRIED_LATE_MS);
    for (const [other, due] of outage.held) if (due >= late && !outage.failed.has(other)) return true;
    return false;
  }

  /** A failure that says the service is out counted in the rows: the outage they say, when it is news. */
  private counted(failure: OutFailure, key: string, at: number, portal: string | undefined): Outage | undefined {
    let portalRow: FailureRow | undefined;
    const ofPortal = failure.notSent ? undefined : portal;
    // A portal out on its own failing again says nothing new of the service: a second portal failing then is not two. Nor does one the service answered for.
    if (!this.portalOut(ofPortal) && !failure.answered) this.row.add(key, at, ofPortal);
    if (ofPortal !== undefined) {
      portalRow = this.portalRows.get(ofPortal) ?? new FailureRow();
      this.portalRows.set(ofPortal, portalRow);
      portalRow.add(key, at, ofPortal);
    }
    if (this.row.saysOut && this.row.ofService) return this.find(failure, undefined, this.row);
    return portalRow?.saysOut ? this.find(failure, portal, portalRow) : undefined;
  }

  /** The checks that failed in a portal's outage the check `answering` ended are left out of the rows; those left out long ago are forgotten. */
  private leaveAlone(failed: Iterable<string>, answering: string, now: number): void {
    for (const [key, since] of this.alone) if (now - since >= ALONE_MS) this.alone.delete(key);
    for (const key of failed) if (key !== answering) this.alone.set(key, now);
  }

  /** The outage the failures in a row say, when it is news: the whole service's (`portal` undefined), or one portal's while the service answers. */
  private find({ failure }: OutFailure, portal: string | undefined, row: FailureRow): Outage | undefined {
    if (this.service || this.portalOut(portal)) return undefined;
    const outage = new Outage(row.since, this.now(), row.checks);
    if (portal === undefined) {
      this.service = outage;
      this.log.warn({ failures: row.count, checks: row.checks.size, failure }, 'the verification service is not answering; checks wait for it without using their attempts, one call at a time tries it');
    } else {
      this.portals.set(portal, outage);
      // Its failures say no more of the service: the row across portals starts again without them.
      this.row = new FailureRow();
      this.log.warn({ failures: row.count, checks: row.checks.size, failure, portalId: portal }, 'the verification service is not answering for one payer portal; its checks wait for it without using their attempts, one call at a time tries it, the others go on');
    }
    this.told.went?.(new Date(outage.since), portal);
    return outage;
  }

  /**
   * The outage a call to `portal` waits for: its portal's, out on its own, or the whole service's.
   * A portal out on its own is tried by its own calls while the service is out too: one of them
   * trying the service would fail for the portal and say nothing of the service.
   */
  private covering(portal: string | undefined): Outage | undefined {
    return (portal === undefined ? undefined : this.portals.get(portal)) ?? this.service;
  }

  private probeWait(outage: Outage): number {
    return Math.min(this.backoff.maxMs, PROBE_MAX_MS, this.backoff.baseMs * 2 ** outage.probes);
  }
}

/** A failure that says the service or a portal out: what (a status, a code, or the kind an answer named), and how it came. */
interface OutFailure {
  failure: string | number;
  /** The request never reached the service (refused, no such host): the service itself away, whoever made it. */
  notSent?: boolean;
  retryAfterMs?: number | undefined;
  /** The service answered, saying the portal away: no failure of the service's own. */
  answered?: boolean;
}

/** One outage, the whole service's or a portal's: since when, and the one call at a time that tries it. */
class Outage {
  nextProbe = 0;
  probes = 0;
  /** When a check last came to call it: held ones come again and again until it ends. */
  asked: number;
  /** The check whose call is trying it now. */
  prober: string | undefined;
  /** The checks held for it, each with when it is due back (a count of holds would read as checks: each is held again and again). */
  readonly held = new Map<string, number>();
  /** The checks whose calls failed in it: those that found it, and those that tried it in vain. */
  readonly failed: Set<string>;

  /** When this worker found it out, or took it up. */
  readonly foundAt: number;
  /** Whether the store holds it (a portal's: ServiceOutage.kept), so that its absence there says another instance ended it. */
  stored = false;

  constructor(
    /** Moved back only by a step back of this machine's clock (ServiceOutage.steppedBack). */
    public since: number,
    at: number,
    foundBy: Iterable<string> = [],
  ) {
    this.asked = at;
    this.foundAt = at;
    this.failed = new Set(foundBy);
  }
}

/** Failures in a row, with no answer between: how many, of which checks and portals, since when. */
class FailureRow {
  count = 0;
  since = 0;
  private last = 0;
  readonly checks = new Set<string>();
  /** Their portals, undefined for a failure that says the service itself is away: kept with the count, or one from before a row started again would make it the service's. */
  private readonly portals = new Set<string | undefined>();

  /** The row as it is now, to count in without changing this one. */
  copy(): FailureRow {
    const row = new FailureRow();
    Object.assign(row, { count: this.count, since: this.since, last: this.last });
    for (const key of this.checks) row.checks.add(key);
    for (const portal of this.portals) row.portals.add(portal);
    return row;
  }

  add(key: string, at: number, portal: string | undefined): void {
    if (this.count === 0 || at - this.last > ROW_SPAN_MS) {
      this.count = 0;
      this.checks.clear();
      this.portals.clear();
      this.since = at;
    }
    this.last = at;
    this.count++;
    this.checks.add(key);
    this.portals.add(portal);
  }

  /** Its times moved by `back` (ServiceOutage.steppedBack). */
  steppedBack(back: (time: number) => number): void {
    this.since = back(this.since);
    this.last = back(this.last);
  }

  /** Whether its failures are the service's, not one portal's: of two portals or more, or one says the service itself is away. */
  get ofService(): boolean {
    return this.portals.has(undefined) || this.portals.size > 1;
  }

  /** Enough to say it is out: OUTAGE_AFTER failures, of more than one check. */
  get saysOut(): boolean {
    return this.count >= OUTAGE_AFTER && this.checks.size >= 2;
  }
}
