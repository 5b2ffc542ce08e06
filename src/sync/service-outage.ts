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
 */
export class ServiceOutage {
  private inRow = 0;
  /** The checks whose calls failed since the last answer. */
  private readonly failing = new Set<string>();
  /** When the failures in a row began: the service has not answered since. */
  private failingSince = 0;
  private outSince: number | undefined;
  private nextProbe = 0;
  private probes = 0;
  private probing = false;
  private heldChecks = 0;

  constructor(
    private readonly backoff: { baseMs: number; maxMs: number },
    private readonly now: () => number,
    private readonly log: OutageWatchLog,
    private readonly told: {
      /** Told when the service is found out, with when it was found failing. */
      went?: (since: Date) => void;
      /** Told when the service answers again, with when it was found failing. */
      back?: (since: Date) => void;
    } = {},
  ) {}

  /** When the failures that found the service out began; undefined while it answers. */
  get since(): Date | undefined {
    return this.outSince === undefined ? undefined : new Date(this.outSince);
  }

  /**
   * Out since `since`, as a process before this one found it (killed or restarted meanwhile, or
   * another instance on the store): its first call tries the service, and an answer ends it as it
   * ends one found here, those given up since then sent again.
   */
  resume(since: Date): void {
    if (this.outSince !== undefined) return;
    this.outSince = since.getTime();
    this.log.warn({ since: since.toISOString() }, 'the verification service was not answering when this worker started; checks wait for it without using their attempts, one call at a time tries it');
  }

  /** The pass for a call about to go; `urgent` goes whatever the service's state (it uses its attempts as before). */
  admit(urgent: boolean): Pass {
    if (this.outSince === undefined || urgent) return 'go';
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

  /** A call the service answered, in any way but a failure that says it is out. */
  answered(): void {
    this.inRow = 0;
    this.failing.clear();
    if (this.outSince === undefined) return;
    this.log.info({ outageMs: this.now() - this.outSince, held: this.heldChecks }, 'the verification service answers again; the checks held for it go on');
    const since = new Date(this.outSince);
    this.outSince = undefined;
    this.probes = 0;
    this.heldChecks = 0;
    this.told.back?.(since);
  }

  /**
   * A call of the check `key` that failed: counted when the failure says the service is out, an
   * answer when it says the service is there. Only a probe's failure puts the next probe off
   * further: the calls under way when the service went fail together, and say no more than the first.
   */
  failed(err: unknown, pass: Pass, key: string): void {
    if (!(err instanceof ServiceError)) return;
    const out = saysOut(err);
    if (out === false) return this.answered();
    // Asked for less while it is out: the next probe waits as long as it asks, not for the next check due.
    if (out === undefined) {
      if (this.outSince !== undefined && pass === 'probe') this.nextProbe = Math.max(this.nextProbe, this.now() + (err.retryAfterMs ?? this.probeWait()));
      return;
    }
    if (this.inRow++ === 0) this.failingSince = this.now();
    this.failing.add(key);
    const retryAfter = this.now() + (err.retryAfterMs ?? 0);
    if (this.outSince === undefined) {
      if (this.inRow < OUTAGE_AFTER || this.failing.size < 2) return;
      this.outSince = this.failingSince;
      this.log.warn({ failures: this.inRow, checks: this.failing.size, failure: err.status ?? err.code ?? 'network' }, 'the verification service is not answering; checks wait for it without using their attempts, one call at a time tries it');
      this.told.went?.(new Date(this.outSince));
    } else if (pass !== 'probe') {
      this.nextProbe = Math.max(this.nextProbe, retryAfter);
      return;
    }
    this.nextProbe = Math.max(this.now() + this.probeWait(), retryAfter);
    this.probes++;
  }

  private probeWait(): number {
    return Math.min(this.backoff.maxMs, PROBE_MAX_MS, this.backoff.baseMs * 2 ** this.probes);
  }
}
