/**
 * The sandbox's HTTP front: a small router over node:http, API-key authentication, JSON bodies
 * with a size limit, injected faults, and a request log without bodies or keys. Every answer
 * carries `x-sandbox: true`, and every JSON object body `"sandbox": true`, so a sandbox answer is
 * never mistaken for the service's.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { HttpProblem, notFound, unauthorized, invalidField, unprocessable, fieldError } from './problems';
import type { CustomerRec } from './state';
import { requestUrl } from '../url-checks';

export const MAX_BODY_BYTES = 1024 * 1024;

export interface RequestContext {
  params: Record<string, string>;
  query: URLSearchParams;
  body: unknown;
  customer: CustomerRec;
}

export interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export type Handler = (ctx: RequestContext) => Reply | Promise<Reply>;

export interface Route {
  method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE';
  /** Segments; `:name` captures one. */
  path: string;
  handler: Handler;
}

/** A fault the sandbox serves instead of the real answer, for testing retries and error handling. */
export interface Fault {
  /** Method to match; any when absent. */
  method?: string;
  /** The pathname, exactly, or a pattern over it. */
  path: string | RegExp;
  /** How many matching requests get the fault; 1 when absent; Infinity for all. */
  times?: number;
  /** The status to answer (problem details unless `body` is given). 503 when nothing else is said. */
  status?: number;
  retryAfterSeconds?: number;
  /** A raw body instead of problem details, e.g. a proxy's HTML page; '' for an empty body. */
  body?: string;
  contentType?: string;
  /** Destroy the connection without answering (a connection reset). */
  reset?: boolean;
  /** Hold the answer back this long first; with no status, the real answer follows. */
  delayMs?: number;
}

export interface LoggedRequest {
  at: string;
  method: string;
  /** Path and query; never a body or a key. */
  path: string;
  /** The status answered; -1 when the connection was dropped (an injected reset, or the client hung up). */
  status: number;
}

export interface FrontOptions {
  /** `authorization` (with Bearer) or another header carrying the key as is, e.g. `x-api-key`. */
  apiKeyHeader: string;
  customerByKey: (key: string) => CustomerRec | undefined;
  now: () => Date;
  /** Milliseconds to hold each request before handling it (a remote service's latency). */
  latencyMs?: () => number;
}

interface CompiledRoute extends Route {
  segments: string[];
}

export class Front {
  private readonly routes: CompiledRoute[];
  private readonly faults: Array<Fault & { remaining: number }> = [];
  readonly log: LoggedRequest[] = [];

  constructor(
    routes: Route[],
    private readonly options: FrontOptions,
  ) {
    this.routes = routes.map((r) => ({ ...r, segments: r.path.split('/').filter(Boolean) }));
  }

  injectFault(fault: Fault): void {
    this.faults.push({ ...fault, remaining: fault.times ?? 1 });
  }

  clearFaults(): void {
    this.faults.length = 0;
  }

  /** The node:http request listener. */
  readonly listener = (req: IncomingMessage, res: ServerResponse): void => {
    void this.handle(req, res);
  };

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = requestUrl(req.url, 'http://sandbox.invalid') ?? new URL('/', 'http://sandbox.invalid');
    const method = (req.method ?? 'GET').toUpperCase();
    const entry: LoggedRequest = { at: this.options.now().toISOString(), method, path: `${url.pathname}${url.search}`, status: 0 };
    this.log.push(entry);
    try {
      const latency = this.options.latencyMs?.() ?? 0;
      if (latency > 0) await new Promise((r) => setTimeout(r, latency));
      const fault = this.takeFault(method, url.pathname);
      if (fault?.delayMs) await new Promise((r) => setTimeout(r, fault.delayMs));
      if (fault?.reset) {
        entry.status = -1;
        req.socket.destroy();
        return;
      }
      if (fault && (fault.status !== undefined || fault.body !== undefined || !fault.delayMs)) {
        await drain(req);
        entry.status = fault.status ?? 503;
        return this.sendFault(res, fault);
      }
      const { route, params } = this.match(method, url.pathname);
      const customer = this.authenticate(req);
      const body = await readJsonBody(req);
      const reply = await route.handler({ params, query: url.searchParams, body, customer });
      entry.status = reply.status;
      send(res, reply);
    } catch (err) {
      if (req.destroyed && !(err instanceof HttpProblem)) {
        // The client hung up (timeout, reset): nobody to answer, nothing went wrong here.
        entry.status = -1;
        return;
      }
      const problem =
        err instanceof HttpProblem
          ? err
          : new HttpProblem(500, 'Internal', 'Internal Server Error', 'the sandbox failed to handle this request');
      if (!(err instanceof HttpProblem)) process.emitWarning(`sandbox: ${err instanceof Error ? err.message : String(err)}`);
      entry.status = problem.status;
      await drain(req);
      send(res, { status: problem.status, body: problem.body, headers: { 'content-type': 'application/problem+json', ...problem.headers } });
    }
  }

  private takeFault(method: string, pathname: string): Fault | undefined {
    const i = this.faults.findIndex(
      (f) =>
        f.remaining > 0 &&
        (f.method === undefined || f.method.toUpperCase() === method) &&
        (typeof f.path === 'string' ? f.path === pathname : f.path.test(pathname)),
    );
    if (i < 0) return undefined;
    const fault = this.faults[i] as Fault & { remaining: number };
    fault.remaining -= 1;
    if (fault.remaining <= 0) this.faults.splice(i, 1);
    return fault;
  }

  private sendFault(res: ServerResponse, fault: Fault): void {
    const status = fault.status ?? 503;
    const headers: Record<string, string> = fault.retryAfterSeconds !== undefined ? { 'retry-after': String(fault.retryAfterSeconds) } : {};
    if (fault.body !== undefined) {
      res.writeHead(status, { 'x-sandbox': 'true', 'content-type': fault.contentType ?? 'text/html', ...headers });
      res.end(fault.body);
      return;
    }
    const problem = new HttpProblem(status, status === 429 ? 'RateLimited' : 'ServiceUnavailable', 'Injected fault', `the sandbox was told to answer ${status} here`);
    send(res, { status, body: problem.body, headers: { 'content-type': 'application/problem+json', ...headers } });
  }

  private match(method: string, pathname: string): { route: CompiledRoute; params: Record<string, string> } {
    const segments = pathname.split('/').filter(Boolean);
    if (segments[0] === 'v1') throw notFound('this sandbox serves the current version only: use the /v2 paths');
    const allowed = new Set<string>();
    for (const route of this.routes) {
      const params = matchSegments(route.segments, segments);
      if (!params) continue;
      if (route.method === method) return { route, params };
      allowed.add(route.method);
    }
    if (allowed.size > 0) {
      throw new HttpProblem(405, 'MethodNotAllowed', 'Method Not Allowed', `${method} is not supported on this path`, {
        headers: { allow: [...allowed].join(', ') },
      });
    }
    throw notFound(`no operation at ${pathname}`);
  }

  private authenticate(req: IncomingMessage): CustomerRec {
    const header = this.options.apiKeyHeader.toLowerCase();
    const raw = req.headers[header];
    const value = Array.isArray(raw) ? raw[0] : raw;
    if (!value) throw unauthorized(`no API key: send it in the ${header} header`);
    let key = value.trim();
    if (header === 'authorization') {
      const m = /^Bearer\s+(\S+)\s*$/i.exec(key);
      if (!m) throw unauthorized('the authorization header must be "Bearer <API key>"');
      key = m[1] as string;
    }
    const customer = this.options.customerByKey(key);
    if (!customer) throw unauthorized('the API key is not known to this service');
    return customer;
  }
}

function matchSegments(pattern: string[], actual: string[]): Record<string, string> | undefined {
  if (pattern.length !== actual.length) return undefined;
  const params: Record<string, string> = {};
  for (let i = 0; i < pattern.length; i++) {
    const p = pattern[i] as string;
    const a = actual[i] as string;
    if (p.startsWith(':')) {
      try {
        params[p.slice(1)] = decodeURIComponent(a);
      } catch {
        return undefined;
      }
    } else if (p !== a) return undefined;
  }
  return params;
}

async function drain(req: IncomingMessage): Promise<void> {
  if (req.readableEnded || req.destroyed) return;
  req.resume();
  await new Promise<void>((resolve) => {
    req.once('end', resolve);
    req.once('error', () => resolve());
    req.once('close', () => resolve());
  });
}

async function readJsonBody(req: IncomingMessage): Promise<unknown> {
  const declared = Number(req.headers['content-length'] ?? 0);
  if (declared > MAX_BODY_BYTES) throw tooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const buf = chunk as Buffer;
    size += buf.length;
    if (size > MAX_BODY_BYTES) throw tooLarge();
    chunks.push(buf);
  }
  if (size === 0) return undefined;
  const type = String(req.headers['content-type'] ?? 'application/json').toLowerCase();
  if (!/^application\/([\w.+-]+\+)?json\b/.test(type)) {
    throw new HttpProblem(415, 'UnsupportedMediaType', 'Unsupported Media Type', 'request bodies must be application/json');
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw unprocessable([fieldError('body', 'invalid_json', 'is not valid JSON')], 'the request body is not valid JSON');
  }
}

const tooLarge = () => new HttpProblem(413, 'PayloadTooLarge', 'Content Too Large', `request bodies are limited to ${MAX_BODY_BYTES} bytes`);

function send(res: ServerResponse, reply: Reply): void {
  if (res.destroyed || res.headersSent) return;
  const headers: Record<string, string> = { 'x-sandbox': 'true', ...reply.headers };
  if (reply.body === undefined || reply.status === 204 || reply.status === 304) {
    res.writeHead(reply.status, headers);
    res.end();
    return;
  }
  const body =
    typeof reply.body === 'object' && reply.body !== null && !Array.isArray(reply.body) ? { ...reply.body, sandbox: true } : reply.body;
  const text = JSON.stringify(body);
  res.writeHead(reply.status, {
    'content-type': 'application/json',
    ...headers,
    'content-length': String(Buffer.byteLength(text)),
  });
  res.end(text);
}

/** Query parameters as the wire schemas read them: numbers for `limit`, strings otherwise, absent when not given. */
export function queryObject(query: URLSearchParams, keys: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of keys) {
    const v = query.get(key);
    if (v === null) continue;
    if (key === 'limit') {
      if (!/^\d+$/.test(v)) throw invalidField('limit', 'invalid_value', 'must be a positive whole number');
      out[key] = Number(v);
    } else out[key] = v;
  }
  return out;
}
