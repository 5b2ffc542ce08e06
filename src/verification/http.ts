import { Agent, interceptors, request, type Dispatcher } from 'undici';
import type * as z from 'zod';
import { ConfigError } from '../config-error';
import { describeIssue } from '../domain/issues';
import { ClientConfig, V1_RETIREMENT, type ClientConfigInput } from './config';
import { sentNothing, ServiceError, UNREADABLE_ANSWER } from './errors';
import { normaliseProblem } from './outcome';
import { redacted } from './redact';
import { ProblemDetails } from './wire';

/** Where the client reports what it noticed but carried on with (pino's signature). */
export interface Log {
  warn(obj: object, msg: string): void;
  debug(obj: object, msg: string): void;
}

const silent: Log = { warn: () => undefined, debug: () => undefined };

type Query = Record<string, string | number | boolean | undefined>;

export interface CallOptions<T extends z.ZodType> {
  operation: string;
  method: 'GET' | 'POST' | 'PATCH';
  path: string;
  query?: Query;
  body?: unknown;
  /** Parses a 2xx body; responses are parsed permissively by the schemas in wire.ts. */
  response: T;
  /** Repeating is safe: GETs, and POSTs that carry the plugin's idempotency key. Any request is repeated after a 429. */
  idempotent: boolean;
  /** Extra statuses that are not errors for this call (e.g. 304 for an unchanged PATCH). */
  accept?: number[];
  /** The payer portal a verification is sent to: its retries' lines name it (serve says them at debug while that portal is out). */
  portalId?: string | undefined;
}

export interface CallResult<T> {
  status: number;
  body: T | undefined;
}

const RETRY_STATUSES = [429, 502, 503, 504];
const RETRY_ERROR_CODES = [
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
];

/**
 * The most of an answer read: a verification body is 10 to 30 KB, a listing page less than a MB. One
 * past it is refused as it arrives, not held whole (with its parse, gigabytes and a stalled event loop).
 */
export const MAX_ANSWER_BYTES = 16 * 1024 * 1024;

/** What a transport failure is, in words a person reads; the code stays beside it. */
export function describeTransportError(code: string | undefined): string {
  if (code === 'UND_ERR_RES_EXCEEDED_MAX_SIZE') return `answer over ${MAX_ANSWER_BYTES / 1024 / 1024} MB, not read`;
  if (code === 'ECONNREFUSED') return 'connection refused';
  if (code === 'ETIMEDOUT' || code?.endsWith('_TIMEOUT')) return 'timed out';
  if (code === 'ECONNRESET' || code === 'EPIPE' || code === 'UND_ERR_SOCKET') return 'connection closed by the other side';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'host not found';
  if (code === 'EHOSTUNREACH' || code === 'ENETUNREACH') return 'host unreachable';
  // What OpenSSL says of a first answer that is no TLS: an https URL at a port that speaks plain http.
  if (code === 'ERR_SSL_WRONG_VERSION_NUMBER') return 'no TLS at this https URL (a plain http server there?)';
  return 'network error';
}

/**
 * HTTP to the service: auth header, JSON, per-attempt timeouts, retries with exponential backoff
 * and full jitter honouring Retry-After (undici's retry interceptor, with our delay function),
 * and one typed error for every non-2xx. The settings, the API key among them, are held in
 * private fields, so neither util.inspect nor JSON.stringify of a client shows them.
 */
export class ServiceHttp {
  readonly #config: ClientConfig;
  readonly #root: string;
  readonly #dispatcher: Dispatcher;
  readonly #log: Log;
  readonly #secrets: readonly string[];
  readonly #random: () => number;

  constructor(config: ClientConfigInput, options: { log?: Log; now?: () => Date; random?: () => number; secrets?: readonly string[] } = {}) {
    const parsed = ClientConfig.safeParse(config);
    if (!parsed.success) throw new Error(describeIssue(parsed.error, 'config'));
    this.#config = parsed.data;
    this.#log = options.log ?? silent;
    this.#secrets = options.secrets ?? [];
    this.#root = versionlessRoot(this.#config.baseUrl, (options.now ?? (() => new Date()))(), this.#log);
    this.#random = options.random ?? Math.random;
    const { timeoutMs } = this.#config;
    // Each call passes its own `retry` function; `methods: []` is the fallback for one that does not: not retried.
    this.#dispatcher = new Agent({ connectTimeout: timeoutMs, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, maxResponseSize: MAX_ANSWER_BYTES }).compose(
      interceptors.retry({ throwOnError: false, methods: [] }),
    );
  }

  /** The service root requests go to (no key, no path): for messages and logs. */
  get origin(): string {
    return new URL(this.#root).origin;
  }

  async call<T extends z.ZodType>(opts: CallOptions<T>): Promise<CallResult<z.infer<T>>> {
    const url = new URL(`${this.#root}${opts.path}`);
    for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
    const { apiKeyHeader, apiKeyScheme, apiKey } = this.#config;
    const headers: Record<string, string> = {
      accept: 'application/json, application/problem+json',
      [apiKeyHeader.toLowerCase()]: apiKeyScheme ? `${apiKeyScheme} ${apiKey}` : apiKey,
    };
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    // Named in messages without the query: a search term or cursor is no business of a log line.
    const target = `${opts.method} ${url.origin}${url.pathname}`;

    let res: Dispatcher.ResponseData<unknown>;
    let text: string;
    const tally = { retries: 0, responded: false };
    for (;;) {
      tally.responded = false;
      try {
        res = await request(url, {
          method: opts.method,
          headers,
          body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
          dispatcher: this.#dispatcher,
          // Per-request retry switch: only safe requests get the methods list the interceptor checks.
          retryOptions: {
            methods: opts.idempotent ? [opts.method] : [],
            retry: this.#retry(opts.operation, target, tally, opts.portalId),
          },
        } as Parameters<typeof request>[1]);
        tally.responded = true;
        text = await res.body.text();
        break;
      } catch (err) {
        const code = (err as { code?: string }).code;
        // A body cut off or stalled after the headers: undici would resume it with a Range request, which
        // the service does not serve (it answers in full and the resume fails), so the whole request goes again.
        if (tally.responded && opts.idempotent && RETRY_ERROR_CODES.includes(code ?? '') && tally.retries < this.#config.maxRetries) {
          const delay = this.#nextRetry(opts.operation, target, tally, { code }, undefined, opts.portalId);
          await new Promise((resolve) => setTimeout(resolve, delay));
          continue;
        }
        const what = describeTransportError(code);
        const { retries } = tally;
        // A request that may have reached the service is not repeated unless it is idempotent: the person is told to look first.
        const mayHaveBeenDone = !opts.idempotent && !sentNothing(code) ? '; it may have been done all the same: look before trying again' : '';
        throw new ServiceError({
          operation: opts.operation,
          code,
          problem: {
            title: what.charAt(0).toUpperCase() + what.slice(1),
            detail: `${target}${retries ? ` (after ${retries} ${retries === 1 ? 'retry' : 'retries'})` : ''}${mayHaveBeenDone}`,
          },
          cause: err,
        });
      }
    }

    const requestId = headerValue(res.headers['x-request-id'] ?? res.headers['x-correlation-id']);
    // What the service may quote back: the portal passwords this request carried, and those sent inline before it.
    const passwords = [...passwordsIn(opts.body), ...this.#secrets];
    const ok = (res.statusCode >= 200 && res.statusCode < 300) || (opts.accept ?? []).includes(res.statusCode);
    if (!ok) {
      const retryAfter = retryAfterMs(headerValue(res.headers['retry-after']));
      const problem = redacted(problemFrom(text, res, target, this.#log), [apiKey, ...passwords]);
      throw new ServiceError({
        operation: opts.operation,
        status: res.statusCode,
        problem,
        // The service asks that a 500 be reported with the request's correlationId: in a header, or in the problem itself.
        requestId: requestId ?? (typeof problem.correlationId === 'string' ? problem.correlationId : undefined),
        ...(retryAfter !== undefined && { retryAfterMs: retryAfter }),
      });
    }
    if (text.trim() === '') return { status: res.statusCode, body: undefined };
    // A result too may quote a password: a Failed one, the portal's refusal of the login it was sent, this time or (polled) before.
    const json = redacted(parseJson(text), passwords);
    const parsed = opts.response.safeParse(json);
    const contentType = headerValue(res.headers['content-type'])?.split(';')[0]?.trim().slice(0, 60);
    if (!parsed.success) {
      throw new ServiceError({
        operation: opts.operation,
        status: res.statusCode,
        code: UNREADABLE_ANSWER,
        problem: { title: 'Unexpected response body', detail: json === undefined ? `(body): not JSON${contentType ? ` (${contentType})` : ''}` : describeIssue(parsed.error, '(body)') },
        requestId,
        received: json === undefined ? redacted(text, passwords) : json,
      });
    }
    return { status: res.statusCode, body: parsed.data };
  }

  async close(): Promise<void> {
    await this.#dispatcher.close();
  }

  /** The interceptor's retry decision for one request, before its answer's headers; every retry is a warning, so a wait is never silent. */
  #retry(operation: string, target: string, tally: { retries: number; responded: boolean }, portalId: string | undefined): RetryCallback {
    const { maxRetries, retryMaxDelayMs } = this.#config;
    return (err, { opts }, cb) => {
      const e = err as Error & { statusCode?: number; code?: string; headers?: Record<string, string | string[] | undefined> };
      // A 429 is the service's rate limit turning the request away before doing it: asked again whatever it is.
      const safe = (opts.retryOptions?.methods ?? []).includes(opts.method) || e.statusCode === 429;
      const allowed =
        !tally.responded &&
        safe &&
        (e.statusCode !== undefined ? RETRY_STATUSES.includes(e.statusCode) : RETRY_ERROR_CODES.includes(e.code ?? '')) &&
        tally.retries < maxRetries;
      if (!allowed) return cb(err);
      // A service that asks for a longer pause than we would ever wait gets its answer back now.
      const after = retryAfterMs(headerValue(e.headers?.['retry-after']));
      if (after !== undefined && after > retryMaxDelayMs) return cb(err);
      const delay = this.#nextRetry(operation, target, tally, { status: e.statusCode, code: e.code }, after, portalId);
      // Not unref'd: the pending retry is what keeps a CLI process alive when the socket closed.
      setTimeout(() => cb(null), delay);
    };
  }

  /** Counts one more retry of a call and says so; returns how long to wait before it. */
  #nextRetry(
    operation: string,
    target: string,
    tally: { retries: number },
    cause: { status?: number | undefined; code?: string | undefined },
    after: number | undefined,
    portalId: string | undefined,
  ): number {
    const { maxRetries, retryMinDelayMs, retryMaxDelayMs } = this.#config;
    tally.retries += 1;
    const delay = retryDelay(tally.retries, after, { retryMinDelayMs, retryMaxDelayMs }, this.#random);
    const why = cause.status !== undefined ? `answered ${cause.status}` : `${describeTransportError(cause.code)} (${cause.code ?? 'no code'})`;
    this.#log.warn(
      { operation, attempt: tally.retries, delayMs: delay, status: cause.status, code: cause.code, ...(portalId !== undefined && { portalId }) },
      `${operation}: ${target} ${why}; retry ${tally.retries} of ${maxRetries} in ${(delay / 1000).toFixed(1)} s`,
    );
    return delay;
  }
}

type RetryCallback = NonNullable<NonNullable<Parameters<typeof interceptors.retry>[0]>['retry']>;

/** Exponential backoff with full jitter; a Retry-After from the service is honoured as a floor. */
export function retryDelay(
  attempt: number,
  after: number | undefined,
  limits: { retryMinDelayMs: number; retryMaxDelayMs: number },
  random: () => number = Math.random,
): number {
  const exponential = Math.min(limits.retryMinDelayMs * 2 ** (attempt - 1), limits.retryMaxDelayMs);
  const jittered = exponential / 2 + random() * (exponential / 2);
  return after === undefined ? Math.round(jittered) : Math.min(Math.max(after, jittered), Math.max(limits.retryMaxDelayMs, after));
}

/** The longest wait a Retry-After is read as: a longer one (1e300 seconds) would put the next attempt past the last date there is. */
const RETRY_AFTER_MAX_MS = 366 * 86_400_000;

/** Retry-After in milliseconds: seconds, or an HTTP date; at most a year. */
export function retryAfterMs(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const seconds = Number(value);
  const ms = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(value) - Date.now();
  return Number.isNaN(ms) ? undefined : Math.min(RETRY_AFTER_MAX_MS, Math.max(0, ms));
}

/** The configured base without a version suffix; a /v1 base is refused after v1's retirement. */
export function versionlessRoot(baseUrl: string, now: Date, log: Log): string {
  const trimmed = baseUrl.replace(/\/+$/, '');
  const m = /\/(v\d+)$/.exec(trimmed);
  if (m?.[1] === 'v1') {
    if (now.toISOString().slice(0, 10) > V1_RETIREMENT) {
      // A setting to change, as a base URL that is no http(s) URL is: the CLI's exit 2, not an internal error.
      throw new ConfigError(`baseUrl: points at /v1, which was retired on ${V1_RETIREMENT}; configure the service root (this client speaks v2)`);
    }
    log.warn({ retirement: V1_RETIREMENT }, 'baseUrl points at /v1, which is retired on 2026-12-31; this client speaks v2 and uses /v2 paths');
  }
  return m ? trimmed.slice(0, -m[0].length) : trimmed;
}

function problemFrom(text: string, res: Dispatcher.ResponseData<unknown>, target: string, log: Log): ProblemDetails {
  const contentType = headerValue(res.headers['content-type']) ?? '';
  const json = contentType.includes('json') ? parseJson(text) : undefined;
  if (json !== undefined && typeof json === 'object' && json !== null) {
    const warnings: string[] = [];
    const problem = normaliseProblem(json, warnings);
    for (const w of warnings) log.warn({ status: res.statusCode }, w);
    if (problem) return { ...problem, status: problem.status ?? res.statusCode };
  }
  // Not problem details: a proxy's HTML page, an empty body, another server at a wrong base URL. Say where and what arrived, not what it said.
  const what = text.trim() === '' ? 'an empty body' : `a ${contentType.split(';')[0] || 'non-JSON'} body`;
  return { status: res.statusCode, title: `HTTP ${res.statusCode}`, detail: `${target} answered with ${what}, not problem details` };
}

/** The portal passwords a request body carries: stored credentials' own, or inline `credentials.password`. */
function passwordsIn(body: unknown): string[] {
  if (typeof body !== 'object' || body === null) return [];
  return Object.entries(body).flatMap(([key, value]) => (key === 'password' && typeof value === 'string' ? [value] : passwordsIn(value)));
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}
