import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { CoverageEligibilityResponse } from 'fhir/r4';
import { generateWebhookSecret, startSandbox, type Sandbox } from '../../src/sandbox';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import type { EligibilitySync } from '../../src/service/eligibility-sync';
import { WEBHOOK_PATH } from '../../src/verification/webhook';
import { createLogger } from '../../src/service/logger';
import type { JobStore } from '../../src/sync/job-store';
import { openJobStore } from '../../src/sync/open-store';
import { postgresForTests } from '../support/postgres';
import { chartOf, searchFhir, startSyncInstance, until } from './harness';

/**
 * Two instances of the service on one PostgreSQL database, each with its own worker and HTTP
 * server: the appointment arrives at one, the service's webhooks at the other. Whichever worker
 * claims a check, the result completes it and is written once.
 */
interface Instance {
  sync: EligibilitySync;
  store: JobStore;
  url: string;
  close(): Promise<void>;
}

const postgres = postgresForTests();
let sandbox: Sandbox;
let fhir: FhirServer;
let dataDir: string;
const instances: Instance[] = [];

async function startInstance(storeUrl: string, secret: string): Promise<Instance> {
  const store = await openJobStore(storeUrl, dataDir);
  const instance = await startSyncInstance({ store, dataDir, sandbox, fhir, secret, logger: createLogger({ level: 'silent' }) });
  return {
    sync: instance.sync,
    store,
    url: instance.httpUrl,
    async close() {
      await instance.close();
      await store.close();
    },
  };
}

beforeEach(async () => {
  dataDir = mkdtempSync(path.join(tmpdir(), 'elig-sync-'));
  sandbox = await startSandbox({ seed: true, timing: { asyncCompletionMs: 300, webhookBackoffMs: 200 } });
  fhir = await startFhirServer({ validate: true });
  await fhir.seed(chartOf('primary-secondary'));
});
afterEach(async () => {
  for (const instance of instances.splice(0)) await instance.close();
  await sandbox.close();
  await fhir.close();
  rmSync(dataDir, { recursive: true, force: true });
});

it('verifies an appointment received by one instance with webhooks received by the other, each check once', async () => {
  const storeUrl = await postgres.createDatabase();
  const secret = generateWebhookSecret();
  const [a, b] = [await startInstance(storeUrl, secret), await startInstance(storeUrl, secret)] as [Instance, Instance];
  instances.push(a, b);
  sandbox.configureWebhook({ url: `${b.url}${WEBHOOK_PATH}`, secret });
  const written: string[] = [];
  for (const instance of instances) instance.sync.on('written', (e) => written.push(e.key));

  const res = await fetch(`${a.url}/fhir-notifications/Appointment/appt-4004`, { method: 'POST' });
  expect(res.status).toBe(200);
  await until('two written checks', async () => written.length >= 2 && written);

  const checks = await b.store.listChecks();
  expect(checks.map((c) => [c.state, c.mode, c.round])).toEqual([
    ['written', 'async', 0],
    ['written', 'async', 0],
  ]);
  expect(new Set(checks.map((c) => c.correlationId)).size).toBe(2);
  const webhooks = await a.store.listMessages({ kind: 'webhook' });
  expect(webhooks.length).toBeGreaterThanOrEqual(2);
  expect(webhooks.every((m) => m.status === 'handled')).toBe(true);
  const responses = (await searchFhir(fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
  expect(responses.map((r) => r.outcome)).toEqual(['complete', 'complete']);
  expect(new Set(written).size).toBe(2);
  expect(written).toHaveLength(2);
});
