import { performance } from 'node:perf_hooks';
import { requestLatencyMs, startSandbox } from '../../src/sandbox';
import { call } from './helpers';

describe('sandbox latency', () => {
  it('holds every request for latencyMs ± latencyJitterMs, the answer unchanged', async () => {
    const sandbox = await startSandbox({ seed: true, timing: { latencyMs: 150, latencyJitterMs: 50 } });
    try {
      for (let i = 0; i < 3; i++) {
        const start = performance.now();
        const answer = await call(sandbox, 'GET', `/v2/customers/${sandbox.customerId}/organizations`);
        const took = performance.now() - start;
        expect(answer.status).toBe(200);
        // Timers may fire a millisecond early. How much longer it took is the machine's load (786 ms on a loaded CI run):
        // the latency drawn is bounded by the test below, not by a clock here.
        expect(took).toBeGreaterThanOrEqual(99);
      }
    } finally {
      await sandbox.close();
    }
  });

  it('spreads the latency uniformly over the jitter, never below zero', () => {
    const timing = { latencyMs: 300, latencyJitterMs: 100 };
    expect(requestLatencyMs(timing, () => 0)).toBe(200);
    expect(requestLatencyMs(timing, () => 0.5)).toBe(300);
    expect(requestLatencyMs(timing, () => 1)).toBe(400);
    expect(requestLatencyMs({ latencyMs: 10, latencyJitterMs: 50 }, () => 0)).toBe(0);
  });
});
