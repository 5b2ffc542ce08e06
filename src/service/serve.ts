import * as path from 'node:path';
import type { FhirResource } from 'fhir/r4';
import { closeEach, type Closing } from '../close-each';
import { errorText } from '../sync/error-text';
import { openJobStore } from '../sync/open-store';
import { httpOrigin, isLoopbackHost } from '../url-checks';
import { WEBHOOK_PATH } from '../verification/webhook';
import { createEligibilitySync, type EligibilitySync } from './eligibility-sync';
import { startHttpServer, thisMachineOnly, type Mount } from './http-server';
import { youngGenerationAdvice } from './heap-growth';
import { createLogger } from './logger';
import { MllpListener } from './mllp-listener';
import type { ServeConfig } from './serve-config';

export interface Serving {
  sync: EligibilitySync;
  mllp: { host: string; port: number };
  http: { host: string; port: number };
  /** The chart's FHIR base (the embedded one at /fhir when no FHIR server was configured). */
  fhirUrl: string;
  /** The service's base URL (the in-process sandbox's when none was configured). */
  serviceUrl: string;
  /** The embedded FHIR server, when it is the chart: puts an EHR's existing resources in place, unvalidated. */
  embeddedChart?: { seed(resources: readonly FhirResource[]): Promise<void> };
  /** Stops every part, whatever one of them throws; rejects after, naming those that failed (each logged). */
  close(): Promise<void>;
}

/**
 * The sidecar: the job store in the data dir, the HTTP server (webhook, notifications, health,
 * metrics), the worker and the MLLP listener. With no service configured it runs the sandbox
 * in-process, its webhook pointed at this server; with no FHIR server, the embedded one at /fhir.
 * Started again on the same data dir, it goes on where it stopped: the store holds everything.
 */
export async function serve(config: ServeConfig, log: { line(text: string): void; destination?: NodeJS.WritableStream }): Promise<Serving> {
  const logger = createLogger({ level: config.logLevel, ...(log.destination && { destination: log.destination }) });
  const closers: Closing[] = [];
  /** Closes what started, the last first, each whatever the others throw; says which failed, and gives their names. */
  const closeAll = async () => {
    const failed = await closeEach([...closers].reverse());
    for (const { name, error } of failed) logger.error({ err: errorText(error) }, `closing ${name} failed`);
    return failed.map(({ name }) => name);
  };
  try {
    // The simulator and the embedded FHIR server load only when they are used.
    const sandboxModule = config.service && config.fhir ? undefined : await import('../sandbox-entry.js');
    const sandbox = config.service ? undefined : await sandboxModule?.startSandbox({ seed: true, ...(config.customerId && { customerId: config.customerId }) });
    if (sandbox) closers.push({ name: 'the sandbox', close: () => sandbox.close() });
    const embeddedFhir = config.fhir ? undefined : sandboxModule?.createFhirHandler({ basePath: '/fhir', validate: true });
    const secret = config.webhook.scheme === 'standard-webhooks' ? (config.webhook.secret ?? sandboxModule?.generateWebhookSecret()) : undefined;

    const mounts: Mount[] = embeddedFhir ? [{ prefix: '/fhir', handle: thisMachineOnly(embeddedFhir.handle) }] : [];
    let sync: EligibilitySync | undefined;
    const http = await startHttpServer(() => sync, { host: config.host, port: config.httpPort, mounts, ...(config.notificationToken && { notificationToken: config.notificationToken }) });
    const fhirUrl = config.fhir?.baseUrl ?? `${httpOrigin(http.host, http.port)}/fhir`;

    const store = await openJobStore(config.store, config.dataDir).catch(async (err: unknown) => {
      await http.close();
      throw err;
    });
    closers.push({ name: 'the job store', close: () => store.close() });
    // Closed before the store: a request under way is answered from a store still open.
    closers.push({ name: 'the HTTP server', close: () => http.close() });
    sync = createEligibilitySync({
      store,
      dataDir: config.dataDir,
      service: config.service ?? { ...config.serviceTuning, baseUrl: sandbox?.url as string, apiKey: sandbox?.apiKey as string },
      // The embedded chart is this process, on whatever address serve listens on (0.0.0.0, a LAN address): nothing crosses a network.
      fhir: config.fhir ?? { baseUrl: fhirUrl, allowInsecureHttp: true },
      webhook: config.webhook.scheme === 'bearer' ? { scheme: 'bearer', token: config.webhook.token } : { scheme: 'standard-webhooks', secret: secret as string, ...(config.webhook.previousSecret && { previousSecret: config.webhook.previousSecret }) },
      settings: config.settings,
      ...(config.inlineCredentials && { inlineCredentials: config.inlineCredentials }),
      logger,
    });
    const webhookAuth = config.webhook.scheme === 'bearer' ? { bearerToken: config.webhook.token } : { secret };
    if (sandbox) sandbox.configureWebhook({ url: `${httpOrigin(http.host, http.port)}${WEBHOOK_PATH}`, ...webhookAuth });

    const started = sync;
    // Listening before the start, as the HTTP server is: a message needs the store alone, and the start waits out the
    // client's retries of the payer catalog in an outage (minutes, where the service takes connections and answers none).
    const mllp = new MllpListener({
      host: config.host,
      port: config.mllpPort,
      log: logger,
      handler: (message) => started.receiveHl7(message),
      onDeadLetter: (letter) => started.deadLetterHl7(letter),
    });
    const mllpAddress = await mllp.start();
    const listener = closers.push({ name: 'the MLLP listener', close: () => mllp.stop() }) - 1;
    await started.start();
    // Stopped after the listener closes (closers run last first), as what it took meanwhile is stored for the worker.
    closers.splice(listener, 0, { name: 'the worker', close: () => started.stop() });
    log.line(`listening: mllp ${mllpAddress.host}:${mllpAddress.port}`);
    log.line(`listening: http ${http.host}:${http.port}`);
    logger.info({ dataDir: path.resolve(config.dataDir), sandbox: Boolean(sandbox), embeddedFhir: Boolean(embeddedFhir) }, 'serving');
    if (!isLoopbackHost(config.host) && !config.notificationToken) {
      logger.warn({ host: config.host }, 'FHIR notifications are taken from anyone who reaches this address, and one that cannot be read is kept: set DENTAL_ELIG_NOTIFICATION_TOKEN, and give it in the Subscription\'s channel.header');
    }
    const advice = youngGenerationAdvice();
    if (advice) logger.warn(advice);
    let closing: Promise<void> | undefined;
    const closeOnce = async () => {
      // In the JSON log too, where a log pipeline sees a stop it was asked for apart from a crash.
      const asked = Date.now();
      logger.info('stopping: listeners close, checks in hand finish');
      const failed = await closeAll();
      if (failed.length > 0) {
        // Said, not swallowed: a part left open (a lock, a file) is the operator's to look at before the next start.
        logger.error({ ms: Date.now() - asked, failed }, 'stopped with errors');
        throw new Error(`stopped with errors: closing ${failed.join(', ')} failed`);
      }
      logger.info({ ms: Date.now() - asked }, 'stopped');
    };
    return {
      sync: started,
      mllp: mllpAddress,
      http: { host: http.host, port: http.port },
      fhirUrl,
      serviceUrl: config.service?.baseUrl ?? (sandbox?.url as string),
      ...(embeddedFhir && { embeddedChart: embeddedFhir }),
      close() {
        // Called again, or twice at once (a signal and a test's cleanup), it is the same stop: closed in order once, no caller returning before.
        return (closing ??= closeOnce());
      },
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}
