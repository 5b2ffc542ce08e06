import { timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import * as z from 'zod';
import { describeIssue, fieldErrors } from '../domain/issues';
import type { Log } from './http';
import { redacted } from './redact';
import { inResult, toOutcome, type VerificationOutcome } from './outcome';
import { Verification, type FieldError } from './wire';
import { httpOrigin, requestUrl } from '../url-checks';
import { capConnections, readBody, requestTiming, takeInHand } from '../connection-limits';
import { sendProblem } from '../problem-details';

export interface WebhookDelivery {
  /** webhook-id: the same on every retry of one message, so a consumer can de-duplicate on it. */
  webhookId: string;
  outcome: VerificationOutcome;
  rawBody: string;
  receivedAt: Date;
}

export interface WebhookReceiverOptions {
  auth: WebhookAuth;
  /**
   * When given, results for verifications it does not know are refused (404). The service also
   * sends results of verifications started in its own application, and delivers a refused one
   * again, so a receiver that keeps a record of deliveries (serve does) leaves this out and lets
   * onDelivery keep such a result without applying it.
   */
  isKnownCorrelationId?(correlationId: string): boolean | Promise<boolean>;
  /** Commits the result. The 2xx is sent only after it resolves; it must be idempotent. */
  onDelivery(delivery: WebhookDelivery): Promise<void>;
  /**
   * Keeps a delivery that authenticated but cannot be read (a dead letter). The 4xx is sent only
   * after it resolves; if it throws, the answer is 500 so the service delivers again.
   */
  onUnreadable?(rawBody: string, reason: string): Promise<void>;
  /** Counts a request refused and not kept (not authenticated, stale, too large, not a POST), as a delivery refused is otherwise only said in the log; not one cut off or turned away busy. */
  onRefused?(status: number): void;
  /** Whether a failure of onDelivery was said where it happened (serve's store outage, said once for all): then it is debug here, not a warning per delivery. */
  alreadySaid?(err: unknown): boolean;
  maxBodyBytes?: number;
  log?: Log;
  /** Cut out of every delivery before it is kept or read: portal passwords sent inline, which a Failed result may quote. */
  secrets?: readonly string[];
}

const PROBLEM_BASE = 'https://dental-elig.dev/problems/webhook/';

/** A request whose sender hung up before its body ended, as each receiver of serve's says it. */
export const SENDER_HUNG_UP = 'the request ended before its body did';
/** Said of a body refused because too many bytes of others are being read (BODY_BYTES_IN_HAND): send it again. */
export const BUSY_READING = 'too many request bodies are being read at once: send it again shortly';

const NOT_A_SECRET = 'must be a Standard Webhooks secret, whsec_ followed by base64';

/** What is said of a setting that holds no Standard Webhooks secret, wherever it is set; the value is never repeated. */
export function notAWebhookSecret(setting = 'webhook.secret'): string {
  return `${setting}: ${NOT_A_SECRET}`;
}

/**
 * Whether this is a signing secret: `whsec_` and base64 that decodes (a pattern alone lets a
 * cut-off paste through). The library makes `whsec_` optional; serve and the sandbox do not, so
 * neither does this: base64 alone is refused here as there.
 */
export function isWebhookSecret(secret: string): boolean {
  if (!/^whsec_[A-Za-z0-9+/=]+$/.test(secret)) return false;
  try {
    new Webhook(secret);
    return true;
  } catch {
    // The library's own words ("Base64Coder: incorrect characters…") name nothing: the caller names the setting.
    return false;
  }
}

const WebhookSecret = z.string({ error: NOT_A_SECRET }).refine(isWebhookSecret, { error: NOT_A_SECRET });

/**
 * The service's signing scheme is not published. The default follows Standard Webhooks (HMAC of
 * id.timestamp.body, 5-minute timestamp tolerance); a static bearer token fits deployments whose
 * operator scheme is a shared token. Checked whole when a receiver is made: a scheme or a key that
 * JavaScript or a JSON file passes and TypeScript would refuse (a misspelt previousSecret) would
 * otherwise take deliveries unchecked, or refuse those signed with the secret being replaced.
 */
const WebhookAuth = z.discriminatedUnion(
  'scheme',
  [
    z.strictObject({
      scheme: z.literal('standard-webhooks'),
      secret: WebhookSecret,
      /** The secret being replaced, while the service may still sign with it: rotating one loses no delivery. */
      previousSecret: WebhookSecret.optional(),
    }),
    z.strictObject({ scheme: z.literal('bearer'), token: z.string({ error: (issue) => (issue.input === undefined ? 'is required' : 'must be a string') }).min(1, 'is required') }),
  ],
  { error: 'must be standard-webhooks or bearer' },
);
export type WebhookAuth = z.infer<typeof WebhookAuth>;

class Rejection extends Error {
  constructor(
    readonly status: number,
    readonly title: string,
    detail: string,
    readonly errors?: FieldError[],
  ) {
    super(detail);
  }
}

/** A node:http listener for the verification webhook. */
export function createWebhookHandler(options: WebhookReceiverOptions): (req: IncomingMessage, res: ServerResponse) => void {
  const maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
  const secrets = options.secrets ?? [];
  const checked = WebhookAuth.safeParse(options.auth);
  if (!checked.success) throw new Error(describeIssue(checked.error, 'webhook', ['webhook']));
  const auth = checked.data;
  const verifiers = auth.scheme === 'standard-webhooks' ? [auth.secret, ...(auth.previousSecret === undefined ? [] : [auth.previousSecret])].map((secret) => new Webhook(secret)) : [];

  return (req, res) => {
    let unreadable: string | undefined;
    void (async () => {
      if (req.method !== 'POST') throw new Rejection(405, 'Method not allowed', 'the webhook accepts POST only');
      const signed = await readWhole(req, maxBodyBytes);
      const webhookId = authenticate(req, signed, auth, verifiers);
      const rawBody = redacted(signed, secrets);
      unreadable = rawBody;
      // Read, too: a JSON writer may escape a password in ways the text above was not searched for (\/ for /).
      const verification = redacted(parseVerification(rawBody), secrets);
      if (options.isKnownCorrelationId && !(await options.isKnownCorrelationId(verification.correlationId))) {
        throw new Rejection(404, 'Unknown verification', 'correlationId is not one this plugin requested');
      }
      const outcome = readable(verification);
      unreadable = undefined;
      for (const warning of outcome.warnings) options.log?.warn({ correlationId: verification.correlationId }, warning);
      await options.onDelivery({
        webhookId: webhookId ?? `${verification.correlationId}:${verification.status}`,
        outcome,
        rawBody,
        receivedAt: new Date(),
      });
      res.writeHead(204).end();
    })().catch(async (err: unknown) => {
      if (err instanceof Rejection && unreadable !== undefined && options.onUnreadable) {
        try {
          await options.onUnreadable(unreadable, err.message);
        } catch (kept: unknown) {
          // Said as a delivery failing to commit is: the service delivers again, and the log tells why.
          options.log?.[options.alreadySaid?.(kept) ? 'debug' : 'warn']({ err: kept instanceof Error ? kept.message : String(kept), status: err.status }, 'webhook delivery refused and not kept as a dead letter: answered 500, to be delivered again');
          return webhookProblem(res, 500, 'Not committed', 'the delivery could not be stored; deliver again');
        }
      }
      if (err instanceof Rejection) {
        // A sender that hung up, or one turned away while others' bodies fill the budget, is no delivery refused:
        // said at debug, as anyone reaching the port can cause either without end, and not counted.
        const quiet = err.message === SENDER_HUNG_UP || err.message === BUSY_READING;
        if (!quiet && (unreadable === undefined || !options.onUnreadable)) options.onRefused?.(err.status);
        // Why, as the sender was told: a clock skewed past the tolerance, a secret rotated too soon and a proxy dropping
        // the signature headers each refuse every delivery, and only these words tell them apart. They name no value.
        options.log?.[quiet ? 'debug' : 'warn']({ status: err.status, reason: err.title }, `webhook delivery refused: ${err.message}`);
        if (err.message === BUSY_READING) res.setHeader('retry-after', '5');
        if (err.status === 405) res.setHeader('allow', 'POST');
        return webhookProblem(res, err.status, err.title, err.message, err.errors);
      }
      // Not committed: answer an error so the service delivers again.
      options.log?.[options.alreadySaid?.(err) ? 'debug' : 'warn']({ err: err instanceof Error ? err.message : String(err) }, 'webhook delivery failed to commit');
      webhookProblem(res, 500, 'Not committed', 'the result could not be stored; deliver again');
    });
  };
}

/** Where the service's deliveries are taken, by serve and by a receiver started on its own: one path to register with the service whichever takes them. */
export const WEBHOOK_PATH = '/webhooks/insurance-verification';

/** Starts a receiver on its own server (loopback unless told otherwise). */
export async function startWebhookServer(
  options: WebhookReceiverOptions & { host?: string; port?: number; path?: string },
): Promise<{ url: string; close(): Promise<void> }> {
  const path = options.path ?? WEBHOOK_PATH;
  const handler = createWebhookHandler(options);
  const server = createServer(requestTiming(), (req, res) => {
    if (!takeInHand(req, res)) return;
    if (requestUrl(req.url, 'http://x')?.pathname !== path) return webhookProblem(res, 404, 'Not found', 'no such endpoint');
    handler(req, res);
  });
  // It faces the service, often beyond this machine, as serve's listener does: idle connections past the cap would spend the embedder's file descriptors.
  capConnections(server, () => options.log);
  // A port another holds is the embedder's to hear of: an 'error' event no one listens for ended its process instead.
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { address, port } = server.address() as AddressInfo;
  return {
    url: `${httpOrigin(address, port)}${path}`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      }),
  };
}

function authenticate(req: IncomingMessage, rawBody: string, auth: WebhookAuth, verifiers: readonly Webhook[]): string | undefined {
  const header = (name: string) => {
    const v = req.headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  if (auth.scheme === 'bearer') {
    if (!carriesBearer(header('authorization'), auth.token)) throw new Rejection(401, 'Unauthorized', 'authorization does not carry the configured bearer token');
    return header('webhook-id');
  }
  const id = header('webhook-id');
  const timestamp = header('webhook-timestamp');
  const signature = header('webhook-signature');
  const missing = [
    ['webhook-id', id],
    ['webhook-timestamp', timestamp],
    ['webhook-signature', signature],
  ].find(([, v]) => !v);
  if (missing) throw new Rejection(401, 'Unauthorized', `${missing[0]} header is missing`);
  const headers = { 'webhook-id': id as string, 'webhook-timestamp': timestamp as string, 'webhook-signature': signature as string };
  let refusal: unknown = new Error('no Standard Webhooks verifier');
  // The current secret first, then the one it replaces: a delivery signed with either is the service's.
  for (const verifier of verifiers) {
    try {
      // Not parsed here: a signed body that is not JSON is the service's, kept as unreadable where it is read.
      verifier.verify(rawBody, headers, { jsonParse: false });
      return id;
    } catch (err) {
      refusal = err;
    }
  }
  const reason = refusal instanceof WebhookVerificationError ? refusal.message : 'verification failed';
  throw new Rejection(401, 'Unauthorized', `webhook-signature: ${reason.toLowerCase()}`);
}

/**
 * Whether an Authorization header is `Bearer <token>`, the token compared in constant time. The
 * scheme is a word of any case (RFC 9110 11.1): a Subscription's channel.header typed
 * `authorization: bearer …` is the token all the same, as is one with more than one space after
 * the scheme (11.4).
 */
export function carriesBearer(authorization: string | undefined, token: string): boolean {
  const [, scheme = '', credentials = ''] = /^(\S+) +(.*)$/s.exec(authorization ?? '') ?? [];
  const given = Buffer.from(credentials);
  const expected = Buffer.from(token);
  return scheme.toLowerCase() === 'bearer' && given.length === expected.length && timingSafeEqual(given, expected);
}

function parseVerification(rawBody: string): Verification {
  let json: unknown;
  try {
    json = JSON.parse(rawBody);
  } catch {
    throw new Rejection(400, 'Bad request', 'body is not JSON');
  }
  const parsed = Verification.safeParse(json);
  if (!parsed.success) {
    throw new Rejection(422, 'Unprocessable verification', 'body is not a verification', fieldErrors(parsed.error.issues, json));
  }
  return parsed.data;
}

function readable(verification: Verification): VerificationOutcome {
  try {
    return toOutcome(verification);
  } catch (err) {
    if (!(err instanceof z.ZodError)) throw err;
    throw new Rejection(422, 'Unprocessable verification', 'result is not in the shape this receiver reads', fieldErrors(inResult(err.issues), verification));
  }
}

async function readWhole(req: IncomingMessage, limit: number): Promise<string> {
  const body = await readBody(req, limit);
  if (body.kind === 'too-large') throw new Rejection(413, 'Payload too large', `body exceeds ${limit} bytes`);
  // The sender hung up before its body ended: its fault, and nothing was there to commit.
  if (body.kind === 'cut-off') throw new Rejection(400, 'Bad request', SENDER_HUNG_UP);
  if (body.kind === 'busy') throw new Rejection(503, 'Busy', BUSY_READING);
  return body.text;
}

/** A webhook's error answer, its problem typed under PROBLEM_BASE; every one the receiver gives, and the sync's while it is stopped. */
export function webhookProblem(res: ServerResponse, status: number, title: string, detail: string, errors?: FieldError[]): void {
  sendProblem(res, status, detail, { type: `${PROBLEM_BASE}${title.toLowerCase().replace(/[^a-z]+/g, '-')}`, title, errors });
}
