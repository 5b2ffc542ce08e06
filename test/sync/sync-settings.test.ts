import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { generateWebhookSecret, startSandbox, type Sandbox } from '../../src/sandbox';
import { createEligibilitySync, SyncSettings, type EligibilitySyncConfig } from '../../src/service/eligibility-sync';
import { startHttpServer } from '../../src/service/http-server';
import { WEBHOOK_PATH } from '../../src/verification/webhook';
import { createLogger } from '../../src/service/logger';
import { openJobStore } from '../../src/sync/open-store';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { Database } from '../../src/sync/sqlite-driver';
import { VerificationClient } from '../../src/verification/client';
import { PayerCatalog } from '../../src/verification/payer-catalog';
import { freshModules } from '../support/fresh-modules';
import { json, startScriptedServer } from '../support/http-server';
import { nobodyHolds } from './harness';

/** Settings that would make the worker spin or wait backwards are refused up front, naming the setting. */
describe('SyncSettings', () => {
  let dataDir: string;
  beforeEach(() => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'elig-settings-'));
  });
  afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

  // Refused before anything is opened: the folder stays empty.
  const create = (settings: SyncSettings) => () =>
    createEligibilitySync({ dataDir, service: { baseUrl: 'http://127.0.0.1:1', apiKey: 'k' }, fhir: { baseUrl: 'http://127.0.0.1:1/fhir' }, settings });

  it('refuses a backoff that starts above its ceiling', () => {
    expect(create({ backoffBaseMs: 10_000, backoffMaxMs: 5000 })).toThrow('settings.backoffBaseMs: must not exceed backoffMaxMs (5000)');
  });

  it('names a setting it does not know', () => {
    expect(create({ setings: 1 } as unknown as SyncSettings)).toThrow(/^settings: Unrecognized key: "setings"$/);
  });

  it('refuses a span past the dates a check can be given (a hundred years), naming the setting', () => {
    // Each was added to a date at every check's step: 'Invalid time value', a failed step a check, the checks still written.
    for (const setting of ['webhookDeadlineMs', 'pollAfterMs', 'pendingGiveUpMs', 'throttledGiveUpMs'] as const) {
      expect(create({ [setting]: 9_000_000_000_000_000 })).toThrow(new RegExp(`^settings\\.${setting}: must be at most 3153600000000 \\(a hundred years\\)$`));
    }
    for (const setting of ['reverifyLeadDays', 'freshnessDays', 'fhirPollDays'] as const) {
      expect(create({ [setting]: 1e9 })).toThrow(new RegExp(`^settings\\.${setting}: must be at most 36500 \\(a hundred years\\)$`));
    }
    expect(readdirSync(dataDir)).toEqual([]);
  });

  it('refuses polling a Pending verification with no wait between polls', () => {
    expect(create({ pollAfterMs: 0 })).toThrow(/^settings.pollAfterMs: /);
    expect(readdirSync(dataDir)).toEqual([]);
  });

  it('refuses a catalog refresh longer than a timer waits, which would read the catalog without a pause', () => {
    expect(create({ catalogRefreshMs: 2_592_000_000 })).toThrow('settings.catalogRefreshMs: must be at most 2147483647 (about 24 days), the longest a timer waits');
    // Each setting a timer waits for: a lease's heartbeat, the worker's look, a backoff, the FHIR poll.
    for (const key of ['leaseMs', 'idleMs', 'backoffMaxMs', 'fhirPollIntervalMs']) {
      expect(create({ [key]: 2_147_483_648 })).toThrow(`settings.${key}: must be at most 2147483647`);
    }
    expect(SyncSettings.parse({ catalogRefreshMs: 2_147_483_647 })).toMatchObject({ catalogRefreshMs: 2_147_483_647 });
  });

  it("refuses a chart timeout longer than a timer waits, which would give up every request to the chart at once", () => {
    // AbortSignal.timeout fires such a timer at once: each write would fail as the chart not answering in time, and be retried forever.
    expect(() => createEligibilitySync({ dataDir, service: { baseUrl: 'http://127.0.0.1:1', apiKey: 'k' }, fhir: { baseUrl: 'http://127.0.0.1:1/fhir', timeoutMs: 2_147_483_648 } })).toThrow(
      'fhir.timeoutMs: must be at most 2147483647 (about 24 days), the longest a timer waits',
    );
    expect(readdirSync(dataDir)).toEqual([]);
  });

  it('keeps the defaults and takes a base equal to the ceiling', () => {
    expect(SyncSettings.parse({})).toMatchObject({ backoffBaseMs: 2000, backoffMaxMs: 300_000, pollAfterMs: 5000 });
    expect(SyncSettings.parse({ backoffBaseMs: 400, backoffMaxMs: 400 })).toMatchObject({ backoffBaseMs: 400, backoffMaxMs: 400 });
  });
});

/** An embedder that catches a failed creation or start and tries again in the same process finds nothing of the first left open. */
describe('a sync that fails to be created or started', () => {
  let dataDir: string;
  beforeEach(() => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'elig-failed-'));
  });
  afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

  const config = (over: Partial<EligibilitySyncConfig> = {}): EligibilitySyncConfig => ({
    dataDir,
    service: { baseUrl: 'http://127.0.0.1:1', apiKey: 'k', maxRetries: 0 },
    fhir: { baseUrl: 'http://127.0.0.1:1/fhir' },
    logger: createLogger({ level: 'silent' }),
    ...over,
  });
  const storeFile = () => path.join(dataDir, 'dental-elig.sqlite');

  it('refuses a webhook secret that is not one before it opens the store', () => {
    expect(() => createEligibilitySync(config({ webhook: { scheme: 'standard-webhooks', secret: 'not-a-secret' } }))).toThrow(/^webhook\.secret: /);
    // Base64 without the whsec_ prefix: the standardwebhooks library would take it.
    expect(() => createEligibilitySync(config({ webhook: { scheme: 'standard-webhooks', secret: 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' } }))).toThrow(/^webhook\.secret: must be a Standard Webhooks secret, whsec_ followed by base64$/);
    expect(readdirSync(dataDir)).toEqual([]);
  });

  it('refuses a chart it cannot write to before it opens the store, not after each check is verified', () => {
    // From JavaScript, or an environment variable left unset (README's example reads DENTAL_ELIG_FHIR_URL).
    const fhir = (value: unknown) => () => createEligibilitySync(config({ fhir: value as EligibilitySyncConfig['fhir'] }));
    expect(fhir(undefined)).toThrow(/^fhir: is required \(baseUrl, or a writer of your own\)$/);
    expect(fhir({ baseUrl: '' })).toThrow(/^fhir\.baseUrl: must be an http\(s\) URL$/);
    expect(fhir({ baseURL: 'http://127.0.0.1:1/fhir' })).toThrow(/^fhir\.baseUrl: must be an http\(s\) URL$/);
    expect(fhir({ baseUrl: 'chart.example/fhir' })).toThrow(/^fhir\.baseUrl: must be an http\(s\) URL$/);
    // fetch would repeat the URL, password and all, in every failed write's error and log line.
    expect(fhir({ baseUrl: 'https://elig:s3cret@chart.example/fhir' })).toThrow(/^fhir\.baseUrl: credentials do not belong in the URL; give bearerToken or smart$/);
    // Plain http across a network would carry the token and patient data unencrypted, as it would to the service.
    expect(fhir({ baseUrl: 'http://chart.example/fhir', bearerToken: 'secret-token' })).toThrow(
      /^fhir\.baseUrl: plain http to a host other than this machine would send the chart's access token and patient data unencrypted; use https, or allow it explicitly \(fhir\.allowInsecureHttp\)$/,
    );
    expect(fhir({ baseUrl: 'http://' })).toThrow(/^fhir\.baseUrl: must be an http\(s\) URL$/);
    // The SMART token endpoint too: the access token it answers opens the chart.
    expect(fhir({ baseUrl: 'https://chart.example/fhir', smart: { clientId: 'elig', privateKey: 'pem', tokenEndpoint: 'http://auth.example/token' } })).toThrow(
      /^fhir\.smart\.tokenEndpoint: plain http to a host other than this machine would send the client assertion and the access token unencrypted; use https, or allow it explicitly \(fhir\.allowInsecureHttp\)$/,
    );
    expect(fhir({ baseUrl: 'http://127.0.0.1:1/fhir', bearertoken: 'secret-token' })).toThrow(/^fhir: Unrecognized key: "bearertoken"$/);
    expect(fhir({ baseUrl: 'http://127.0.0.1:1/fhir', timeoutMs: -1 })).toThrow(/^fhir\.timeoutMs: /);
    expect(readdirSync(dataDir)).toEqual([]);
  });

  it('refuses clinic routing given inline that clinics.json would be refused for, naming the key, before it opens the store', async () => {
    const routing = (value: unknown) => () => createEligibilitySync(config({ routing: value as EligibilitySyncConfig['routing'] }));
    // Else every FHIR appointment would fail on it ('Invalid time zone specified'), each retried as if the chart were down.
    expect(routing({ timeZone: 'Pacific Time', routes: [] })).toThrow(/^routing\.timeZone: must be an IANA time zone, such as America\/Los_Angeles$/);
    expect(routing({ defaultClinicId: 'cln_main' })).toThrow(/^routing\.routes: /);
    expect(readdirSync(dataDir)).toEqual([]);
    await createEligibilitySync(config({ routing: { timeZone: 'America/Los_Angeles', defaultClinicId: 'cln_main', routes: [] } })).stop();
  });

  it('takes a chart on this machine, over https, or over plain http when the deployment allows it', async () => {
    for (const fhir of [{ baseUrl: 'http://chart.example/fhir', allowInsecureHttp: true }, { baseUrl: 'HTTPS://chart.example/fhir' }, { baseUrl: 'http://localhost:8080/fhir' }]) {
      await createEligibilitySync(config({ fhir })).stop();
    }
  });

  it('refuses a key it does not know, an empty data dir and no service, naming each, before it opens the store', () => {
    const create = (value: Record<string, unknown>) => () => createEligibilitySync(value as unknown as EligibilitySyncConfig);
    // From JavaScript or JSON, a misspelt key would otherwise run the sync on the defaults it was meant to change.
    expect(create({ ...config(), setings: { concurrency: 2 } })).toThrow(/^config: Unrecognized key: "setings"$/);
    expect(create({ ...config(), datadir: dataDir })).toThrow(/^config: Unrecognized key: "datadir"$/);
    // An environment variable left unset: the store would open in the current folder.
    expect(create({ ...config(), dataDir: '' })).toThrow(/^dataDir: must not be empty \(leave it out for \.dental-elig\/data\)$/);
    // Spaces too, as serve refuses them: the store would open in a folder named by them.
    expect(create({ ...config(), dataDir: '  ' })).toThrow(/^dataDir: must not be empty \(leave it out for \.dental-elig\/data\)$/);
    const { service: _service, ...withoutService } = config();
    expect(create(withoutService)).toThrow(/^service: is required: the service's baseUrl and apiKey, or a client of your own$/);
    expect(readdirSync(dataDir)).toEqual([]);
  });

  it('refuses a store that is a location or a promise, naming it, before it opens anything', async () => {
    const create = (store: unknown) => () => createEligibilitySync(config({ store: store as EligibilitySyncConfig['store'] }));
    // serve's config names its store by URL; here it is the store, opened.
    expect(create('postgres://elig@db.internal/eligibility')).toThrow(/^store: must be a job store, not a location: open it with openJobStore\(location, dataDir\)$/);
    const opening = openJobStore(undefined, dataDir);
    try {
      expect(create(opening)).toThrow(/^store: is a promise: await openJobStore\(…\) before handing it over$/);
    } finally {
      await (await opening).close();
    }
  });

  it('refuses a clock, a logger, a catalog or mappings of the wrong kind, naming each, before it opens the store', () => {
    const create = (value: Record<string, unknown>) => () => createEligibilitySync(config(value as Partial<EligibilitySyncConfig>));
    // From JavaScript: each failed later in words of its own ('options.now is not a function'), a catalog only when a check was resolved.
    expect(create({ now: '2026-11-25T09:00:00Z' })).toThrow(/^now: must be a function returning the time as a Date$/);
    expect(create({ logger: true })).toThrow(/^logger: must be a pino logger \(createLogger\), or left out$/);
    // Without debug it would fail where the sync first logs at debug (each check verified): logger[level] is not a function.
    expect(create({ logger: { info() {}, warn() {}, error() {} } })).toThrow(/^logger: must be a pino logger \(createLogger\), or left out$/);
    expect(create({ catalog: ['Guardian'] })).toThrow(/^catalog: must be a PayerCatalog \(PayerCatalog\.load\), or left out to keep it from the service$/);
    expect(create({ mappings: 'mappings/' })).toThrow(/^mappings: must be what loadHl7Mappings\(folder\) returns, or left out for mappings\/$/);
    expect(readdirSync(dataDir)).toEqual([]);
  });

  it('refuses service settings it cannot use, naming them under service, before it opens the store', () => {
    const service = (value: unknown) => () => createEligibilitySync(config({ service: value as EligibilitySyncConfig['service'] }));
    // The client's own words named no key of the sync: 'config: Unrecognized key' read as a key of the sync itself, 'baseUrl' as the chart's.
    expect(service({ baseUrl: 'http://127.0.0.1:1', apiKey: 'k', timeoutMS: 5000 })).toThrow(/^service: Unrecognized key: "timeoutMS"$/);
    expect(service({ baseUrl: 'chart.example', apiKey: 'k' })).toThrow(/^service\.baseUrl: must be an http\(s\) URL$/);
    expect(service({ baseUrl: 'http://127.0.0.1:1' })).toThrow(/^service\.apiKey: /);
    expect(readdirSync(dataDir)).toEqual([]);
  });

  it('refuses inline portal credentials it cannot send, naming the portal and the field, before it opens the store', () => {
    const inline = (value: unknown) => () => createEligibilitySync(config({ inlineCredentials: value as EligibilitySyncConfig['inlineCredentials'] }));
    // Read from a JSON file by an embedder: the password left out failed start() as the service unreachable.
    expect(inline({ deltadentalins: { username: 'lakeside' } })).toThrow(/^inlineCredentials\.deltadentalins\.password: /);
    expect(inline({ deltadentalins: { username: 'lakeside', pasword: 'x' } })).toThrow(/^inlineCredentials\.deltadentalins/);
    expect(inline('deltadentalins')).toThrow(/^inlineCredentials: /);
    expect(readdirSync(dataDir)).toEqual([]);
  });

  it('says it has no payer catalog yet, without a failure, before its first fetch has failed', async () => {
    const sync = createEligibilitySync(config());
    // Asked by a probe while serve or an embedder starts: the first fetch under way, or not begun, has no failure to quote.
    expect((await sync.health()).service).toBe('no payer catalog yet: checks wait for it');
    await sync.stop();
  });

  it('refuses what arrives once it is stopped, saying so, not with its closed store\'s error', async () => {
    const sync = createEligibilitySync(config());
    await sync.stop();
    const stopped = /^this eligibility sync is stopped: nothing more is received \(create another\)$/;
    await expect(sync.receiveHl7('MSH|^~\\&|PMS|BSD|ELIG|BSD|20261123090000||SIU^S12|1|P|2.5.1')).rejects.toThrow(stopped);
    await expect(sync.deadLetterHl7({ message: 'garbage', reason: 'unframed' })).rejects.toThrow(stopped);
    await expect(sync.notifyAppointment('apt-1')).rejects.toThrow(stopped);
    await expect(sync.pollAppointments()).rejects.toThrow(stopped);
    // A store handed over is the caller's, still open: what arrives is stored for the next sync to work.
    const store = SqliteJobStore.open(dataDir);
    try {
      const handed = createEligibilitySync(config({ store }));
      await handed.stop();
      const [ack] = await handed.receiveHl7('MSH|^~\\&|PMS|BSD-MAIN|ELIG|BSD|20261123090000||ADT^A08^ADT_A01|H1|P|2.5.1\rPID|1||P-1^^^SC^MR||DOE^JANE||19800102|F');
      expect(ack?.code).toBe('AA');
      expect((await store.listMessages()).length).toBe(1);
    } finally {
      await store.close();
    }
  });

  it('refuses a FHIR mapping it cannot use before it opens the store, not at the first check it writes', () => {
    freshModules({ DENTAL_ELIG_FHIR_EXTENSION_BASE: 'fhir.example-clinic.org' }, () => {
      const { createEligibilitySync: create } = jest.requireActual<typeof import('../../src/service/eligibility-sync')>('../../src/service/eligibility-sync');
      expect(() => create(config())).toThrow(/^DENTAL_ELIG_FHIR_EXTENSION_BASE: must be an absolute URL$/);
    });
    expect(readdirSync(dataDir)).toEqual([]);
  });

  /** A service that refuses the key: the payer catalog cannot be fetched on a first start, and the start fails (an outage would be waited out). */
  const refusing = async (test: (baseUrl: string) => Promise<void>) => {
    const service = await startScriptedServer((_req, res) => json(res, 401, { type: 'about:blank', title: 'Unauthorized', status: 401 }));
    try {
      await test(service.url);
    } finally {
      await service.close();
    }
  };

  it('closes its store when start() cannot load the payer catalog', () =>
    refusing(async (baseUrl) => {
      const sync = createEligibilitySync(config({ service: { baseUrl, apiKey: 'k', maxRetries: 0 } }));
      await expect(sync.start()).rejects.toThrow(/^payer catalog: cannot be fetched/);
      expect(nobodyHolds(storeFile())).toBe(true);
      await expect(sync.start()).rejects.toThrow(/stopped \(or failed to start\); create another/);
      await sync.stop();
    }));

  it('closes its store when start() fails and closing its service client fails too, and gives the start\'s failure', async () => {
    const clientClose = jest.spyOn(VerificationClient.prototype, 'close').mockRejectedValueOnce(new Error('the client would not close'));
    try {
      await refusing(async (baseUrl) => {
        const sync = createEligibilitySync(config({ service: { baseUrl, apiKey: 'k', maxRetries: 0 } }));
        await expect(sync.start()).rejects.toThrow(/^payer catalog: cannot be fetched/);
        expect(clientClose).toHaveBeenCalledTimes(1);
        expect(nobodyHolds(storeFile())).toBe(true);
      });
    } finally {
      clientClose.mockRestore();
    }
  });

  it('answers a webhook or a notification after stop() 503, to be sent again, not 500 with the closed store in the log', async () => {
    const logs: string[] = [];
    const logger = createLogger({ level: 'debug', destination: { write: (line: string) => logs.push(line) } as unknown as NodeJS.WritableStream });
    const catalog = new PayerCatalog({ syncedAt: '2026-11-24T00:00:00Z', payers: [], portals: [] });
    const sync = createEligibilitySync(config({ catalog, logger, webhook: { scheme: 'standard-webhooks', secret: generateWebhookSecret() } }));
    const http = await startHttpServer(() => sync);
    try {
      await sync.start();
      await sync.stop();
      const post = (to: string) => fetch(`http://127.0.0.1:${http.port}${to}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      const webhook = await post(WEBHOOK_PATH);
      expect([webhook.status, webhook.headers.get('retry-after'), ((await webhook.json()) as { detail: string }).detail]).toEqual([503, '5', 'this eligibility sync is stopped']);
      const notification = await post('/fhir-notifications');
      expect([notification.status, ((await notification.json()) as { issue: Array<{ code: string }> }).issue[0]?.code]).toEqual([503, 'transient']);
      expect(logs.filter((line) => /"level":(40|50)/.test(line))).toEqual([]);
    } finally {
      await http.close();
    }
  });

  it('says as it starts that it upgraded its store, from which schema version: the point past which a rollback needs a copy', async () => {
    const logs: string[] = [];
    const logger = createLogger({ level: 'info', destination: { write: (line: string) => logs.push(line) } as unknown as NodeJS.WritableStream });
    const catalog = new PayerCatalog({ syncedAt: '2026-11-24T00:00:00Z', payers: [], portals: [] });
    const said = () => logs.map((line) => JSON.parse(line) as { msg: string; from?: number }).filter((l) => l.msg.startsWith('the job store was upgraded'));
    // A store new to this version is made, not upgraded.
    const first = createEligibilitySync(config({ catalog, logger }));
    await first.start();
    await first.stop();
    expect(said()).toEqual([]);
    // Left at schema 13, as the version before made it (its last migration an index: dropping it is all 14 adds).
    const db = new Database(storeFile());
    db.exec('DROP INDEX checks_chart_due');
    db.pragma('user_version = 13');
    db.close();
    const upgraded = createEligibilitySync(config({ catalog, logger }));
    await upgraded.start();
    await upgraded.stop();
    expect(said()).toEqual([expect.objectContaining({ from: 13, msg: 'the job store was upgraded from its schema version as it opened: earlier versions cannot open it now (roll back to a copy kept before)' })]);
  });

  it('works its store from the start of its start: a newer version started beside it while it waits for the catalog upgrades nothing under it', async () => {
    // A service slow to give the catalog (a start in an outage waits through its retries): the start waits for it.
    let answer = () => {};
    const answered = new Promise<void>((resolve) => (answer = resolve));
    const service = await startScriptedServer(async (_req, res) => {
      await answered;
      json(res, 401, { type: 'about:blank', title: 'Unauthorized', status: 401 });
    });
    try {
      const starting = createEligibilitySync(config({ service: { baseUrl: service.url, apiKey: 'k', maxRetries: 0 } }));
      const started = starting.start();
      while (service.requests.length === 0) await new Promise((resolve) => setImmediate(resolve));
      // Its store left at the schema before, as the version before this one would be: the next version's open upgrades it.
      const db = new Database(storeFile());
      db.pragma('user_version = 14');
      db.close();
      expect(() => SqliteJobStore.open(dataDir)).toThrow(/another process is working it \(stop it before this version upgrades the store from schema version 14\)$/);
      answer();
      await expect(started).rejects.toThrow(/^payer catalog: cannot be fetched/);
    } finally {
      answer();
      await service.close();
    }
  });

  it('closes its store when another process works it, and a second sync starts once that one is gone', async () => {
    const catalog = new PayerCatalog({ syncedAt: '2026-11-24T00:00:00Z', payers: [], portals: [] });
    const other = SqliteJobStore.open(dataDir);
    await other.beginWork();
    const first = createEligibilitySync(config({ catalog }));
    await expect(first.start()).rejects.toThrow(/another process is working it/);
    await other.close();
    expect(nobodyHolds(storeFile())).toBe(true);
    expect(nobodyHolds(`${storeFile()}-worker`)).toBe(true);

    const second = createEligibilitySync(config({ catalog }));
    await second.start();
    expect(nobodyHolds(`${storeFile()}-worker`)).toBe(false);
    await second.stop();
    expect(nobodyHolds(storeFile())).toBe(true);
  });
});

/** An embedder's boot code may call start() from two places (a health probe, a ready hook) at once. */
describe('start() called twice at once', () => {
  let dataDir: string;
  let sandbox: Sandbox;
  beforeEach(async () => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'elig-twice-'));
    sandbox = await startSandbox({ seed: true });
  });
  afterEach(async () => {
    await sandbox.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('refuses a start while it is stopping, and leaves nothing open', async () => {
    const sync = createEligibilitySync({ dataDir, service: { baseUrl: sandbox.url, apiKey: sandbox.apiKey }, fhir: { baseUrl: 'http://127.0.0.1:1/fhir' }, logger: createLogger({ level: 'silent' }) });
    const stopping = sync.stop();
    await expect(sync.start()).rejects.toThrow(/stopped \(or failed to start\); create another/);
    await stopping;
    expect(nobodyHolds(path.join(dataDir, 'dental-elig.sqlite'))).toBe(true);
    expect(nobodyHolds(path.join(dataDir, 'dental-elig.sqlite-worker'))).toBe(true);
  });

  it('stops a start still under way once it is done: no worker is left claiming checks from the store after stop()', async () => {
    // A store handed over stays open after stop(): a worker started behind it would work it on, unseen.
    const store = SqliteJobStore.open(dataDir);
    const claim = store.claimDue.bind(store);
    let claims = 0;
    store.claimDue = async (options) => {
      claims++;
      return claim(options);
    };
    const catalog = new PayerCatalog({ syncedAt: '2026-11-24T00:00:00Z', payers: [], portals: [] });
    const sync = createEligibilitySync({ store, dataDir, catalog, service: { baseUrl: sandbox.url, apiKey: sandbox.apiKey }, fhir: { baseUrl: 'http://127.0.0.1:1/fhir' }, settings: { idleMs: 10 }, logger: createLogger({ level: 'silent' }) });
    try {
      const starting = sync.start();
      await sync.stop();
      await starting;
      const atStop = claims;
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(claims).toBe(atStop);
    } finally {
      await store.close();
    }
  });

  it('stops once for two stop() calls at once: each returns once the store is closed, and a later one at once', async () => {
    // A shutdown signal and a failed health probe may both stop the sync: the second caller then exits or opens the data dir again.
    const sync = createEligibilitySync({ dataDir, service: { baseUrl: sandbox.url, apiKey: sandbox.apiKey }, fhir: { baseUrl: 'http://127.0.0.1:1/fhir' }, logger: createLogger({ level: 'silent' }) });
    await sync.start();
    const first = sync.stop();
    await sync.stop();
    expect(nobodyHolds(path.join(dataDir, 'dental-elig.sqlite'))).toBe(true);
    expect(nobodyHolds(path.join(dataDir, 'dental-elig.sqlite-worker'))).toBe(true);
    await first;
    expect(sync.stop()).toBe(sync.stop());
    await sync.stop();
  });

  it('starts once, both calls resolving, and stops once', async () => {
    const sync = createEligibilitySync({ dataDir, service: { baseUrl: sandbox.url, apiKey: sandbox.apiKey }, fhir: { baseUrl: 'http://127.0.0.1:1/fhir' }, logger: createLogger({ level: 'silent' }) });
    await expect(Promise.all([sync.start(), sync.start()])).resolves.toEqual([undefined, undefined]);
    expect(readdirSync(dataDir).filter((name) => name.endsWith('.tmp'))).toEqual([]);
    await expect(sync.health()).resolves.toMatchObject({ store: 'ok' });
    await sync.stop();
    expect(nobodyHolds(path.join(dataDir, 'dental-elig.sqlite'))).toBe(true);
  });
});
