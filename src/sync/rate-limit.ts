import { storeOutage } from './store-outage';

/**
 * Requests per second, as a token bucket: up to `perSecond` at once after a quiet spell, then
 * one every 1/perSecond seconds. One bucket for all requests and one per portal, so a slow payer
 * portal is not hammered while others go on at full rate.
 */
export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(
    private readonly perSecond: number,
    private readonly now: () => number = () => Date.now(),
  ) {
    this.tokens = perSecond;
    this.last = now();
  }

  /** Milliseconds to wait before a request may go; takes the token when it is 0. */
  reserve(): number {
    const now = this.now();
    // A clock stepped back (NTP) passed no time: counted, it would take an hour's tokens from the bucket for an hour's step.
    this.tokens = Math.min(this.perSecond, this.tokens + (Math.max(0, now - this.last) / 1000) * this.perSecond);
    this.last = now;
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens / this.perSecond) * 1000);
  }
}

export interface RateLimits {
  /** Requests per second to the service in all; 0 or absent for no limit. */
  perSecond?: number | undefined;
  /** Requests per second through one payer portal. */
  perPortalPerSecond?: number | undefined;
}

/** Milliseconds to wait for a token from a bucket shared with other instances (the job store's). */
export type SharedBuckets = (bucket: string, perSecond: number) => Promise<number>;

export class RateLimiter {
  private readonly local = new Map<string, TokenBucket>();

  /**
   * With `shared`, the buckets live in the job store, so every instance on one database draws
   * from the same ones (its own while the store is out of reach); without, each process keeps its own.
   */
  constructor(
    private readonly limits: RateLimits,
    private readonly shared?: SharedBuckets,
    private readonly sleep: (ms: number) => Promise<void> = (ms) => new Promise((r) => setTimeout(r, ms)),
  ) {}

  /** Resolves when a request through this portal may be sent. */
  async take(portalId: string | undefined): Promise<void> {
    const waits = await Promise.all([
      this.limits.perSecond ? this.reserve('service', this.limits.perSecond) : 0,
      portalId !== undefined && this.limits.perPortalPerSecond ? this.reserve(`portal:${portalId}`, this.limits.perPortalPerSecond) : 0,
    ]);
    const wait = Math.max(...waits);
    if (wait > 0) await this.sleep(wait);
  }

  private async reserve(bucket: string, perSecond: number): Promise<number> {
    if (this.shared) {
      try {
        return await this.shared(bucket, perSecond);
      } catch (err) {
        // The check is marked sent when it asks: failing it now would count an attempt the service
        // never saw. While the store is away, this process's own bucket keeps the same rate.
        if (!storeOutage(err)) throw err;
      }
    }
    let local = this.local.get(bucket);
    if (!local) this.local.set(bucket, (local = new TokenBucket(perSecond)));
    return local.reserve();
  }
}
