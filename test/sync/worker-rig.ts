import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { PayerResolver } from '../../src/domain';
import { projectRoot } from '../../src/mapping-files';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import type { CheckRow, CheckState, JobStore } from '../../src/sync/job-store';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { Worker, type SyncEvent, type SyncEventName, type WorkerOptions } from '../../src/sync/worker';
import { fhirWriter, type EligibilityWriter } from '../../src/sync/write-back';
import { VerificationClient } from '../../src/verification/client';
import type { ClientConfigInput } from '../../src/verification/config';
import { startScriptedServer, type RecordedRequest } from '../support/http-server';
import { chartOf, until } from './harness';
import { checkRow } from './job-store-contract';

/**
 * One Worker over its real parts, without the service around it: a SQLite file in a temporary
 * folder, the verification client talking HTTP to a scripted server, the chart a FHIR server on
 * loopback. The service's answers are the test's to script, so faults the sandbox does not make
 * (a verification that takes longer than the lease, Retry-After, a 404 on poll) can be.
 */
export interface WorkerRig {
  worker: Worker;
  store: RigStore;
  /** The chart the worker writes to. */
  fhir: FhirServer;
  requests: RecordedRequest[];
  events: { name: SyncEventName; event: SyncEvent }[];
  errors: string[];
  /** The worker's warnings, each its message and fields. */
  warnings: Array<{ msg: string; fields: object }>;
  /** The worker's lines at info, each its message and fields. */
  infos: Array<{ msg: string; fields: object }>;
  /** Stores a check of the `self` fixture chart under `key`, due now (the contract's checkRow). */
  addCheck(key: string, change?: Partial<CheckRow>): Promise<void>;
  check(key: string): Promise<CheckRow>;
  /** Waits until the check is in `state`, and gives it as stored then. */
  reach(key: string, state: CheckState, timeoutMs?: number): Promise<CheckRow>;
  /** Stops the worker and puts a new one, not started, on the same store, service and chart: serve restarted. */
  restart(): Promise<void>;
  /** Another worker, not started, on the same store (or `store`, another instance's pool on its database), service and chart beside this one: a second instance. Stopped by close(). */
  another(store?: JobStore): Worker;
  close(): Promise<void>;
}

/** The rig's store: a SQLite file of its own, or one the test opened (PostgreSQL), which the test closes. */
export type RigStore = JobStore & Required<Pick<JobStore, 'takeRateToken'>>;

export const RIG_OPTIONS: WorkerOptions = {
  concurrency: 4,
  chartConcurrency: 4,
  // The test process's loop is Jest's: a rig is held back only when its test says how busy the loop is.
  loopBusyLimit: 1,
  rateLimits: {},
  maxAttempts: 3,
  backoff: { baseMs: 50, maxMs: 400 },
  webhookDeadlineMs: 100,
  pollAfterMs: 100,
  pendingGiveUpMs: 60_000,
  throttledGiveUpMs: 60_000,
  leaseMs: 1000,
  idleMs: 20,
  policy: { freshnessMs: 7 * 86_400_000, reverifyLeadMs: 86_400_000 },
  asyncEnabled: false,
};

export const resultBody = (name: string): unknown => JSON.parse(readFileSync(path.join(projectRoot, 'fixtures', 'results', `${name}.json`), 'utf8'));

const resolved = (name = 'Guardian'): PayerResolver => ({
  resolve: () => ({ status: 'resolved', name, commonPayerId: '64246', supportsAsync: true, asyncPortals: ['portal-a'], syncPortals: ['portal-a'] }),
}) as unknown as PayerResolver;

export async function startWorkerRig(options: {
  answer: (req: RecordedRequest, res: ServerResponse, index: number) => void | Promise<void>;
  worker?: Partial<WorkerOptions>;
  service?: Partial<ClientConfigInput>;
  resolver?: PayerResolver;
  /** The payer's name as the catalog gives it (an empty one makes a request the client refuses). */
  payerName?: string;
  /** The worker's jitter (1: every wait its longest). */
  random?: () => number;
  /** How busy the event loop is, as the worker reads it. */
  loopBusy?: () => number;
  /** How many arrivals are being handled, as the worker reads it. */
  arriving?: () => number;
  /** Called with each event after it is recorded, as a listener of the embedding service would be (it may throw). */
  onEvent?: (name: SyncEventName) => void;
  /** Wraps the chart writer, e.g. to hold a write back while the test changes the check. */
  writer?: (chart: EligibilityWriter) => EligibilityWriter;
  /** Told of each result polling took that a webhook was to bring, as serve counts it. */
  webhookMissed?: (key: string) => void;
  /** The store, instead of a SQLite file: the test's to close. */
  store?: RigStore;
}): Promise<WorkerRig> {
  const dir = mkdtempSync(path.join(tmpdir(), 'elig-worker-'));
  const store = options.store ?? SqliteJobStore.open(dir);
  const service = await startScriptedServer(options.answer);
  const fhir: FhirServer = await startFhirServer({ validate: true });
  await fhir.seed(chartOf('self'));
  const client = new VerificationClient({ baseUrl: service.url, apiKey: 'rig-key', retryMinDelayMs: 10, retryMaxDelayMs: 50, maxRetries: 0, ...options.service });
  const writer = fhirWriter(fhir.url).then((chart) => (options.writer ? options.writer(chart) : chart));
  const events: WorkerRig['events'] = [];
  const errors: string[] = [];
  const warnings: WorkerRig['warnings'] = [];
  const infos: WorkerRig['infos'] = [];
  const resolver = options.resolver ?? resolved(options.payerName);
  const newWorker = (on: JobStore = store) => new Worker(
    { ...RIG_OPTIONS, ...options.worker },
    {
      store: on,
      client,
      resolver: () => resolver,
      writer: () => writer,
      now: () => new Date(),
      ...(options.random && { random: options.random }),
      ...(options.loopBusy && { loopBusy: options.loopBusy }),
      ...(options.arriving && { arriving: options.arriving }),
      ...(options.webhookMissed && { webhookMissed: options.webhookMissed }),
      log: { info: (fields, msg) => infos.push({ msg, fields }), warn: (fields, msg) => warnings.push({ msg, fields }), error: (_obj, msg) => errors.push(msg) },
      emit: (name, event) => {
        events.push({ name, event });
        options.onEvent?.(name);
      },
    },
  );
  let closed: Promise<void> | undefined;
  const others: Worker[] = [];
  const rig: WorkerRig = {
    worker: newWorker(),
    store,
    fhir,
    requests: service.requests,
    events,
    errors,
    warnings,
    infos,
    async addCheck(key, change = {}) {
      // Each a plan of its own: checks of one plan wait for the one verification sent first.
      await store.transaction((tx) => tx.putCheck(checkRow(key, { dueAt: new Date().toISOString(), coverageFingerprint: `coverage-${key}`, ...change })));
    },
    async check(key) {
      const row = await store.transaction((tx) => tx.getCheck(key));
      if (!row) throw new Error(`no check ${key}`);
      return row;
    },
    async reach(key, state, timeoutMs = 5000) {
      return until(`check ${key} ${state}`, async () => {
        const row = await store.transaction((tx) => tx.getCheck(key));
        return row?.state === state && row;
      }, timeoutMs);
    },
    async restart() {
      await rig.worker.stop();
      rig.worker = newWorker();
    },
    another(on) {
      const other = newWorker(on);
      others.push(other);
      return other;
    },
    // Once: a suite's afterEach closes the rig of the test before when a test made none of its own.
    close() {
      closed ??= (async () => {
        await rig.worker.stop();
        for (const other of others) await other.stop();
        await service.close();
        await fhir.close();
        if (!options.store) await store.close();
        rmSync(dir, { recursive: true, force: true });
      })();
      return closed;
    },
  };
  return rig;
}

/** The paths of the requests that sent a verification (sync or async); bodies, with patient data, stay out of test output. */
export const posts = (requests: RecordedRequest[]) => requests.filter((r) => r.method === 'POST').map((r) => r.url);
/** The paths of the polls. */
export const gets = (requests: RecordedRequest[]) => requests.filter((r) => r.method === 'GET').map((r) => r.url);

