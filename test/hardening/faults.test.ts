import type { CoverageEligibilityResponse } from 'fhir/r4';
import { msa } from '../service/mllp-client';
import { switchableProxy } from '../support/switchable-proxy';
import { searchFhir, startHarness, until, type Harness } from '../sync/harness';
import { booking, sleep } from '../support/bookings';
import { sized } from './soak';

/**
 * The service and the chart failing for a while in the middle of a batch: every booking is
 * answered AA (it is stored), nothing dies or waits for a person, and once the fault clears each
 * appointment gets exactly one response. npm test holds each fault a few seconds, the soak a minute.
 */
const OUTAGE_MS = sized(3_000, 60_000);
const BATCH = 20;
const SERVICE = /^\/v2\/insurance-verification/;

/** A sandbox fault that lasts while `on` is true: the sandbox asks the path pattern, and this one answers by the switch. */
function outage() {
  const state = { on: false, hits: 0 };
  const path = { test: (p: string) => state.on && SERVICE.test(p) && ++state.hits > 0 } as unknown as RegExp;
  return { state, path };
}

async function sendBatch(h: Harness, run: string, from: number, to: number): Promise<void> {
  for (let i = from; i < to; i++) {
    const acks = await h.sync.receiveHl7(booking(run, i));
    expect(acks.map((a) => msa(a.text).code)).toEqual(['AA']);
  }
}

/** Half the batch, the first check written, then the fault, then the other half while it lasts. */
async function batchAcrossFault(h: Harness, run: string, startFault: () => void): Promise<void> {
  await sendBatch(h, run, 0, BATCH / 2);
  await until('the first check written before the fault', async () => (await h.store.listChecks({ states: ['written'] })).length > 0);
  startFault();
  await sendBatch(h, run, BATCH / 2, BATCH);
  await sleep(OUTAGE_MS);
  await expectNothingLost(h, BATCH);
}

async function expectNothingLost(h: Harness, count: number): Promise<void> {
  const rows = await h.store.listChecks();
  expect(rows).toHaveLength(count);
  expect(rows.filter((r) => r.state === 'dead' || r.state === 'needs-attention').map((r) => `${r.state}: ${r.lastError}`)).toEqual([]);
}

async function expectEachWrittenOnce(h: Harness, count: number): Promise<void> {
  await until(`all ${count} checks written after the fault`, async () => (await h.store.listChecks({ states: ['written'] })).length === count, 60_000);
  const responses = (await searchFhir(h.fhir, `CoverageEligibilityResponse?_count=${count * 2}`)) as CoverageEligibilityResponse[];
  expect(responses).toHaveLength(count);
  expect(new Set(responses.map((r) => r.request.reference)).size).toBe(count);
  expect(responses.every((r) => r.outcome === 'complete')).toBe(true);
}

describe(`faults held for ${OUTAGE_MS / 1000} s in the middle of a batch`, () => {
  let h: Harness | undefined;
  afterEach(async () => {
    await h?.close();
    h = undefined;
  });
  // Retries every 0.05 to 2 s, the default eight attempts: a minute-long fault would take some 40,
  // but the service is found out after five failures in a row and the checks wait for it without using theirs.
  const settings = { backoffBaseMs: 50, backoffMaxMs: 2000 };

  it.each([
    ['answering 503', { status: 503, retryAfterSeconds: 0 }],
    ['timing out', { delayMs: 1500 }],
  ])('the service %s: every booking stored, none given up, each written once after', async (_what, fault) => {
    h = await startHarness({ settings, service: { timeoutMs: 400, maxRetries: 0 } });
    const { state, path: faultPath } = outage();
    h.sandbox.injectFault({ path: faultPath, times: Infinity, ...fault });
    await batchAcrossFault(h, 'S', () => (state.on = true));
    expect(state.hits).toBeGreaterThan(0);
    expect((await h.store.listChecks({ states: ['written'] })).length).toBeLessThan(BATCH);
    state.on = false;
    await expectEachWrittenOnce(h, BATCH);
    await expectNothingLost(h, BATCH);
  }, OUTAGE_MS + 90_000);

  it('the FHIR server down: results wait in the store, each written once it is back', async () => {
    let proxy: Awaited<ReturnType<typeof switchableProxy>> | undefined;
    h = await startHarness({
      settings,
      fhirVia: async (url) => {
        proxy = await switchableProxy(Number(new URL(url).port));
        return url.replace(`:${new URL(url).port}/`, `:${proxy.port}/`);
      },
    });
    if (!proxy) throw new Error('no proxy');
    const chart = proxy;
    await batchAcrossFault(h, 'F', () => (chart.down = true));
    expect((await h.store.listChecks({ states: ['result-stored'] })).length).toBeGreaterThan(0);
    proxy.down = false;
    await expectEachWrittenOnce(h, BATCH);
    await proxy.close();
  }, OUTAGE_MS + 90_000);
});
