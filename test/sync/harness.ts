import fs, { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { Database } from '../../src/sync/sqlite-driver';
import type { Bundle, FhirResource } from 'fhir/r4';
import { generateWebhookSecret, startSandbox, type Fault, type Sandbox, type SandboxOptions } from '../../src/sandbox';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import { createEligibilitySync, type EligibilitySync, type SyncSettings } from '../../src/service/eligibility-sync';
import { startHttpServer } from '../../src/service/http-server';
import { WEBHOOK_PATH } from '../../src/verification/webhook';
import { createLogger, type Logger } from '../../src/service/logger';
import type { ClinicRouting } from '../../src/adapters/clinic-routing';
import type { Hl7Mappings } from '../../src/adapters/hl7';
import type { JobStore } from '../../src/sync/job-store';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { projectRoot } from '../../src/mapping-files';
import type { ClientConfigInput } from '../../src/verification/config';

/**
 * The whole road in one process, each part real: the sandbox service and a FHIR server on
 * loopback, the sync over a SQLite file in a temporary folder, its HTTP server receiving the
 * sandbox's signed webhooks.
 */
export interface Harness {
  sandbox: Sandbox;
  fhir: FhirServer;
  sync: EligibilitySync;
  store: SqliteJobStore;
  dataDir: string;
  httpUrl: string;
  logs: string[];
  /** The Standard Webhooks secret the sandbox signs with and the sync checks. */
  secret: string;
  close(): Promise<void>;
}

export const FAST: SyncSettings = {
  backoffBaseMs: 50,
  backoffMaxMs: 400,
  pollAfterMs: 200,
  webhookDeadlineMs: 3000,
  idleMs: 50,
  leaseMs: 5000,
};

export interface HarnessOptions {
  settings?: SyncSettings;
  sandbox?: SandboxOptions;
  /** Client settings over the harness's (short retry delays). */
  service?: Partial<ClientConfigInput>;
  /** false: no webhook configured, so every verification is synchronous. */
  webhook?: false;
  now?: () => Date;
  dataDir?: string;
  /** The FHIR base the sync uses, given the FHIR server's own (e.g. through a proxy that can fail). */
  fhirVia?: (fhirUrl: string) => Promise<string>;
  /** Clinic routing instead of mappings/clinics.json (a clinic in another time zone). */
  routing?: ClinicRouting;
  /** HL7 mappings instead of mappings/hl7 (a dialect of a sender's own). */
  mappings?: Hl7Mappings;
  /** Faults the sandbox serves from before the sync starts (its payer catalog fetched at start failing, say). */
  faults?: Fault[];
}

export async function startHarness(options: HarnessOptions = {}): Promise<Harness> {
  const dataDir = options.dataDir ?? mkdtempSync(path.join(tmpdir(), 'elig-sync-'));
  const sandbox = await startSandbox({ seed: true, timing: { asyncCompletionMs: 300, webhookBackoffMs: 200 }, ...options.sandbox });
  for (const fault of options.faults ?? []) sandbox.injectFault(fault);
  const fhir = await startFhirServer({ validate: true });
  const store = SqliteJobStore.open(dataDir);
  const logs: string[] = [];
  const logger = createLogger({ level: 'debug', destination: { write: (line: string) => logs.push(line) } as unknown as NodeJS.WritableStream });
  const secret = generateWebhookSecret();
  const { settings, service, webhook, now, fhirVia, routing, mappings } = options;
  let instance: Awaited<ReturnType<typeof startSyncInstance>>;
  try {
    instance = await startSyncInstance({ store, dataDir, sandbox, fhir, secret, logger, settings, service, webhook, now, fhirVia, routing, mappings });
  } catch (err) {
    // A sync that does not start leaves nothing open behind the test.
    await Promise.all([store.close(), sandbox.close(), fhir.close()]);
    if (!options.dataDir) rmSync(dataDir, { recursive: true, force: true });
    throw err;
  }
  if (webhook !== false) sandbox.configureWebhook({ url: `${instance.httpUrl}${WEBHOOK_PATH}`, secret });
  return {
    sandbox,
    fhir,
    sync: instance.sync,
    store,
    dataDir,
    httpUrl: instance.httpUrl,
    logs,
    secret,
    async close() {
      await instance.close();
      await store.close();
      await sandbox.close();
      await fhir.close();
      if (!options.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** One instance of the sync service on `store`, with its HTTP server; close() leaves the store open. */
export async function startSyncInstance(options: {
  store: JobStore;
  dataDir: string;
  sandbox: Sandbox;
  fhir: FhirServer;
  secret: string;
  logger: Logger;
} & Pick<HarnessOptions, 'settings' | 'service' | 'webhook' | 'now' | 'fhirVia' | 'routing' | 'mappings'>): Promise<{ sync: EligibilitySync; httpUrl: string; close(): Promise<void> }> {
  let sync: EligibilitySync | undefined;
  const http = await startHttpServer(() => sync as EligibilitySync);
  sync = createEligibilitySync({
    store: options.store,
    dataDir: options.dataDir,
    service: { baseUrl: options.sandbox.url, apiKey: options.sandbox.apiKey, retryMinDelayMs: 20, retryMaxDelayMs: 100, ...options.service },
    fhir: { baseUrl: options.fhirVia ? await options.fhirVia(options.fhir.url) : options.fhir.url },
    ...(options.webhook !== false && { webhook: { scheme: 'standard-webhooks', secret: options.secret } }),
    settings: { ...FAST, ...options.settings },
    logger: options.logger,
    ...(options.now && { now: options.now }),
    ...(options.routing && { routing: options.routing }),
    ...(options.mappings && { mappings: options.mappings }),
  });
  try {
    await sync.start();
  } catch (err) {
    await http.close();
    throw err;
  }
  const started = sync;
  return {
    sync: started,
    httpUrl: `http://127.0.0.1:${http.port}`,
    async close() {
      await started.stop();
      await http.close();
    },
  };
}

export function chartOf(name: string): FhirResource[] {
  const bundle = JSON.parse(readFileSync(path.join(projectRoot, 'fixtures', 'fhir', `${name}.bundle.json`), 'utf8')) as Bundle;
  return (bundle.entry ?? []).flatMap((e) => (e.resource ? [e.resource] : []));
}

/** Polls until `probe` gives a value, or fails naming what it waited for. */
export async function until<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function searchFhir(fhir: FhirServer, query: string): Promise<FhirResource[]> {
  const res = await fetch(`${fhir.url}/${query}`);
  const bundle = (await res.json()) as Bundle;
  return (bundle.entry ?? []).flatMap((e) => (e.resource ? [e.resource] : []));
}

/** The next close(2) fails with EIO, as on a network file system or a failing disk: its descriptor gone all the same, as Linux leaves it. */
export function nextCloseFails(): void {
  const real = fs.closeSync;
  jest.spyOn(fs, 'closeSync').mockImplementationOnce((fd) => {
    real(fd);
    throw Object.assign(new Error('EIO: i/o error, close'), { code: 'EIO' });
  });
}

/** Whether another connection could take the SQLite file for itself: no connection of this process (or another) is left on it. */
export function nobodyHolds(file: string): boolean {
  const db = new Database(file, { timeout: 0 });
  try {
    db.pragma('locking_mode = EXCLUSIVE');
    db.exec('BEGIN EXCLUSIVE; COMMIT');
    return true;
  } catch (err) {
    if ((err as { code?: unknown }).code === 'SQLITE_BUSY') return false;
    throw err;
  } finally {
    db.close();
  }
}
