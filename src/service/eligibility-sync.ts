import { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import * as path from 'node:path';
import * as z from 'zod';
import { Agent, buildConnector, request } from 'undici';
import { clinicTimeZone, ClinicRoutingFile, loadClinicRouting, type ClinicRouting } from '../adapters/clinic-routing';
import type { FhirReader } from '../adapters/fhir/in';
import type { OperationOutcomeIssue } from 'fhir/r4';
import { FhirInputError, operationOutcome } from '../adapters/fhir/operation-outcome';
import { loadR4Validation } from '../adapters/fhir/validate';
import { loadFhirMappings } from '../adapters/fhir/load-mappings';
import { describeProblems, eventActionFor, loadHl7Mappings, messageTypeOf, profileFor, readMessageHeader, type Ack, type Hl7Mappings, type Hl7Result } from '../adapters/hl7';
import { describeIssue } from '../domain/issues';
import { VerificationClient } from '../verification/client';
import { ClientConfig, type ClientConfigInput } from '../verification/config';
import { CHART_TRAFFIC, TOKEN_TRAFFIC, carriesCredentials, isHttpUrl, isPlainHttpAcrossNetwork, plainHttpRefused } from '../url-checks';
import { failureKinds } from '../verification/failure-kinds';
import { loadPayerAliases, type PayerCatalog } from '../verification/payer-catalog';
import { InlineCredentials } from '../verification/wire';
import { BUSY_READING, createWebhookHandler, SENDER_HUNG_UP, webhookProblem, type WebhookAuth } from '../verification/webhook';
import { readBody } from '../connection-limits';
import { CHART_TIMEOUT_MS } from '../sync/chart-client';
import { READ_SCOPE, smartBackendTokens } from '../sync/fhir-auth';
import { fhirKitReader, type FhirKitReaderOptions } from '../sync/fhir-reader';
import { onceASpell } from '../once-a-spell';
import { sendProblem } from '../problem-details';
import { deadLetter, detailForLog, keepUnhandled, refusedOn, resolveResent } from '../sync/dead-letters';
import { appointmentsToPoll, ingestFhirAppointment, ingestFhirChange, type FhirIngested } from '../sync/ingest-fhir';
import { ingestHl7 } from '../sync/ingest-hl7';
import { ingestWebhook } from '../sync/ingest-webhook';
import { errorText } from '../sync/error-text';
import { dateBackChecks } from '../sync/clock-step';
import { replayMessage, type Replayed } from '../sync/operations';
import { PRUNED, type JobStore } from '../sync/job-store';
import { pruneFinished } from '../sync/prune';
import { outageOf, storeOutage, watchOutages } from '../sync/store-outage';
import { dateBackKept } from '../sync/outage-record';
import { closeEachOrThrow } from '../close-each';
import { timerMs } from '../timer-ms';
import type { SchedulePolicy } from '../sync/schedule';
import { SqliteJobStore } from '../sync/sqlite-job-store';
import { Worker, type SyncEvent, type SyncEventName, type WorkerOptions } from '../sync/worker';
import { fhirWriter, FhirWriterOptions, type EligibilityWriter } from '../sync/write-back';
import { CatalogKeeper } from './catalog-keeper';
import { createLogger, type Logger } from './logger';
import { storeAnswer, SyncMetrics } from './metrics';
import { CHANGED_TYPES, subscriptionNotificationIds } from './notifications';

const CENTURY_DAYS = 36_500;
/**
 * A span added to a date (a deadline, a give-up, a lead, a retention): past the dates JavaScript
 * holds it made each check's step fail ('Invalid time value'); a hundred years is kept for good.
 */
const spanMs = () => z.number().int().max(CENTURY_DAYS * 86_400_000, { error: `must be at most ${CENTURY_DAYS * 86_400_000} (a hundred years)` });
const spanDays = () => z.number().max(CENTURY_DAYS, { error: `must be at most ${CENTURY_DAYS} (a hundred years)` });

/** Settings that are plain data, validated at the boundary; defaults suit one practice on one machine. */
export const SyncSettings = z.strictObject({
  concurrency: z.number().int().min(1).max(1000).default(8),
  /** Chart writes at once, apart from `concurrency` (which counts the checks in hand for the service); `concurrency` when not given. */
  chartConcurrency: z.number().int().min(1).max(1000).optional(),
  /** Past this share of its time busy, the event loop answers what arrives before the worker takes more checks (1: never). */
  loopBusyLimit: z.number().gt(0).max(1).default(0.85),
  requestsPerSecond: z.number().positive().optional(),
  requestsPerSecondPerPortal: z.number().positive().optional(),
  maxAttempts: z.number().int().min(1).default(8),
  backoffBaseMs: z.number().int().min(1).default(2000),
  backoffMaxMs: timerMs(1).default(5 * 60_000),
  webhookDeadlineMs: spanMs().min(0).default(2 * 60_000),
  pollAfterMs: spanMs().min(1, { error: 'must be at least 1 (0 would poll a Pending verification in a tight loop)' }).default(5000),
  pendingGiveUpMs: spanMs().min(1).default(24 * 3600_000),
  /** A check whose visit's day has come, the service asking for fewer requests (429) this long since its first send, is given up (sent again once the service answers). */
  throttledGiveUpMs: spanMs().min(1).default(15 * 60_000),
  leaseMs: timerMs(1000).default(2 * 60_000),
  idleMs: timerMs(10).default(500),
  freshnessDays: spanDays().min(0).default(7),
  reverifyLeadDays: spanDays().min(0).default(1),
  /** Bring the payer catalog up to date from the service this often (0: at start, and for a payer it does not know or a request refused naming it, only). */
  catalogRefreshMs: timerMs(0).default(3_600_000),
  /** Poll the FHIR server for booked appointments this often (0: only notifications). */
  fhirPollIntervalMs: timerMs(0).default(0),
  // Added to today for the search's last day: past the dates JavaScript holds, every poll failed ('Invalid time value'), warned of once.
  fhirPollDays: spanDays().int().min(1).default(14),
  /** How long the store keeps finished work (messages handled, checks done with, appointments over): see prune. */
  // Bounded: a cutoff past the dates JavaScript holds (some 270,000 years back) failed the prune's timer, and serve with it.
  retentionDays: spanDays().min(1).default(90),
  /** Prune the store this often, the first a few minutes after start (the interval, if shorter). */
  pruneIntervalMs: timerMs(1).default(3_600_000),
}).refine((s) => s.backoffBaseMs <= s.backoffMaxMs, {
  path: ['backoffBaseMs'],
  error: (issue) => `must not exceed backoffMaxMs (${(issue.input as { backoffMaxMs: number }).backoffMaxMs})`,
}).refine((s) => s.retentionDays >= s.freshnessDays, {
  path: ['retentionDays'],
  error: (issue) => `must be at least freshnessDays (${(issue.input as { freshnessDays: number }).freshnessDays}): a fresh result kept serves another appointment of its coverage`,
});
export type SyncSettings = z.input<typeof SyncSettings>;

export interface EligibilitySyncConfig {
  /** The job store; or dataDir for the SQLite default. */
  store?: JobStore;
  /** Folder for the SQLite store and the payer catalog; default .dental-elig/data. */
  dataDir?: string;
  /** The verification service: client settings (base URL, API key, ...) or a client of your own. */
  service: ClientConfigInput | VerificationClient;
  /**
   * The payer catalog, used as given. By default it is loaded from the data dir, brought up to date
   * from the service at start, every settings.catalogRefreshMs, and when a check names a payer it
   * does not know (at most every five minutes), and saved there again.
   */
  catalog?: PayerCatalog;
  /** The chart's FHIR server, or a writer (and a reader for FHIR triggers) of your own. */
  fhir: ({ baseUrl: string } & FhirWriterOptions) | { writer: EligibilityWriter; reader?: FhirReader };
  /** How webhooks authenticate. Without it, no verification is asynchronous. */
  webhook?: WebhookAuth;
  /**
   * Portal credentials sent inline, by portalId, for portals whose credentials are not stored with the service.
   * Their passwords are cut out of what the service answers; a client of your own (`service`) does that when made with `secrets` naming them.
   */
  inlineCredentials?: Record<string, InlineCredentials>;
  settings?: SyncSettings;
  routing?: ClinicRouting;
  mappings?: Hl7Mappings;
  now?: () => Date;
  logger?: Logger;
}

export interface EligibilitySync {
  /** One HL7 v2 message in, its ACKs out, after the message and its effects are stored. */
  receiveHl7(text: string): Promise<Ack[]>;
  /** Keeps what an MLLP listener could not hand over (a broken frame, a handler failure). */
  deadLetterHl7(letter: { message: string; reason: string }): Promise<void>;
  /**
   * Handles a stored message again, as `dental-elig jobs replay` does (replayMessage), with this
   * sync's mappings, clinic routing, schedule and chart: a dead letter once what refused it is fixed.
   */
  replay(messageId: number): Promise<Replayed>;
  /** The verification webhook, for node:http, Express or Fastify (raw request and response). */
  webhookHandler: (req: IncomingMessage, res: ServerResponse) => void;
  /** FHIR R4 Subscription rest-hook notifications (id-only or full-resource) on Appointment. */
  notificationHandler: (req: IncomingMessage, res: ServerResponse) => void;
  /** An Appointment on the chart's FHIR server was booked or changed. */
  notifyAppointment(appointmentId: string): Promise<FhirIngested>;
  /** Reads the appointments whose status is verified or will not happen (mappings/fhir/appointment-status.json) changed since the last poll; returns how many were looked at. */
  pollAppointments(): Promise<number>;
  on(event: SyncEventName, listener: (event: SyncEvent) => void): this;
  off(event: SyncEventName, listener: (event: SyncEvent) => void): this;
  /** Liveness of the store and the downstreams; not ok once stop() is called (`stopping`), so a balancer routes elsewhere while checks in hand finish. */
  health(): Promise<{ ok: boolean; store: string; fhir: string; service: string; stopping?: true }>;
  readonly store: JobStore;
  readonly metrics: SyncMetrics;
  readonly logger: Logger;
  /** Loads the payer catalog and starts the worker (and the FHIR poll, when set); one that fails closes what the sync opened: create another to try again. */
  start(): Promise<void>;
  /** Stops taking work (after a start under way), waits for the checks in hand, closes what it opened; called again, it is the same stop. */
  stop(): Promise<void>;
}

/** Where the SQLite store and the payer catalog are kept when no data dir is given: the sync's and serve's alike. */
export const DEFAULT_DATA_DIR = path.join('.dental-elig', 'data');

/** The client's operations a catalog refresh makes (PayerCatalog.sync). */
const CATALOG_LISTINGS = new Set(['list payer network', 'list portal network']);
/** How far this machine's clock may be from the shared store's before serve says so as it starts. */
const CLOCK_SKEW_SAID_MS = 5000;
/** How often a sync timed by this machine's clock looks whether it stepped back (see watchClockSteps). */
const CLOCK_WATCH_MS = 1000;
const CLOCK_STEPPED_BACK = "the job store holds changes dated ahead of this machine's clock, which has stepped back: the checks changed meanwhile are dated back by as much, their due times with them";
const POLL_CURSOR = 'fhir-poll-cursor';
/** The first prune after start: not in the start's own rush (a backlog of messages, the catalog), nor an hour away from a sync restarted often. */
const FIRST_PRUNE_MS = 5 * 60_000;

export function schedulePolicy(settings: Pick<z.output<typeof SyncSettings>, 'freshnessDays' | 'reverifyLeadDays'>, routing: ClinicRouting): SchedulePolicy {
  return {
    freshnessMs: settings.freshnessDays * 86_400_000,
    reverifyLeadMs: settings.reverifyLeadDays * 86_400_000,
    timeZoneOf: (clinicId) => clinicTimeZone(routing, clinicId),
  };
}

/**
 * The config's own keys, checked as a whole at creation: an embedder writing JavaScript or reading
 * JSON has no compiler to say that `setings` or `datadir` is not one, and would run on defaults.
 * What each key holds is checked where it is used.
 */
const ConfigKeys = z.strictObject({
  // Every key of EligibilitySyncConfig, and no other (the satisfies below): a key added there is one here too.
  // serve's own `store` is a location: given here, it failed as 'Cannot create proxy with a non-object'; a promise not awaited, at start() as 'store.beginWork is not a function'.
  store: z
    .custom<JobStore>((value) => typeof value === 'object' && value !== null && typeof (value as Partial<JobStore>).transaction === 'function', {
      error: (issue) => (typeof (issue.input as { then?: unknown } | undefined)?.then === 'function' ? 'is a promise: await openJobStore(…) before handing it over' : 'must be a job store, not a location: open it with openJobStore(location, dataDir)'),
    })
    .optional(),
  // Spaces too, as serve refuses them: a folder named by spaces, made in the working directory, is no one's choice.
  dataDir: z.string().refine((dir) => dir.trim() !== '', { error: 'must not be empty (leave it out for .dental-elig/data)' }).optional(),
  service: z.custom<object>((value) => typeof value === 'object' && value !== null, { error: 'is required: the service\'s baseUrl and apiKey, or a client of your own' }),
  // From JavaScript these were taken as given and failed later, some at creation in words of their own
  // ('options.now is not a function', 'Cannot read properties of undefined'), a catalog only at a check's resolve.
  catalog: given<PayerCatalog>((value) => typeof (value as Partial<PayerCatalog>).resolve === 'function', 'must be a PayerCatalog (PayerCatalog.load), or left out to keep it from the service'),
  fhir: z.unknown().optional(),
  webhook: z.unknown().optional(),
  // Checked here, not where it is used: a password left out reached the client's redaction of every answer, and start()
  // failed as 'payer catalog: cannot be fetched from the service' (Cannot read properties of undefined).
  inlineCredentials: z.record(z.string().min(1), InlineCredentials).optional(),
  settings: z.unknown().optional(),
  routing: z.unknown().optional(),
  mappings: given<Hl7Mappings>(
    (value) => typeof (value as Partial<Hl7Mappings>).defaultProfile === 'object' && Array.isArray((value as Partial<Hl7Mappings>).dialects) && typeof (value as Partial<Hl7Mappings>).codeTables === 'object',
    'must be what loadHl7Mappings(folder) returns, or left out for mappings/',
  ),
  now: z.custom<() => Date>((value) => typeof value === 'function', { error: 'must be a function returning the time as a Date' }).optional(),
  logger: given<Logger>((value) => (['debug', 'info', 'warn', 'error'] as const).every((level) => typeof (value as Partial<Logger>)[level] === 'function'), 'must be a pino logger (createLogger), or left out'),
} satisfies Record<keyof EligibilitySyncConfig, z.ZodType>);

/** An object of the library's own making, known by what the sync calls on it. */
function given<T>(fits: (value: object) => boolean, error: string) {
  return z.custom<T>((value) => typeof value === 'object' && value !== null && fits(value), { error }).optional();
}

export function createEligibilitySync(config: EligibilitySyncConfig): EligibilitySync {
  const keys = ConfigKeys.safeParse(config);
  if (!keys.success) throw new Error(describeIssue(keys.error, 'config'));
  const parsed = SyncSettings.safeParse(config.settings ?? {});
  if (!parsed.success) throw new Error(describeIssue(parsed.error, 'settings', ['settings']));
  const settings = parsed.data;
  // A store several instances share gives the clock they all go by (JobStore.now), once it is open.
  let clock = () => new Date();
  const now = config.now ?? (() => clock());
  const logger = config.logger ?? createLogger();
  const dataDir = config.dataDir ?? DEFAULT_DATA_DIR;
  // Everything that can refuse a setting runs before the store opens: a failed creation leaves nothing open.
  checkFhir(config.fhir);
  checkService(config.service);
  const routing = config.routing === undefined ? loadClinicRouting() : inlineRouting(config.routing);
  const mappings = config.mappings ?? loadHl7Mappings();
  loadFhirMappings();
  // Read when the catalog loads and when a verification fails: a bad edit would show as the service unreachable, or fail a result.
  loadPayerAliases();
  failureKinds();
  // Sent inline in one request, quoted back by the service in a later one (a poll's or a webhook's Failed result): cut out of both.
  const passwords = Object.values(config.inlineCredentials ?? {}).map((c) => c.password);
  // What arrived and is being handled: while something is, a busy loop holds the worker back (loopBusyLimit).
  let arriving = 0;
  // What arrives after stop() closed the store this sync opened is answered 503, sent again by the service or the
  // chart, as running() refuses the rest: a 500 with the closed store's error in the log would read as a fault.
  const counted = (handler: (req: IncomingMessage, res: ServerResponse) => void, refuseStopped: (res: ServerResponse) => void) => (req: IncomingMessage, res: ServerResponse) => {
    if (refusing()) return refuseStopped(res.setHeader('retry-after', '5'));
    arriving++;
    res.once('close', () => arriving--);
    handler(req, res);
  };
  /** When a webhook delivery last reached this sync, taken or not: see webhookMissed. */
  let webhookCameAt = Number.NEGATIVE_INFINITY;
  const webhookMissSaid = onceASpell(() => now().getTime());
  /**
   * A result polling took that its webhook was to bring: counted, and said at warn once a spell
   * while no delivery reaches this sync, as webhooks that stop arriving (a secret rotated on one
   * side, a proxy, serve unreachable from the service) leave results to the slower poll with nothing
   * else to say so. Deliveries that reach it (refused, or failing with the store away, the service
   * delivering again) are webhooks arriving: that one is late, not stopped, and said at debug.
   */
  const webhookMissed = (key: string) => {
    metrics.webhooks.inc({ result: 'not-received' });
    const at = now().getTime();
    const message = 'a result came by polling, no webhook received in webhookDeadlineMs: check the webhook URL the service has, its secret, and what stands between (said once in ten minutes)';
    if (at - webhookCameAt < settings.webhookDeadlineMs || !webhookMissSaid()) return void logger.debug({ key }, message);
    logger.warn({ key, webhookDeadlineMs: settings.webhookDeadlineMs }, message);
  };
  // Its handler refuses a webhook secret that is not one.
  const webhookHandler = config.webhook
    ? counted(createWebhookHandler({
        auth: config.webhook,
        log: logger,
        secrets: passwords,
        onDelivery: async (delivery) => {
          webhookCameAt = now().getTime();
          const applied = await ingestWebhook(store, worker, delivery, now());
          metrics.webhooks.inc({ result: applied.status });
          if (applied.status === 'applied') {
            if (applied.event) emit(applied.event.name, applied.event.event);
            worker.kick();
          } else {
            // A dead one waits for a person, as every dead letter does: said as a warning, where one not applied is news.
            logger[applied.status === 'dead' ? 'warn' : 'info']({ webhookId: delivery.webhookId, result: applied.status }, applied.detail);
          }
        },
        alreadySaid: storeOutage,
        // A secret rotated too soon or a clock skewed refuses every delivery, the results coming only by the slower poll: an alert needs it counted.
        onRefused: () => {
          webhookCameAt = now().getTime();
          metrics.webhooks.inc({ result: 'refused' });
        },
        onUnreadable: async (raw, reason) => {
          webhookCameAt = now().getTime();
          metrics.webhooks.inc({ result: 'dead' });
          await deadLetter(store, { kind: 'webhook', raw, reason, receivedAt: now() });
        },
      }), (res) => webhookProblem(res, 503, 'Stopped', STOPPED))
    : (_req: IncomingMessage, res: ServerResponse) => {
        sendProblem(res, 404, 'webhooks are not configured');
      };
  const ownsClient = !(config.service instanceof VerificationClient);
  // The client warns of each retry, so a wait is never silent; once the worker has said the service is out
  // (one warning), each call trying it retries as it fails, and four warnings a try, a try a minute, said
  // that outage again for as long as it lasted: at debug until it answers, as a chart's writes are. So
  // for a payer portal out on its own, whose checks' sends name it (portalId), the service answering the rest.
  let outFor = (_portal: string | undefined): boolean => false;
  // A retry after a 429 is said with the worker's 429s, at warn once in ten minutes: a retry answered reaches no step, and a
  // service turning away some of each burst, each taken on the retry, would otherwise never say requestsPerSecond is too high.
  let throttleNews = (): boolean => true;
  const clientLog = {
    warn: (obj: object, msg: string) => {
      if (outFor((obj as { portalId?: string }).portalId)) return logger.debug(obj, msg);
      // So for the catalog's listings once a refresh has failed, said once: four warnings a try, at each try after, until one succeeds.
      if (keeper?.failing && CATALOG_LISTINGS.has(String((obj as { operation?: unknown }).operation))) return logger.debug(obj, msg);
      // A retry's line only (it counts `attempt`): one on the 429's body is not about the rate.
      if (!('attempt' in obj && (obj as { status?: unknown }).status === 429)) return logger.warn(obj, msg);
      if (!throttleNews()) return logger.debug(obj, msg);
      logger.warn(obj, `${msg}: the service asks for fewer requests, said once in ten minutes (lower requestsPerSecond if it lasts)`);
    },
    debug: (obj: object, msg: string) => logger.debug(obj, msg),
  };
  const client = config.service instanceof VerificationClient ? config.service : new VerificationClient(config.service, { log: clientLog, secrets: passwords });
  const ownsStore = !config.store;
  let store: JobStore;
  try {
    // Its outage dated as the rest of /healthz is: `failing since` by the clock the sync goes by.
    store = watchOutages(config.store ?? SqliteJobStore.open(dataDir), logger, () => now().getTime());
  } catch (err) {
    if (ownsClient) void client.close();
    throw err;
  }
  const storeNow = store.now;
  if (storeNow) clock = () => storeNow.call(store);
  const policy = schedulePolicy(settings, routing);
  const metrics = new SyncMetrics(store, now, Object.keys(failureKinds()));
  const events = new EventEmitter();
  const given = config.catalog;
  const keeper = given ? undefined : new CatalogKeeper({ client, file: path.join(dataDir, 'catalog.json'), logger, now, refreshMs: settings.catalogRefreshMs });
  /** The catalog checks are resolved by: the one given, or the keeper's once it has one. */
  const catalogNow = () => given ?? keeper?.current;
  let writer: Promise<EligibilityWriter> | undefined;
  let reader: Promise<FhirReader> | undefined;
  let lastServiceCall: { ok: boolean; at: string } | undefined;

  const getWriter = () => {
    if ('writer' in config.fhir) return Promise.resolve(config.fhir.writer);
    const { baseUrl, ...auth } = config.fhir;
    return (writer ??= fhirWriter(baseUrl, auth));
  };
  const getReader = (): Promise<FhirReader> => {
    if ('writer' in config.fhir) {
      if (!config.fhir.reader) return Promise.reject(new Error('no FHIR reader configured: FHIR triggers need fhir.baseUrl or fhir.reader'));
      return Promise.resolve(config.fhir.reader);
    }
    return (reader ??= chartReader(config.fhir));
  };

  const emit = (name: SyncEventName, event: SyncEvent) => {
    if (name === 'verified' || name === 'failed') metrics.outcomes.inc({ outcome: event.outcome ?? event.state });
    // A failed result is counted when it arrives; the needs-attention event after its write names the same kind again.
    // A kind failure-kinds.json does not list is counted as Unknown: the service names kinds, and each new name would be a new series.
    if (name === 'failed' && event.failureKind) metrics.failures.inc({ kind: Object.hasOwn(failureKinds(), event.failureKind) ? event.failureKind : 'Unknown' });
    if (name === 'written') metrics.lastWritten.set(now().getTime() / 1000);
    // One line per check at info (written, failed, needs attention); a result on its way to the chart is debug.
    // The clinic and portal say whose credentials or office a failure is, where several share one serve.
    const level = name === 'verified' ? 'debug' : 'info';
    const { key, state, clinicId, portalId, correlationId, outcome, failureKind } = event;
    logger[level]({ event: name, key, state, clinicId, portalId, correlationId, outcome, failureKind }, `check ${name}`);
    events.emit(name, event);
  };

  const workerOptions: WorkerOptions = {
    concurrency: settings.concurrency,
    chartConcurrency: settings.chartConcurrency ?? settings.concurrency,
    loopBusyLimit: settings.loopBusyLimit,
    rateLimits: { perSecond: settings.requestsPerSecond, perPortalPerSecond: settings.requestsPerSecondPerPortal },
    maxAttempts: settings.maxAttempts,
    backoff: { baseMs: settings.backoffBaseMs, maxMs: settings.backoffMaxMs },
    webhookDeadlineMs: settings.webhookDeadlineMs,
    pollAfterMs: settings.pollAfterMs,
    pendingGiveUpMs: settings.pendingGiveUpMs,
    throttledGiveUpMs: settings.throttledGiveUpMs,
    leaseMs: settings.leaseMs,
    idleMs: settings.idleMs,
    policy,
    asyncEnabled: config.webhook !== undefined,
    ...(config.inlineCredentials && { inlineCredentials: config.inlineCredentials }),
  };
  const worker = new Worker(workerOptions, {
    store,
    client,
    resolver: () => {
      const catalog = catalogNow();
      if (!catalog) throw new Error('the payer catalog is not loaded: start() first');
      return catalog;
    },
    ...(keeper && { catalogAgain: () => keeper.again() }),
    writer: getWriter,
    now,
    log: logger,
    emit,
    arriving: () => arriving,
    webhookMissed,
    observe: (target, operation, seconds, ok) => {
      metrics.latency.observe({ target, operation, ok: String(ok) }, seconds);
      if (target === 'service') lastServiceCall = { ok, at: now().toISOString() };
    },
  });

  metrics.inHand = () => worker.busy;
  // One payer portal out is not the service down: its checks wait, and healthz says which.
  /**
   * Since when the service refuses the API key, while it does: until a call of the worker's is
   * answered (or refused for anything but the key: see keyTaken), or a refresh of the payer catalog,
   * which uses the key too (an instance that sends nothing for hours would else say the key refused
   * after it was replaced).
   */
  const keyRefusedSince = () => {
    const since = worker.keyRefusedSince;
    return since !== undefined && (keeper?.answeredAt ?? Number.NEGATIVE_INFINITY) < since.getTime() ? since : undefined;
  };
  metrics.serviceUp = () => worker.service.since === undefined && keyRefusedSince() === undefined && catalogNow() !== undefined;
  metrics.portalsOut = () => worker.service.portalsOut.length;
  outFor = (portal) => worker.service.outFor(portal) !== undefined;
  throttleNews = () => worker.throttleNews();

  const fhirOptions = { routing, now, policy };

  /** Counts an appointment read, and has the worker look for what it made due. */
  const ingested = (done: FhirIngested) => {
    metrics.messages.inc({ type: 'fhir-notification', ack: done.duplicate ? 'duplicate' : 'stored' });
    worker.kick();
  };

  async function notifyAppointment(appointmentId: string): Promise<FhirIngested> {
    const done = await ingestFhirAppointment(store, await getReader(), appointmentId, fhirOptions);
    ingested(done);
    return done;
  }

  /**
   * A FHIR letter kept for a person (a notification refused, or one resource of it; a poll's appointment): counted
   * as every dead letter is, an HL7 message's or a webhook's. False when kept before (`once`).
   */
  const keepFhirLetter = async (letter: { raw: string; reason: string; once?: string }): Promise<boolean> => {
    const kept = await deadLetter(store, { kind: 'fhir-notification', ...letter, receivedAt: now() });
    if (kept) metrics.messages.inc({ type: 'fhir-notification', ack: 'dead' });
    return kept;
  };
  /** A notification refused (400, 413, 422) and kept: said as a warning, as an HL7 message refused is, else only jobs messages --dead knew of it. */
  const refuseNotification = async (status: number, letter: { raw: string; reason: string; once?: string }) => {
    if (await keepFhirLetter(letter)) logger.warn({ status, reason: detailForLog(letter.reason) }, 'FHIR notification refused; kept as a dead letter (jobs messages --dead)');
  };

  const notificationHandler = counted((req: IncomingMessage, res: ServerResponse) => {
    let raw: string | undefined;
    void (async () => {
      const body = await readBody(req, 1024 * 1024);
      // The sender hung up before its body ended: its fault, nothing to keep, and no notification this sync failed to handle.
      if (body.kind === 'cut-off') return sendOutcome(res, 400, 'incomplete', SENDER_HUNG_UP);
      if (body.kind === 'too-large') {
        // Not read whole, so not kept: said and counted, as one refused at the door is, or only its sender would know.
        logger.warn({ status: 413 }, 'FHIR notification refused: its body exceeds 1 MiB');
        metrics.messages.inc({ type: 'fhir-notification', ack: 'refused' });
        return sendOutcome(res, 413, 'too-costly', 'notification body exceeds 1 MiB');
      }
      if (body.kind === 'busy') {
        res.setHeader('retry-after', '5');
        return sendOutcome(res, 503, 'transient', BUSY_READING);
      }
      raw = body.text;
      const ids = subscriptionNotificationIds(raw, req.url ?? '/');
      if (ids.kind === 'invalid' || ids.kind === 'too-many') {
        await refuseNotification(ids.kind === 'invalid' ? 400 : 413, { raw, reason: ids.reason });
        return ids.kind === 'invalid' ? sendOutcome(res, 400, 'invalid', ids.reason) : sendOutcome(res, 413, 'too-costly', ids.reason);
      }
      if (ids.kind === 'heartbeat') {
        // An id-only R4 notification names nothing: look for what changed, after answering, as a
        // FHIR server gives its endpoint seconds and a poll may read many pages.
        return sendOutcome(res, 200, 'informational', `heartbeat: ${pollInBackground()}`);
      }
      const results: string[] = [];
      const received = raw;
      const { changed, unfit } = ids;
      // Kept as one letter, replayed by no one: an id R4 does not allow names nothing the chart can be read for.
      // Once: kept before the reads, it would be kept again at each try of a sender told 500 (the chart out of reach).
      if (unfit.length > 0) {
        const reason = unfit.join('; ');
        await refuseNotification(422, { raw, reason, once: `${req.url ?? ''}|${raw}|${reason}` });
      }
      const refused = [...unfit];
      // Appointments first; a patient's details or coverages changed: their appointments already held are read again, but those read above.
      for (const type of CHANGED_TYPES) {
        for (const id of changed[type]) {
          // One resource that cannot be read is no reason to leave the others of the notification unread.
          try {
            results.push(await ingestFhirChange(store, await getReader(), { type, id }, { ...fhirOptions, raw: received, readAbove: changed.Appointment, ingested }));
          } catch (err) {
            if (!(err instanceof FhirInputError)) throw err;
            const reason = refusedOn({ type, id }, err);
            // The notification is kept whole once; each other resource of it the chart refuses names itself alone, as a
            // poll's letter does: each a copy of the notification was its size over again (3,000 ids in 258 KB kept 761 MB).
            const raw = refused.length === 0 ? received : JSON.stringify({ reference: `${type}/${id}` });
            await refuseNotification(422, { raw, reason });
            refused.push(reason);
          }
        }
      }
      const told = CHANGED_TYPES.filter((type) => changed[type].length > 0);
      // Handled (what the chart refused kept as letters of their own): a letter of its earlier tries, answered 500, is moot.
      // Not a reason to answer a notification handled 500: its letter stays, for a person.
      const resolved = await resolveResent(store, { url: req.url ?? '', raw: received, handledAt: now() }).catch(() => 0);
      if (resolved > 0) logger.info({ resolved }, 'FHIR notification sent again and handled: the dead letter kept when it could not be handled is handled too');
      if (refused.length > 0) return sendOutcome(res, 422, 'processing', [...refused, ...results].join('; '), told);
      sendOutcome(res, 200, 'informational', results.join('; '), told);
    })().catch(async (err: unknown) => {
      // Kept as received even so (a sender may never send it again); a store that is down cannot keep it.
      // Once a day: the sender sends it again while the chart is out of reach, and each try that fails so
      // is no news, a letter and an error line of its own. An id-only notification's path and empty body
      // are the same at the next change: a later day keeps it again, as does a failure after a resend was handled or a person dismissed it.
      const receivedAt = now();
      const reason = `not handled (${errorText(err)}); the sender was asked to send it again`;
      // An id-only notification names its resource in its path alone: kept so, the letter says what it was.
      // Undefined: nothing to keep (a body not read), or the store failing to keep it; false: kept before and dead still.
      const kept = raw === undefined ? undefined : await keepUnhandled(store, { url: req.url ?? '', raw, kept: raw === '' ? JSON.stringify({ path: req.url ?? '' }) : raw, reason, receivedAt }).catch(() => undefined);
      // Counted as every dead letter kept is, a refused notification's too.
      if (kept) metrics.messages.inc({ type: 'fhir-notification', ack: 'dead' });
      // The store out of reach is said once by its watch; the sender is asked to send it again all the same.
      if (kept !== false && !storeOutage(err)) logger.error({ err: errorText(err) }, 'FHIR notification not handled; the sender was asked to send it again');
      sendOutcome(res, 500, 'exception', 'the notification could not be handled now; send it again');
    });
  }, (res) => sendOutcome(res, 503, 'transient', STOPPED));

  // A chart that refuses a search refuses it on every poll: said once, and again once it answers.
  const unreadTypes = new Set<string>();
  async function pollAppointments(): Promise<number> {
    const since = await store.transaction((tx) => tx.getMeta(POLL_CURSOR));
    const { ids, cursor, unread } = await appointmentsToPoll(store, await getReader(), { now: now(), policy, days: settings.fhirPollDays, since });
    for (const resourceType of ['Coverage', 'Patient', 'RelatedPerson'] as const) {
      const failed = unread.find((u) => u.resourceType === resourceType);
      if (!failed) {
        if (unreadTypes.delete(resourceType)) logger.info({ resourceType }, 'FHIR poll searches what changed of this type again');
        continue;
      }
      const first = !unreadTypes.has(resourceType);
      unreadTypes.add(resourceType);
      logger[first ? 'warn' : 'debug']({ resourceType, err: errorText(failed.err) }, 'FHIR poll could not search what changed of this type: appointments were polled, changes under them wait for a notification');
    }
    for (const id of ids) {
      try {
        await notifyAppointment(id);
      } catch (err) {
        if (!(err instanceof FhirInputError)) throw err;
        const reference = `Appointment/${id}`;
        const reason = refusedOn({ type: 'Appointment', id }, err);
        // One awaiting insurance is read at every poll, and refused so at every poll: kept once, until the
        // store's appointment changes (the chart answered in between) or the refusal does.
        const held = await store.transaction((tx) => tx.getAppointment(`fhir|${reference}`));
        const once = `${reference}|${held?.updatedAt ?? 'not held'}|${reason}`;
        if (!(await keepFhirLetter({ raw: JSON.stringify({ reference }), reason, once }))) continue;
        logger.warn({ reason: detailForLog(reason) }, 'FHIR poll kept an appointment the chart refuses as a dead letter (jobs messages --dead); read again at each poll, it is kept once');
      }
    }
    if (cursor && cursor !== since) await store.transaction((tx) => tx.setMeta(POLL_CURSOR, cursor));
    return ids.length;
  }

  /** Closes what this sync opened, once. */
  const closeOwned = async () => {
    if (stopped) return;
    stopped = true;
    await closeEachOrThrow([
      ...(ownsClient ? [{ name: 'the service client', close: () => client.close() }] : []),
      ...(ownsStore ? [{ name: 'the job store', close: () => store.close() }] : []),
    ]);
  };

  let pollTimer: NodeJS.Timeout | undefined;
  /** The poll under way, timed or a heartbeat's, which stop() waits for. */
  let polling: Promise<void> | undefined;
  /** The stop under way or done: see stop(). */
  let stopping: Promise<void> | undefined;
  let stopped = false;
  /**
   * What /healthz last answered 503 for ('' while it answers 200). An orchestrator restarting serve
   * for it leaves only its restarts to see otherwise: said once it starts or changes, not at every probe.
   */
  let unhealthy = '';
  /** The probes /healthz has started, and the latest of them to have said its answer (see health()). */
  let probesStarted = 0;
  let probeSaid = 0;
  /** The start under way or done: see start(). */
  let starting: Promise<void> | undefined;
  /** How the polls have failed since the last that succeeded (see pollInBackground): each way is warned of once. */
  let pollFailing: 'refused' | 'failed' | undefined;
  /** Starts a poll unless one is under way or the sync is stopping; says which. */
  const pollInBackground = (): string => {
    if (stopping) return 'the sync is stopping: no poll';
    if (polling) return 'a poll is already under way';
    polling = pollAppointments()
      .then(
        () => {
          if (pollFailing) logger.info('FHIR poll succeeds again');
          pollFailing = undefined;
        },
        (err: unknown) => {
          // The store out of reach is said once by its watch.
          if (storeOutage(err)) return void logger.debug({ err: errorText(err) }, 'FHIR poll failed; trying again at the next interval or heartbeat');
          // Refused for good (a refusal, a redirect, a next link elsewhere), or the chart out of reach, it fails so at every
          // interval: said once, as the chart's writes are, not a warning a minute through an hour's outage.
          const how = err instanceof FhirInputError ? 'refused' : 'failed';
          const message =
            how === 'refused'
              ? "FHIR poll refused the chart's answer, as it will at every interval: said once, and again once a poll succeeds"
              : 'FHIR poll failed; trying again at each interval or heartbeat: said once, and again once a poll succeeds';
          logger[pollFailing === how ? 'debug' : 'warn']({ err: errorText(err) }, message);
          pollFailing = how;
        },
      )
      .finally(() => {
        polling = undefined;
      });
    return 'polling the FHIR server for what changed';
  };
  const schedulePoll = () => {
    if (settings.fhirPollIntervalMs <= 0 || stopping) return;
    pollTimer = setTimeout(() => {
      pollInBackground();
      void polling?.finally(schedulePoll);
    }, settings.fhirPollIntervalMs);
  };

  let pruneTimer: NodeJS.Timeout | undefined;
  let clockWatch: NodeJS.Timeout | undefined;
  /** The checks being dated back after this machine's clock stepped back, which stop() waits for. */
  let datingBack: Promise<void> | undefined;
  /** Dates back what the store holds dated ahead of this machine's clock (dateBackChecks), and says so, with by how much. */
  const dateBack = async (aheadMs: number) => {
    const checks = await dateBackChecks(store, clock, policy);
    await dateBackKept(store, clock(), aheadMs);
    logger.warn({ aheadMs: Math.round(aheadMs), checks }, CLOCK_STEPPED_BACK);
  };
  /** The prune under way, which stop() waits for (it stops between batches). */
  let pruning: Promise<void> | undefined;
  /**
   * Deletes the work finished before the retention period, batch after batch until none is left,
   * then again after the interval. What went is said as counts alone: a key or a message's id names
   * a patient's visit. A store failing is warned of and tried again next time; the sync goes on.
   */
  const schedulePrune = (afterMs: number) => {
    if (stopping) return;
    pruneTimer = setTimeout(() => {
      const before = new Date(now().getTime() - settings.retentionDays * 86_400_000).toISOString();
      pruning = pruneFinished(store, before, { stopping: () => stopping !== undefined })
        .then(
          (pruned) => {
            for (const what of PRUNED) if (pruned[what] > 0) metrics.pruned.inc({ what }, pruned[what]);
            if (pruned.bodies > 0) metrics.prunedBodies.inc(pruned.bodies);
            if (PRUNED.some((what) => pruned[what] > 0) || pruned.bodies > 0) logger.info({ ...pruned, retentionDays: settings.retentionDays }, 'pruned the job store of the work finished before the retention period');
          },
          (err: unknown) => {
            // The store out of reach is said once by its watch.
            logger[storeOutage(err) ? 'debug' : 'warn']({ err: errorText(err) }, 'pruning the job store failed; trying again at the next interval');
          },
        )
        .finally(() => {
          pruning = undefined;
          schedulePrune(settings.pruneIntervalMs);
        });
    }, afterMs);
  };

  const sync = Object.assign(events, {
    store,
    metrics,
    logger,
    webhookHandler,
    notificationHandler,
    notifyAppointment: async (id: string) => {
      running();
      return notifyAppointment(id);
    },
    pollAppointments: async () => {
      running();
      return pollAppointments();
    },
    async receiveHl7(text: string): Promise<Ack[]> {
      running();
      arriving++;
      const done = await ingestHl7(store, text, { mappings, routing, now, policy }).finally(() => arriving--);
      const type = done.result ? messageType(done.result) : resendType(text, mappings);
      metrics.messages.inc({ type, ack: done.result ? done.result.ackCode : 'duplicate' });
      // The sender is answered AE or AR, and may not show it: the log says which message and where it is wrong, never what it holds.
      if (done.result?.outcome.kind === 'reject') {
        logger.warn({ message: done.messageId, type, ack: done.result.ackCode, problem: describeProblems(done.result.outcome.problems) }, 'HL7 message refused; kept as a dead letter (jobs messages --dead)');
      }
      if (done.created.length > 0) worker.kick();
      return done.acks;
    },
    async deadLetterHl7(letter: { message: string; reason: string }): Promise<void> {
      running();
      await deadLetter(store, { kind: 'hl7', raw: letter.message, reason: letter.reason, receivedAt: now() });
      metrics.messages.inc({ type: 'unreadable', ack: 'dead' });
    },
    async replay(messageId: number): Promise<Replayed> {
      running();
      const done = await replayMessage(store, messageId, { mappings, routing, now, policy, reader: getReader, ingested: () => worker.kick() });
      worker.kick();
      return done;
    },
    async health() {
      const probe = ++probesStarted;
      const store_ = await storeAnswer(store.ping()).then(
        async () => {
          // A read answered, but the store's watch may know its changes fail (a disk full): checks and messages wait.
          // Then a change of its own tries it, which ends the outage once it is taken, so an instance taken out of a
          // balancer for it, and sent nothing meanwhile, comes back with the store.
          if (!outageOf(store)) return 'ok';
          await storeAnswer(store.transaction((tx) => tx.setMeta(HEALTH_PROBE, now().toISOString()))).catch(() => undefined);
          const out_ = outageOf(store);
          return out_ ? `failing since ${out_.since.toISOString()}: ${out_.err}` : 'ok';
        },
        (err: unknown) => `failing: ${errorText(err)}`,
      );
      // Its /metadata needs no token: a chart refusing the plugin's writes answers it all the same.
      const refusing = worker.chartRefusing;
      const reached = await fhirHealth(config.fhir);
      const fhir =
        reached === 'ok' && refusing
          ? `refusing this plugin's writes (${refusing.status}: ${refusing.status === 401 ? 'its token' : 'its permissions'}) since ${refusing.since.toISOString()}: checks wait for a person (jobs retry once it takes them)`
          : reached;
      const out = worker.service.since;
      const keyRefused = keyRefusedSince();
      const portals = worker.service.portalsOut;
      const portalsSaid = `payer ${portals.length === 1 ? 'portal' : 'portals'} ${portals.map((p) => `${p.portal} since ${p.since.toISOString()}`).join(', ')}`;
      // A portal out on its own before the service went stays out once it is back: said meanwhile too.
      const service =
        !catalogNow()
          ? `no payer catalog yet${keeper?.failure ? ` (${keeper.failure})` : ''}: checks wait for it`
          : keyRefused
            ? `refusing the API key (401) since ${keyRefused.toISOString()}: checks wait for a person (jobs retry once the key is replaced)`
            : out
              ? `not answering since ${out.toISOString()}: checks wait for it${portals.length > 0 ? `, and for ${portalsSaid}` : ''}`
              : portals.length > 0
                ? `not answering for ${portalsSaid}: ${portals.length === 1 ? 'its checks wait for it' : 'their checks wait for them'}, the others go on`
                : lastServiceCall === undefined ? 'no calls yet' : lastServiceCall.ok ? 'ok' : `last call failed at ${lastServiceCall.at}`;
      // A balancer that keeps sending to an instance stopping keeps its stop waiting on what it sends: told, it routes elsewhere.
      const going = stopping !== undefined;
      // A stop is said as serve stops; what fails is said here.
      const failing = [store_ !== 'ok' && 'the store', fhir === 'unreachable' && 'the chart'].filter((part) => part !== false).join(' and ');
      // Probes at once (a balancer's and an orchestrator's) end in any order, one held by a chart slow to answer: the log
      // follows the order they started, so one that started before the latest said has nothing to say, its answer its own.
      if (probe > probeSaid) {
        probeSaid = probe;
        if (failing !== unhealthy) {
          if (failing) logger.warn({ store: store_, fhir }, `health failing (/healthz answers 503): ${failing}`);
          else logger.info('health ok again (/healthz answers 200 unless stopping)');
          unhealthy = failing;
        }
      }
      return { ok: !going && failing === '', store: store_, fhir, service, ...(going && { stopping: true as const }) };
    },
    start(): Promise<void> {
      // Stopping counts as stopped: a start under way then would take up a store stop() is closing.
      if (stopped || stopping) return Promise.reject(new Error('this eligibility sync is stopped (or failed to start); create another'));
      // Called again, or twice at once, it is the same start: two would load and save the catalog over each other.
      return (starting ??= startOnce());
    },
    stop(): Promise<void> {
      // Called again, or twice at once (a shutdown signal and a failed probe), it is the same stop: no caller returns before the store is closed.
      return (stopping ??= stopOnce());
    },
  });
  /**
   * What arrives after stop() closed the store this sync opened is refused as such, not with the
   * closed store's own error. A store handed over stays open and still takes it: stored, it is
   * worked by the next sync on that store.
   */
  function running(): void {
    if (refusing()) throw new Error(`${STOPPED}: nothing more is received (create another)`);
  }
  /** Stopped, on a store this sync opened and closed: what arrives is refused (see running). */
  function refusing(): boolean {
    return stopped && ownsStore;
  }
  async function stopOnce(): Promise<void> {
    // A start under way would start the worker behind this stop, on a store closed or left open: it is let finish, then stopped (its failure is start()'s to tell).
    await starting?.catch(() => undefined);
    if (pollTimer) clearTimeout(pollTimer);
    if (pruneTimer) clearTimeout(pruneTimer);
    clearInterval(clockWatch);
    await Promise.all([polling, pruning, datingBack]);
    // The keeper first, as a catalog given meanwhile would start the worker behind its stop; and the worker at
    // once, not after a refresh under way (a read, as long as the client's retries): it would take checks meanwhile.
    await Promise.all([keeper?.stop(), worker.stop()]);
    await closeOwned();
  }
  async function startOnce(): Promise<void> {
    try {
      // Worked from before the catalog loads, which waits out the service's retries in an outage: a newer version
      // started meanwhile finds this one working the store (its lock) and is refused, not upgrading it under this one.
      const orphaned = await store.beginWork();
      if (orphaned > 0) logger.info({ checks: orphaned }, 'took up the checks a stopped process had in hand');
      // Said, as this machine's log lines are dated by its own clock, not the one its work goes by.
      const skewMs = storeNow && !config.now ? clock().getTime() - Date.now() : 0;
      if (Math.abs(skewMs) > CLOCK_SKEW_SAID_MS) logger.warn({ skewMs: Math.round(skewMs) }, "this machine's clock differs from the job store's database: checks are timed by the database's clock");
      // A store timed by this machine's clock (SQLite) after it stepped back (a VM restored, a wrong clock set right): the
      // due times stored before would wait out the step on top of their own delays. Dated back before the worker starts.
      const [newest] = storeNow || config.now ? [] : await store.listChecks({ limit: 1 });
      const aheadMs = newest ? Date.parse(newest.updatedAt) - clock().getTime() : 0;
      if (aheadMs > CLOCK_SKEW_SAID_MS) await dateBack(aheadMs);
      // The validator's definitions are read in a thread of their own while the catalog loads. An outage the store
      // keeps is taken up first: the load waits out the client's retries of a service still away, /healthz and
      // dental_elig_service_up saying it answered meanwhile, an alert on it cleared by each restart in the outage.
      await Promise.all([worker.takeUpOutage(), keeper?.load(), loadR4Validation()]);
    } catch (err) {
      // Nothing is left open for an embedder that tries again with another sync (the store, its worker lock, the client),
      // and the start's failure is the one given: a close failing after it is said in the log.
      await closeOwned().catch((closing: unknown) => logger.error({ err: errorText(closing) }, 'closing what this sync opened failed after its start failed'));
      throw err;
    }
    // And a step back while it runs, which the start's look cannot see.
    if (!storeNow && !config.now) {
      clockWatch = watchClockSteps((stepMs) => {
        if (stopping) return;
        worker.service.steppedBack(stepMs);
        // One after another: a second step while the first's are dated back reads the rows the first left.
        datingBack = (datingBack ?? Promise.resolve())
          .then(() => dateBack(stepMs))
          .then(
            () => worker.kick(),
            (err: unknown) => logger[storeOutage(err) ? 'debug' : 'warn']({ err: errorText(err), aheadMs: Math.round(stepMs) }, "the job store holds changes dated ahead of this machine's clock, which has stepped back: dating them back failed, and checks due meanwhile wait that much longer"),
          );
      });
    }
    const work = () => {
      worker.start();
      keeper?.start();
    };
    if (keeper && !catalogNow()) {
      // A first start in an outage: what arrives is taken and stored, and verified once the service gives the catalog.
      logger.warn({ err: keeper.failure }, 'payer catalog: cannot be fetched from the service and none is saved; messages are taken, and checks wait for it');
      keeper.fetchUntilGiven({ baseMs: settings.backoffBaseMs, maxMs: settings.backoffMaxMs }, () => {
        logger.info('payer catalog fetched; checks go on');
        work();
      });
    } else work();
    schedulePrune(Math.min(FIRST_PRUNE_MS, settings.pruneIntervalMs));
    schedulePoll();
    // The point past which a rollback needs the copy kept before it: said, with when it was passed.
    if (store.upgradedFrom !== undefined) logger.info({ from: store.upgradedFrom }, 'the job store was upgraded from its schema version as it opened: earlier versions cannot open it now (roll back to a copy kept before)');
    logger.info({ concurrency: settings.concurrency, async: workerOptions.asyncEnabled }, 'eligibility sync started');
  }
  return sync as unknown as EligibilitySync;
}

/** Routing given inline, checked as clinics.json is: a time zone no runtime knows would fail every FHIR appointment dated in it. */
function inlineRouting(routing: unknown): ClinicRouting {
  const parsed = ClinicRoutingFile.safeParse(routing);
  if (!parsed.success) throw new Error(describeIssue(parsed.error, 'routing', ['routing']));
  return parsed.data;
}

/**
 * The service's settings, named under `service` as the chart's are under `fhir`: the client's own
 * words ('config: Unrecognized key', 'baseUrl: must be an http(s) URL') read as the sync's top level, or its chart.
 */
function checkService(service: EligibilitySyncConfig['service']): void {
  if (service instanceof VerificationClient) return;
  const parsed = ClientConfig.safeParse(service);
  if (!parsed.success) throw new Error(describeIssue(parsed.error, 'service', ['service']));
}

/** The chart, refused at creation: a bad URL or option failed every write once its check was verified, retried as if the chart were down. */
function checkFhir(fhir: EligibilitySyncConfig['fhir'] | undefined): void {
  if (typeof fhir !== 'object' || fhir === null) throw new Error('fhir: is required (baseUrl, or a writer of your own)');
  if ('writer' in fhir) return;
  const { baseUrl, ...options } = fhir;
  if (typeof baseUrl !== 'string' || !isHttpUrl(baseUrl)) throw new Error('fhir.baseUrl: must be an http(s) URL');
  // As serve and convert refuse it: fetch repeats such a URL whole in its errors, and the logs with them.
  if (carriesCredentials(baseUrl)) throw new Error('fhir.baseUrl: credentials do not belong in the URL; give bearerToken or smart');
  const parsed = FhirWriterOptions.safeParse(options);
  if (!parsed.success) throw new Error(describeIssue(parsed.error, 'fhir', ['fhir']));
  const tokenEndpoint = parsed.data.smart?.tokenEndpoint;
  for (const [name, url, sent] of [['fhir.baseUrl', baseUrl, CHART_TRAFFIC], ['fhir.smart.tokenEndpoint', tokenEndpoint, TOKEN_TRAFFIC]] as const) {
    if (url !== undefined && isPlainHttpAcrossNetwork(url) && !parsed.data.allowInsecureHttp) throw new Error(`${name}: ${plainHttpRefused(sent, 'fhir.allowInsecureHttp')}`);
  }
}

/**
 * Says each step back of this machine's clock, by how much, as it comes: the wall clock against
 * the monotonic one, which a step does not move. A clock that runs on ahead of the monotonic one
 * (a host suspended) is taken as the mark from then on: only steps back delay what the store holds.
 */
function watchClockSteps(said: (stepMs: number) => void): NodeJS.Timeout {
  const offset = () => Date.now() - performance.now();
  let mark = offset();
  const watch = setInterval(() => {
    const now = offset();
    if (mark - now > CLOCK_SKEW_SAID_MS) said(mark - now);
    // Said once a step: the next is measured from here.
    if (now > mark || mark - now > CLOCK_SKEW_SAID_MS) mark = now;
  }, CLOCK_WATCH_MS);
  watch.unref();
  return watch;
}

/** The meta row /healthz changes to try a store whose changes failed (see health()). */
const HEALTH_PROBE = 'health-probe';

/** How long /healthz waits for the chart's /metadata. */
const FHIR_PROBE_MS = 2000;

/**
 * The chart as /healthz says it. One that took the connection but has not answered in time (a
 * morning's batch loading it) is slow, not down: said, but no 503, for an orchestrator would
 * restart a healthy serve for it and the chart would be no faster. One that cannot be reached,
 * closes the connection unanswered, or answers 5xx, is unreachable. Each probe has a connection of
 * its own, so a pooled one does not hide a chart that no longer takes new ones.
 */
async function fhirHealth(fhir: EligibilitySyncConfig['fhir']): Promise<string> {
  if (!('baseUrl' in fhir)) return 'custom writer';
  let connected = false;
  const connector = buildConnector({ timeout: FHIR_PROBE_MS });
  const agent = new Agent({
    connect: (options, done) =>
      connector(options, (...made) => {
        connected ||= made[0] === null;
        done(...made);
      }),
  });
  const deadline = AbortSignal.timeout(FHIR_PROBE_MS);
  try {
    const res = await request(`${fhir.baseUrl.replace(/\/+$/, '')}/metadata`, { signal: deadline, headers: bearerHeader(fhir), dispatcher: agent });
    await res.body.dump();
    return res.statusCode < 500 ? 'ok' : 'unreachable';
  } catch {
    // Slow only where the time ran out: one that took the connection and closed it unanswered (a balancer in front of
    // a chart that is down) or reset it is as down as one that refused it.
    return connected && deadline.aborted ? `slow: connected, but /metadata not answered in ${FHIR_PROBE_MS / 1000} s (checks' reads and writes wait for it)` : 'unreachable';
  } finally {
    await agent.destroy().catch(() => undefined);
  }
}

/** An HL7 message type as HL7 writes it: three letters or digits, then the event's three. */
const HL7_TYPE = /^[A-Z0-9]{3}\^[A-Z0-9]{3}$/;

/**
 * A message's type as the metrics count it. Each value is a series kept for the process's life, so
 * a type the profile does not know, or one no sender writes (MSH-9 may hold anything, a megabyte
 * of it), is counted as unsupported, not as a label of its own.
 */
function messageType(result: Hl7Result): string {
  if (!result.header) return 'unknown';
  const type = messageTypeOf(result.header);
  const unsupported = result.outcome.kind === 'reject' && result.outcome.problems.some((p) => p.code === 200 || p.code === 201);
  return HL7_TYPE.test(type) && !unsupported ? type : 'unsupported';
}

/**
 * A resend's type, which its first delivery was counted under: read from its header, and counted
 * by it only when its sender's profile (MSH-3, first component) takes the event, as the first
 * delivery's handling asked; a type another sender's dialect takes was unsupported from this one.
 */
function resendType(text: string, mappings: Hl7Mappings): string {
  const header = readMessageHeader(text);
  if (!header) return 'unknown';
  const type = messageTypeOf(header);
  const profile = profileFor(mappings, header.sendingApplication.split(header.delimiters.component)[0] ?? '');
  return HL7_TYPE.test(type) && eventActionFor(profile, header) !== undefined ? type : 'unsupported';
}

const STOPPED = 'this eligibility sync is stopped';

/** The chart's reader, as the sync reads it (`jobs replay` too): its credentials and deadline. */
export function chartReader(fhir: { baseUrl: string } & FhirWriterOptions): Promise<FhirReader> {
  return fhirKitReader(fhir.baseUrl, readerAuth(fhir));
}

/** The reader's credentials (the static token, or SMART tokens of its own, for the read scopes unless a scope is configured) and deadline. */
function readerAuth(fhir: { baseUrl: string } & FhirWriterOptions): FhirKitReaderOptions {
  const timeoutMs = fhir.timeoutMs ?? CHART_TIMEOUT_MS;
  const allowInsecureHttp = fhir.allowInsecureHttp ?? false;
  if (fhir.smart) return { timeoutMs, allowInsecureHttp, tokens: smartBackendTokens(fhir.baseUrl.replace(/\/+$/, ''), { ...fhir.smart, scope: fhir.smart.scope ?? READ_SCOPE }, timeoutMs, allowInsecureHttp) };
  return { timeoutMs, allowInsecureHttp, ...(fhir.bearerToken && { bearerToken: fhir.bearerToken }) };
}

function bearerHeader(fhir: { bearerToken?: string }): Record<string, string> {
  return fhir.bearerToken ? { authorization: `Bearer ${fhir.bearerToken}` } : {};
}

/** The answer to a notification; its expression names the resource types the notification told of, if any. */
function sendOutcome(res: ServerResponse, status: number, code: OperationOutcomeIssue['code'], diagnostics: string, told: readonly string[] = []): void {
  if (res.headersSent) return;
  const severity = status < 300 ? 'information' : 'error';
  res.writeHead(status, { 'content-type': 'application/fhir+json' });
  res.end(JSON.stringify(operationOutcome([{ severity, code, diagnostics, ...(told.length > 0 && { expression: told }) }])));
}
