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
    this.tokens = Math.min(this.perSecond, this.tokens + ((now - this.last) / 1000) * this.perSecond);
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

export class RateLimiter {
  private readonly global: TokenBucket | undefined;
  private readonly portals = new Map<string, TokenBucket>();

  constructor(
    private readonly limits: RateLimits,
    private readonly sleep: (ms: number) => Promise<void> = (ms) => new Promise((r) => setTimeout(r, ms)),
  ) {
    this.global = limits.perSecond ? new TokenBucket(limits.perSecond) : undefined;
  }

  /** Resolves when a request through this portal may be sent. */
  async take(portalId: string | undefined): Promise<void> {
    const waits = [this.global?.reserve() ?? 0, portalId === undefined ? 0 : (this.portalBucket(portalId)?.reserve() ?? 0)];
    const wait = Math.max(...waits);
    if (wait > 0) await this.sleep(wait);
  }

  private portalBucket(portalId: string): TokenBucket | undefined {
    const rate = this.limits.perPortalPerSecond;
    if (!rate) return undefined;
    let bucket = this.portals.get(portalId);
    if (!bucket) this.portals.set(portalId, (bucket = new TokenBucket(rate)));
    return bucket;
  }
}
