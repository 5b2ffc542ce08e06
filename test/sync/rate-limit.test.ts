import { StoreUnavailableError } from '../../src/sync/job-store';
import { RateLimiter, TokenBucket } from '../../src/sync/rate-limit';

describe('rate limits', () => {
  it('lets a burst of perSecond through, then spaces requests 1/perSecond apart', () => {
    let now = 0;
    const bucket = new TokenBucket(5, () => now);
    expect([1, 2, 3, 4, 5].map(() => bucket.reserve())).toEqual([0, 0, 0, 0, 0]);
    expect([bucket.reserve(), bucket.reserve()]).toEqual([200, 400]);
    now = 1000;
    expect(bucket.reserve()).toBe(0);
  });

  it('takes a clock stepped back as no time passed, not as tokens spent', () => {
    let now = 3_600_000;
    const bucket = new TokenBucket(5, () => now);
    expect(bucket.reserve()).toBe(0);
    // NTP steps the clock back an hour: the bucket still holds four tokens, not four less 18,000.
    now = 0;
    expect([1, 2, 3, 4].map(() => bucket.reserve())).toEqual([0, 0, 0, 0]);
    expect(bucket.reserve()).toBe(200);
  });

  it('waits for the slower of the service-wide and the portal bucket, and draws from shared buckets when given', async () => {
    const slept: number[] = [];
    const asked: string[] = [];
    const shared = async (bucket: string, perSecond: number) => {
      asked.push(`${bucket}@${perSecond}`);
      return bucket === 'portal:deltadentalins' ? 700 : 100;
    };
    const limiter = new RateLimiter({ perSecond: 20, perPortalPerSecond: 2 }, shared, async (ms) => void slept.push(ms));
    await limiter.take('deltadentalins');
    expect(asked).toEqual(['service@20', 'portal:deltadentalins@2']);
    expect(slept).toEqual([700]);
  });

  it('draws from its own bucket at the same rate while the store holding the shared ones is out of reach, and fails on any other fault', async () => {
    const slept: number[] = [];
    let fault: Error = new StoreUnavailableError(new Error('Connection terminated unexpectedly'));
    const limiter = new RateLimiter({ perPortalPerSecond: 2 }, () => Promise.reject(fault), async (ms) => void slept.push(ms));
    for (let i = 0; i < 4; i++) await limiter.take('deltadentalins');
    // A burst of two, then 1/2 s apart (the bucket refills as the test runs: a few ms less at most).
    expect(slept).toHaveLength(2);
    expect(slept[0]).toBeGreaterThan(450);
    expect(slept[1]).toBeGreaterThan(slept[0] as number);
    fault = new Error('relation "rate_buckets" does not exist');
    await expect(limiter.take('deltadentalins')).rejects.toThrow('rate_buckets');
  });
});
