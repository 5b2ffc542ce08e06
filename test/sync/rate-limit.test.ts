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
});
