import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { isIP, type AddressInfo } from 'node:net';
import { operationOutcome } from '../adapters/fhir/operation-outcome';
import { capConnections, requestTiming, takeInHand } from '../connection-limits';
import { sendProblem } from '../problem-details';
import { networkCode } from '../sync/chart-errors';
import { errorText, withoutQuotes } from '../sync/error-text';
import { isLoopbackHost, requestUrl } from '../url-checks';
import { carriesBearer, WEBHOOK_PATH } from '../verification/webhook';
import type { EligibilitySync } from './eligibility-sync';

export const NOTIFICATION_PATH = '/fhir-notifications';

/** A request handler mounted under a path prefix (the embedded FHIR server at /fhir). */
export interface Mount {
  prefix: string;
  handle(req: IncomingMessage, res: ServerResponse): void | Promise<void>;
}

/**
 * The service's HTTP face: the verification webhook, FHIR Subscription notifications, /healthz,
 * /metrics and, with no FHIR server of the practice's own, the embedded one. Until `target` can
 * give the sync (the store is still opening), its endpoints answer 503 with Retry-After, so a
 * sender tries again.
 */
export async function startHttpServer(
  target: () => EligibilitySync | undefined,
  options: {
    host?: string;
    port?: number;
    mounts?: Mount[];
    /** The bearer token a FHIR notification must carry (the Subscription's channel.header). */
    notificationToken?: string;
    /** How long a request may take to arrive whole, its body too (REQUEST_TIMEOUT_MS). */
    requestTimeoutMs?: number;
  } = {},
): Promise<{ server: Server; host: string; port: number; close(): Promise<void> }> {
  // Empty (an embedder's unset variable read as '') it was no token: notifications taken from anyone, as serve's DENTAL_ELIG_NOTIFICATION_TOKEN was.
  if (options.notificationToken?.trim() === '') throw new Error('notificationToken: must not be empty (leave it out to take notifications without a token)');
  const server = createServer(requestTiming(options.requestTimeoutMs), (req, res) => {
    if (!takeInHand(req, res)) return;
    // The sync is bound late: it needs this server's address (its webhook URL, the embedded FHIR base).
    const sync = target();
    const url = requestUrl(req.url, 'http://x');
    if (!url) return sendProblem(res, 400, 'the request target is not a URL path');
    const { pathname } = url;
    const mount = options.mounts?.find((m) => pathname === m.prefix || pathname.startsWith(`${m.prefix}/`));
    if (mount) {
      // Its 5xx said, whether it threw or answered one itself: a PMS or the writer told 500 and nothing in serve's log.
      // The method and the mount, not the path: a chart's ids are made of patients' names as often as not.
      const failed = (status: number, err?: unknown) =>
        target()?.logger.error({ mount: mount.prefix, method: req.method, status, ...(err !== undefined && { err: thrownKind(err) }) }, `${mount.prefix} answered ${status}`);
      let threw = false;
      res.once('finish', () => void (!threw && res.statusCode >= 500 && failed(res.statusCode)));
      Promise.resolve()
        .then(() => mount.handle(req, res))
        .catch((err: unknown) => {
          threw = true;
          failed(500, err);
          sendProblem(res, 500, 'internal error');
        });
      return;
    }
    if (!sync) {
      res.setHeader('retry-after', '5');
      return sendProblem(res, 503, 'starting: try again shortly');
    }
    if (pathname === WEBHOOK_PATH) return sync.webhookHandler(req, res);
    if (pathname === NOTIFICATION_PATH || pathname.startsWith(`${NOTIFICATION_PATH}/`)) {
      if (req.method !== 'POST' && req.method !== 'PUT') {
        res.setHeader('allow', 'POST, PUT');
        return sendProblem(res, 405, 'notifications are POST or PUT');
      }
      // Said and counted, as a webhook refused is: a Subscription sent without its header, or a FHIR server or proxy that
      // adds Origin, has every notification refused, and nothing verified but by the poll; a log line alone no alert watches.
      const refuse = (status: number, detail: string) => {
        sync.logger.warn({ status }, `FHIR notification refused: ${detail}`);
        sync.metrics.messages.inc({ type: 'fhir-notification', ack: 'refused' });
        return sendProblem(res, status, detail);
      };
      // A FHIR server sends no Origin; a web page open on this machine does, and its text/plain POST needs no preflight.
      if (req.headers.origin !== undefined) return refuse(403, 'a FHIR notification comes from a FHIR server, not a web page (it carries Origin)');
      // Before the body is read: what a notification holds that cannot be read is kept, and a sender must not fill the store.
      if (options.notificationToken && !carriesBearer(req.headers.authorization, options.notificationToken)) {
        res.setHeader('www-authenticate', 'Bearer');
        return refuse(401, 'authorization does not carry the notification token (the Subscription\'s channel.header)');
      }
      return sync.notificationHandler(req, res);
    }
    if (req.method === 'GET' && pathname === '/healthz') {
      void sync.health().then(
        (h) => json(res, h.ok ? 200 : 503, h),
        (err: unknown) => {
          sync.logger.error({ err: withoutQuotes(errorText(err)) }, 'health check failed (/healthz answers 503)');
          sendProblem(res, 503, 'health check failed');
        },
      );
      return;
    }
    if (req.method === 'GET' && pathname === '/metrics') {
      void sync.metrics.text().then(
        (text) => res.writeHead(200, { 'content-type': sync.metrics.registry.contentType }).end(text),
        () => sendProblem(res, 500, 'metrics could not be read'),
      );
      return;
    }
    sendProblem(res, 404, 'no such endpoint');
  });
  // Said, as MLLP's refusals are.
  capConnections(server, () => target()?.logger);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { address, port } = server.address() as AddressInfo;
  return {
    server,
    host: address,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/**
 * A mount that answers this machine only: a client on loopback, or one that reached this machine's
 * own address from that address (serve listening on a LAN address writes its chart so). The
 * embedded FHIR server has no authentication and holds patient data; on 0.0.0.0 for a PMS's MLLP,
 * it would be read and written by anyone on the practice's network. A web page open in a browser
 * on this machine reaches it from loopback too, so what only a browser sends is refused: a Host
 * naming neither an address nor localhost (a page's own name, resolved to this machine after it
 * loaded, would have the answers read as its own: DNS rebinding), and an Origin (a cross-site POST
 * needs no preflight, so its write would be made though the page cannot read the answer).
 * Serve's writer, `convert fhir --server` and curl send neither.
 */
export function thisMachineOnly(handle: Mount['handle']): Mount['handle'] {
  return (req, res) => {
    const remote = req.socket.remoteAddress?.replace(/^::ffff:/, '') ?? '';
    const onThisMachine = isLoopbackHost(remote) || remote === req.socket.localAddress?.replace(/^::ffff:/, '');
    if (onThisMachine && !fromWebPage(req)) return handle(req, res);
    const diagnostics = onThisMachine
      ? 'the embedded FHIR server answers this machine only, and no web page: ask it at 127.0.0.1 or localhost, without Origin'
      : 'the embedded FHIR server answers this machine only: it has no authentication; a chart reached across the network is a FHIR server of its own (DENTAL_ELIG_FHIR_URL)';
    res.writeHead(403, { 'content-type': 'application/fhir+json' }).end(JSON.stringify(operationOutcome([{ code: 'forbidden', diagnostics }])));
  };
}

/** A request a browser made for a page: it carries Origin, or names this machine by a name other than localhost. */
function fromWebPage(req: IncomingMessage): boolean {
  if (req.headers.origin !== undefined) return true;
  const host = req.headers.host;
  if (host === undefined) return false;
  const hostname = URL.canParse(`http://${host}`) ? new URL(`http://${host}`).hostname : undefined;
  return hostname === undefined || !(isLoopbackHost(hostname) || isIP(hostname.replace(/^\[|\]$/g, '')) !== 0);
}

/**
 * What a mount threw, by its kind alone (TypeError, Error (ECONNREFUSED)): not its text, quotes
 * left out or not. A mount in front of a chart throws what its client threw, and fhir-kit-client's
 * says the URL it asked (`HTTP 500: GET …/Patient?family=Alvarez&birthdate=1984-03-02`).
 */
function thrownKind(err: unknown): string {
  const name = err instanceof Error && /^[A-Za-z][\w.]{0,63}$/.test(err.name) ? err.name : 'Error';
  const code = networkCode(err);
  return code ? `${name} (${code})` : name;
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

