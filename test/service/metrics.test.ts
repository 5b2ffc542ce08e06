import { SyncMetrics } from '../../src/service/metrics';
import type { JobStore } from '../../src/sync/job-store';

// The real prom-client, with collectDefaultMetrics counted: each call starts an observer and a timer that nothing stops.
const collections = { count: 0 };
jest.mock('prom-client', () => {
  const real = jest.requireActual<typeof import('prom-client')>('prom-client');
  return {
    ...real,
    collectDefaultMetrics: (...args: Parameters<typeof real.collectDefaultMetrics>) => {
      collections.count++;
      return real.collectDefaultMetrics(...args);
    },
  };
});

const store = { counts: async () => ({ checks: { written: 2 }, due: 0, awaitingInsurance: 0 }) } as unknown as JobStore;

describe('SyncMetrics', () => {
  it("gives each instance's own counts and the process's figures, collected once however many instances a process holds", async () => {
    const instances = Array.from({ length: 20 }, () => new SyncMetrics(store, () => new Date()));
    instances[0]?.webhooks.inc({ result: 'applied' });
    const [first, second] = await Promise.all([instances[0]?.text(), instances[1]?.text()]);
    expect(collections.count).toBe(1);
    for (const text of [first, second]) {
      expect(text?.match(/^# HELP process_resident_memory_bytes /gm)).toHaveLength(1);
      expect(text).toMatch(/^dental_elig_checks\{state="written"\} 2$/m);
    }
    expect(first).toMatch(/^dental_elig_webhooks_total\{result="applied"\} 1$/m);
    expect(second).not.toMatch(/^dental_elig_webhooks_total\{result="applied"\}/m);
  });
});
