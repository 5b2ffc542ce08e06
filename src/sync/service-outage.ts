import { ServiceError, UNREADABLE_ANSWER } from '../verification/errors';

/**
 * Failures in a row, of more than one check, that make the service out: one check's sends failing
 * alone (a request the service chokes on, the only one sent on a quiet night) is that check's to
 * give up, however often it is sent; checks failing with no answer between is the service.
 */
export const OUTAGE_AFTER = 5;
/** The longest between two calls that try a service found out: it is found back within this. */
const PROBE_MAX_MS = 60_000;

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
 * OUTAGE_AFTER failures in a row of one payer portal's calls (5xx or time-outs of its
 * verifications), counted until that portal answers, whatever the others' calls get meanwhile,
 * are that portal out, not the service: only its checks wait and try it, and only its answer ends it. The checks of other
 * portals go on, rather than being held until a probe happened to be one of theirs, again at each
 * such streak. A request that never reached the service (refused, no such host), a call of no
 * known portal, failures of two portals, or another portal found out while one is make it the service.
 */
export class ServiceOutage {
  /** The failures since the service last answered any call. */
  private row = new FailureRow();
  /** Their portals; `wholeService` once one of them says the service itself is away. */
  private readonly failingPortals = new Set<string>();
  private wholeService = false;
  /** The failures of each portal's calls since it last answered: on a busy day the other portals' answers come between them. */
  private readonly portalRows = new Map<string, FailureRow>();
  private outSince: number | undefined;
  /** The one portal found out, or undefined for the whole service. */
  private scope: string | undefined;
  private nextProbe = 0;
  private probes = 0;
  private probing = false;
  private heldChecks = 0;

  constructor(
    private readonly backoff: { baseMs: number; maxMs: number },
    private readonly now: () => number,
    private readonly log: OutageWatchLog,
    private readonly told: {
      /** Told when the service (or one portal) is found out, with when it was found failing. */
      went?: (since: Date) => void;
      /** Told when it answers again, with when it was found failing and the portal it was, if only one. */
      back?: (since: Date, portal: string | undefined) => void;
    } = {},
  ) {}

  /** When the failures that found the service (or one portal) out began; undefined while it answers. */
  get since(): Date | undefined {
    return this.outSince === undefined ? undefined : new Date(this.outSince);
  }

  /** The one payer portal found out, the service answering the others; undefined while none is, or the whole service is out. */
  get portal(): string | undefined {
    return this.outSince === undefined ? undefined : this.scope;
  }

  /** Whether the outage is one a call to `portal` waits for. */
  covers(portal: string | undefined): boolean {
    return this.outSince !== undefined && (this.scope === undefined || this.scope === portal);
  }

  /**
   * Out since `since`, as a process before this one found it (killed or restarted meanwhile, or
   * another instance on the store): its first call tries the service, and an answer ends it as it
   * ends one found here, those given up since then sent again.
   */
  resume(since: Date): void {
    if (this.outSince !== undefined) return;
    this.outSince = since.getTime();
    this.scope = undefined;
    this.log.warn({ since: since.toISOString() }, 'the verification service was not answering when this worker started; checks wait for it without using their attempts, one call at a time tries it');
  }

  /** The pass for a call to `portal` about to go; `urgent` goes whatever the service's state (it uses its attempts as before). */
  admit(urgent: boolean, portal: string | undefined): Pass {
    if (urgent || !this.covers(portal)) return 'go';
    if (this.probing || this.now() < this.nextProbe) return 'hold';
    this.probing = true;
    return 'probe';
  }

  /** The call a pass let go is over: a probe's place is free again. */
  done(pass: Pass): void {
    if (pass === 'probe') this.probing = false;
  }

  /** How long a check held now waits before it is looked at again: past the next probe, spread over the wait between probes, so the held ones do not all come at once. */
  holdFor(random: number): number {
    this.heldChecks++;
    return Math.max(0, this.nextProbe - this.now()) + Math.round(random * this.probeWait());
  }

  /** A call to `portal` the service answered, in any way but a failure that says it is out. */
  answered(portal: string | undefined): void {
    this.row = new FailureRow();
    this.failingPortals.clear();
    this.wholeService = false;
    if (portal !== undefined) this.portalRows.delete(portal);
    if (!this.covers(portal)) return;
    const scope = this.portal;
    this.log.info({ outageMs: this.now() - (this.outSince as number), held: this.heldChecks, ...(scope !== undefined && { portalId: scope }) }, scope === undefined ? 'the verification service answers again; the checks held for it go on' : "the verification service answers again for the payer portal; its checks held go on");
    const since = new Date(this.outSince as number);
    // The portals' failures while the service was away were its own: a portal's count starts again, or one failure after would find it out, since before.
    if (scope === undefined) this.portalRows.clear();
    this.outSince = undefined;
    this.scope = undefined;
    this.probes = 0;
    this.heldChecks = 0;
    this.told.back?.(since, scope);
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
    if (out === false) return this.answered(portal);
    // Asked for less while it is out: the next probe waits as long as it asks, not for the next check due.
    if (out === undefined) {
      if (this.covers(portal) && pass === 'probe') this.nextProbe = Math.max(this.nextProbe, this.now() + (err.retryAfterMs ?? this.probeWait()));
      return;
    }
    const at = this.now();
    this.row.add(key, at);
    let portalRow: FailureRow | undefined;
    if (portal === undefined || err.notSent) this.wholeService = true;
    else {
      this.failingPortals.add(portal);
      portalRow = this.portalRows.get(portal) ?? new FailureRow();
      this.portalRows.set(portal, portalRow);
      portalRow.add(key, at);
    }
    const retryAfter = at + (err.retryAfterMs ?? 0);
    const found =
      this.row.saysOut && (this.wholeService || this.failingPortals.size > 1)
        ? this.found(err, undefined, this.row)
        : portalRow?.saysOut === true && this.found(err, portal, portalRow);
    if (!found) {
      if (!this.covers(portal)) return;
      if (pass !== 'probe') {
        this.nextProbe = Math.max(this.nextProbe, retryAfter);
        return;
      }
    }
    this.nextProbe = Math.max(this.now() + this.probeWait(), retryAfter);
    this.probes++;
  }

  /** The failures in a row say the service, or one portal, is out: whether that is news (out, or out more widely, from now). */
  private found(err: ServiceError, one: string | undefined, row: FailureRow): boolean {
    // Another portal's row while one is out is two portals out, the first not having answered since: the service.
    const portal = this.outSince !== undefined && this.scope !== one ? undefined : one;
    if (this.outSince !== undefined && (this.scope === undefined || this.scope === portal)) return false;
    const failure = err.status ?? err.code ?? 'network';
    if (portal !== undefined) {
      this.log.warn({ failures: row.count, checks: row.checks.size, failure, portalId: portal }, "the verification service is not answering for one payer portal; its checks wait for it without using their attempts, one call at a time tries it, the others go on");
    } else {
      this.log.warn({ failures: row.count, checks: row.checks.size, failure }, 'the verification service is not answering; checks wait for it without using their attempts, one call at a time tries it');
    }
    // One portal's outage become the service's keeps its start, kept already: the service has not answered that portal since.
    const widened = this.outSince !== undefined;
    this.outSince ??= row.since;
    this.scope = portal;
    if (!widened) this.told.went?.(new Date(this.outSince));
    return true;
  }

  private probeWait(): number {
    return Math.min(this.backoff.maxMs, PROBE_MAX_MS, this.backoff.baseMs * 2 ** this.probes);
  }
}

/** Failures in a row, with no answer between: how many, of which checks, since when. */
class FailureRow {
  count = 0;
  since = 0;
  readonly checks = new Set<string>();

  add(key: string, at: number): void {
    if (this.count++ === 0) this.since = at;
    this.checks.add(key);
  }

  /** Enough to say it is out: OUTAGE_AFTER failures, of more than one check. */
  get saysOut(): boolean {
    return this.count >= OUTAGE_AFTER && this.checks.size >= 2;
  }
}
