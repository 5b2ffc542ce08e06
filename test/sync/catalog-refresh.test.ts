import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { frame } from '../../src/service/mllp-framing';
import { MllpListener } from '../../src/service/mllp-listener';
import { CATALOG_ASK_AGAIN_MS } from '../../src/service/catalog-keeper';
import { segment } from '../adapters/hl7/segment';
import { FEATURE_ASYNC, FEATURE_SYNC } from '../../src/verification/wire';
import { client } from '../service/mllp-client';
import { bookingFor } from '../support/bookings';
import { createEligibilitySync } from '../../src/service/eligibility-sync';
import { createLogger } from '../../src/service/logger';
import { keepOutageStart } from '../../src/sync/outage-record';
import { FAST, startHarness, until, type Harness } from './harness';

/** A booking naming its payer by an id and a name the sandbox's network does not list until the test adds the id (MetLife's). */
const booking = (id: string) =>
  [
    `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20261123090000||SIU^S12^SIU_S12|${id}|P|2.5.1`,
    `SCH|APT-${id}^SC||||||||||^^^20261210093000`,
    `PID|1||P-${id}^^^SC^MR||DOE^JANE||19800102|F`,
    segment('IN1', { 1: '1', 3: 'MLD77', 4: 'MetLife Dental Select', 17: 'SEL', 36: 'SBX-COMPLETE' }),
  ].join('\r');

const NEW_ID = { alternatePayerIds: ['METLIFE', 'MLD77'] };

/** The payer network changes while serve runs for weeks: its catalog follows, or a payer that joined since would need a person for each check. */
describe('the payer catalog of a running sync', () => {
  let h: Harness | undefined;
  let listener: { stop(): Promise<void>; port: number } | undefined;
  afterEach(async () => {
    await listener?.stop();
    await h?.close();
    h = listener = undefined;
  });

  const send = async (id: string, message = booking(id)) => {
    if (!listener) {
      const started = new MllpListener({ handler: (m) => (h as Harness).sync.receiveHl7(m) });
      listener = { stop: () => started.stop(), port: (await started.start()).port };
    }
    const c = await client(listener.port);
    c.socket.write(frame(message));
    expect((await c.waitFor(1))[0]).toContain(`MSA|AA|${id}`);
    c.socket.end();
  };
  const checkOf = (id: string) => async () => (await (h as Harness).store.listChecks()).find((c) => c.check.patient.identifiers[0]?.value === `P-${id}` && ['written', 'needs-attention'].includes(c.state));
  const payerReads = () => (h as Harness).sandbox.requestLog.filter((r) => r.method === 'GET' && r.path.startsWith('/v2/network/payers')).map((r) => r.path);
  const saved = () => readFileSync(path.join((h as Harness).dataDir, 'catalog.json'), 'utf8');

  it('is brought up to date for a payer it does not know, at most every five minutes, and the check verified', async () => {
    let clock = Date.parse('2026-11-23T12:00:00Z');
    h = await startHarness({ now: () => new Date(clock) });
    const atStart = payerReads().length;
    h.sandbox.updatePayer('M6MET1', NEW_ID);

    // Just fetched at start: the catalog is not asked for again, and the check is for a person, as before.
    await send('U1');
    const first = await until('U1 answered', checkOf('U1'));
    expect(first.state).toBe('needs-attention');
    expect(first.lastError).toMatch(/^PayerNotResolved: /);
    expect(payerReads()).toHaveLength(atStart);

    clock += CATALOG_ASK_AGAIN_MS + 1000;
    await send('U2');
    const second = await until('U2 answered', checkOf('U2'));
    expect([second.state, second.lastError]).toEqual(['written', undefined]);
    // Only what changed since the catalog was taken, and saved for a restart.
    expect(payerReads().slice(atStart)).toEqual([expect.stringContaining('updatedSince=')]);
    expect(saved()).toContain('MLD77');
  });

  it('is brought up to date, whole, for a payer it does not know after the clock is stepped back', async () => {
    let clock = Date.parse('2026-11-23T12:00:00Z');
    h = await startHarness({ now: () => new Date(clock) });
    const atStart = payerReads().length;
    h.sandbox.updatePayer('M6MET1', NEW_ID);
    // NTP steps the clock back an hour: the catalog was asked for at start, an hour from now by this clock.
    clock -= 3_600_000;
    await send('U1');
    const verified = await until('U1 answered', checkOf('U1'));
    expect([verified.state, verified.lastError]).toEqual(['written', undefined]);
    // What changed since the start's time would be nothing: the service's clock has not reached it.
    expect(payerReads().slice(atStart)).toEqual([expect.not.stringContaining('updatedSince=')]);
  });

  it('is brought up to date every catalogRefreshMs', async () => {
    h = await startHarness({ settings: { ...FAST, catalogRefreshMs: 100 } });
    const atStart = payerReads().length;
    h.sandbox.updatePayer('M6MET1', NEW_ID);
    await until('the saved catalog names the new id', async () => saved().includes('MLD77'));
    expect(payerReads().length).toBeGreaterThan(atStart);
    // Known from the timed refresh: the clock has not moved far enough for a check to ask again.
    await send('U3');
    expect((await until('U3 answered', checkOf('U3'))).state).toBe('written');
  });

  it('lists the whole network a day after it was last listed whole, not only what changed', async () => {
    let clock = Date.parse('2026-11-23T12:00:00Z');
    h = await startHarness({ now: () => new Date(clock), settings: { ...FAST, catalogRefreshMs: 100 } });
    const atStart = payerReads().length;
    await until('a refresh of what changed', async () => payerReads().slice(atStart).some((p) => p.includes('updatedSince=')));
    clock += 24 * 3600_000;
    const before = payerReads().length;
    await until('a whole listing', async () => payerReads().slice(before).some((p) => !p.includes('updatedSince=')));
  });

  it('keeps the catalog it has while the service does not give it, said once, and takes it up again', async () => {
    h = await startHarness({ settings: { ...FAST, catalogRefreshMs: 50 } });
    // Three refreshes refused, each sent five times (the client's retries).
    h.sandbox.injectFault({ method: 'GET', path: '/v2/network/payers', status: 503, times: 15 });
    h.sandbox.updatePayer('M6MET1', NEW_ID);
    const said = (text: string) => (h as Harness).logs.filter((line) => line.includes(text));
    await until('refreshed again', async () => said('payer catalog refreshed again').length > 0);
    expect(h.sandbox.requestLog.filter((r) => r.path.startsWith('/v2/network/payers') && r.status === 503)).toHaveLength(15);
    expect(said('payer catalog refresh failed; using the one it has')).toHaveLength(1);
    // The client's retries are warned of at the first refresh that failed, not again at each after until one succeeds.
    const retries = said('list payer network: ').map((line) => (JSON.parse(line) as { level: number }).level);
    expect(retries).toEqual([...Array(4).fill(40), ...Array(8).fill(20)]);
    await until('saved', async () => saved().includes('MLD77'));
  });

  it('says the service out as a restart in its outage begins, while the catalog is asked for, not only once the worker starts', async () => {
    h = await startHarness();
    const harness = h;
    // A sync before this one found the service out, and stopped; the store keeps when.
    await harness.sync.stop();
    const since = new Date(Date.now() - 60_000);
    await keepOutageStart(harness.store, since);
    // The service still away: the catalog is asked for and not yet answered.
    harness.sandbox.injectFault({ method: 'GET', path: '/v2/network/payers', delayMs: 1500 });
    const again = createEligibilitySync({
      store: harness.store,
      dataDir: harness.dataDir,
      service: { baseUrl: harness.sandbox.url, apiKey: harness.sandbox.apiKey },
      fhir: { baseUrl: harness.fhir.url },
      settings: FAST,
      logger: createLogger({ level: 'silent' }),
    });
    const starting = again.start();
    try {
      await until('the catalog asked for', async () => harness.sandbox.requestLog.some((r) => r.path.startsWith('/v2/network/payers') && r.status === 0));
      // An alert on dental_elig_service_up == 0 for 5m was cleared by each restart, as /healthz said 'no calls yet' meanwhile.
      expect(await again.metrics.registry.getSingleMetricAsString('dental_elig_service_up')).toMatch(/dental_elig_service_up 0$/);
      expect((await again.health()).service).toBe(`not answering since ${since.toISOString()}: checks wait for it`);
    } finally {
      await starting;
      await again.stop();
    }
  });

  it('takes no more checks once stopped while a refresh is under way, which it waits for', async () => {
    h = await startHarness({ settings: { ...FAST, catalogRefreshMs: 50 } });
    // The next refresh is answered slowly: the stop comes while it is under way.
    h.sandbox.injectFault({ method: 'GET', path: '/v2/network/payers', delayMs: 2000 });
    await until('a refresh under way', async () => (h as Harness).sandbox.requestLog.some((r) => r.path.startsWith('/v2/network/payers') && r.status === 0));
    const stopping = h.sync.stop();
    // Stored (the store is the harness's, still open) and left for the next start.
    await send('S1', bookingFor('S1', 'SBX-COMPLETE'));
    await stopping;
    expect(h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.startsWith('/v2/insurance-verification'))).toEqual([]);
    expect((await h.store.listChecks()).map((c) => c.state)).toEqual(['received']);
    expect(h.sandbox.requestLog.filter((r) => r.path.startsWith('/v2/network/payers')).at(-1)?.status).toBe(200);
  });

  it('starts on a fresh data dir while the service is away, takes what arrives, and verifies it once the catalog is given', async () => {
    // The catalog refused at start and at each try until the faults are cleared (no retries by the client).
    const refused = { method: 'GET', path: '/v2/network/payers', status: 503, times: Infinity } as const;
    h = await startHarness({ faults: [refused], service: { maxRetries: 0 }, settings: { ...FAST, backoffBaseMs: 50, backoffMaxMs: 100 } });
    await until('tried again', async () => (h as Harness).sandbox.requestLog.filter((r) => r.path.startsWith('/v2/network/payers')).length >= 3);
    const health = await h.sync.health();
    expect(health.service).toMatch(/^no payer catalog yet \(.*503.*\): checks wait for it$/);
    expect(await h.sync.metrics.registry.getSingleMetricAsString('dental_elig_service_up')).toMatch(/dental_elig_service_up 0$/);
    h.sandbox.updatePayer('M6MET1', NEW_ID);
    await send('U4');
    // Taken and stored, not sent: the worker waits for the catalog.
    expect((await h.store.listChecks()).map((c) => c.state)).toEqual(['received']);
    h.sandbox.clearFaults();
    const checked = await until('U4 answered', checkOf('U4'));
    expect([checked.state, checked.lastError]).toEqual(['written', undefined]);
    expect(h.logs.filter((line) => line.includes('none is saved; messages are taken, and checks wait for it'))).toHaveLength(1);
    expect(h.logs.filter((line) => line.includes('payer catalog fetched; checks go on'))).toHaveLength(1);
    expect((await h.sync.health()).service).not.toMatch(/catalog/);
    expect(saved()).toContain('MLD77');
  });

  it('does not start on a fresh data dir when the service refuses the catalog: a key or URL to fix, not an outage to wait out', async () => {
    await expect(startHarness({ faults: [{ method: 'GET', path: '/v2/network/payers', status: 401, times: 1 }], service: { maxRetries: 0 } })).rejects.toThrow(
      /^payer catalog: cannot be fetched from the service and none is saved \(.*401/,
    );
  });

  it('sends a check the service refused as built from an older catalog again, the way the payer is verified now', async () => {
    let clock = Date.parse('2026-11-23T12:00:00Z');
    h = await startHarness({ now: () => new Date(clock) });
    // Cigna gives up asynchronous verification after the catalog was fetched.
    h.sandbox.updatePayer('C2CIG8', { features: { [FEATURE_SYNC]: { supported: true, portals: ['cignaforhcp'] }, [FEATURE_ASYNC]: { supported: false, portals: [] } } });
    clock += CATALOG_ASK_AGAIN_MS + 1000;
    await send('C1', bookingFor('C1', 'SBX-COMPLETE'));
    const checked = await until('C1 answered', checkOf('C1'));
    expect([checked.state, checked.mode, checked.round]).toEqual(['written', 'sync', 1]);
    const sends = h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.startsWith('/v2/insurance-verification')).map((r) => [r.path, r.status]);
    expect(sends).toEqual([
      ['/v2/insurance-verification-requests', 422],
      ['/v2/insurance-verifications', 201],
    ]);
  });
});
