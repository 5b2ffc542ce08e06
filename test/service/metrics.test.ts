import { STORE_ANSWER_MS, SyncMetrics } from '../../src/service/metrics';
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

const store = { counts: async () => ({ checks: { written: 2, 'needs-attention': 3 }, messages: { 'hl7:handled': 5, 'hl7:dead': 2, 'webhook:dead': 1 }, due: 0, awaitingInsurance: 0, awaitingCorrection: 2, forAPerson: 1 }) } as unknown as JobStore;

describe('SyncMetrics', () => {
  it("gives each instance's own counts and the process's figures, collected once however many instances a process holds", async () => {
    const instances = Array.from({ length: 20 }, () => new SyncMetrics(store, () => new Date()));
    instances[0]?.webhooks.inc({ result: 'applied' });
    const [first, second] = await Promise.all([instances[0]?.text(), instances[1]?.text()]);
    expect(collections.count).toBe(1);
    for (const text of [first, second]) {
      expect(text?.match(/^# HELP process_resident_memory_bytes /gm)).toHaveLength(1);
      expect(text).toMatch(/^dental_elig_checks\{state="written"\} 2$/m);
      // Of the three needing attention, the one no person has dismissed.
      expect(text).toMatch(/^dental_elig_checks_for_a_person 1$/m);
      // The bookings held for a correction of the patient's details, which a dismissed letter no longer counts.
      expect(text).toMatch(/^dental_elig_awaiting_correction 2$/m);
      // The dead letters a person has still to see, every kind named, none at 0.
      expect(text?.match(/^dental_elig_dead_letters\{.*$/gm)).toEqual(['dental_elig_dead_letters{kind="hl7"} 2', 'dental_elig_dead_letters{kind="webhook"} 1', 'dental_elig_dead_letters{kind="fhir-notification"} 0']);
    }
    expect(first).toMatch(/^dental_elig_webhooks_total\{result="applied"\} 1$/m);
    expect(second).toMatch(/^dental_elig_webhooks_total\{result="applied"\} 0$/m);
  });

  it('answers with everything but the store figures while the store does not, saying so', async () => {
    let down = false;
    const flaky = { counts: async () => (down ? Promise.reject(new Error('connect ECONNREFUSED')) : { checks: { written: 3 }, messages: {}, due: 1, awaitingInsurance: 0, awaitingCorrection: 0, forAPerson: 0 }) } as unknown as JobStore;
    const metrics = new SyncMetrics(flaky, () => new Date());
    expect(await metrics.text()).toMatch(/^dental_elig_store_up 1$/m);
    down = true;
    metrics.messages.inc({ type: 'SIU^S12', ack: 'AA' });
    const text = await metrics.text();
    expect(text).toMatch(/^dental_elig_store_up 0$/m);
    // What the store said last, and the process's own figures.
    expect(text).toMatch(/^dental_elig_checks\{state="written"\} 3$/m);
    expect(text).toMatch(/^dental_elig_messages_total\{type="SIU\^S12",ack="AA"\} 1$/m);
    expect(text).toMatch(/^process_resident_memory_bytes \d+$/m);
  });

  it('answers without the store figures when the store does not answer at all, as a database that stops answering without closing its connections does', async () => {
    // The pool would wait 10 s for a connection, 60 s for a query: past a scraper's timeout, the whole scrape lost.
    const silent = { counts: () => new Promise<never>(() => undefined) } as unknown as JobStore;
    const metrics = new SyncMetrics(silent, () => new Date());
    jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask', 'hrtime', 'performance', 'Date'] });
    try {
      const text = metrics.text();
      await jest.advanceTimersByTimeAsync(STORE_ANSWER_MS);
      expect(await text).toMatch(/^dental_elig_store_up 0$/m);
    } finally {
      jest.useRealTimers();
    }
  });
});
