import type { FieldError, ProblemDetails } from './wire';

const describeFieldError = (e: FieldError) => `${e.field ?? '(field)'}: ${e.message ?? e.code ?? 'invalid'}`;

/**
 * The client's one error type. Every non-2xx answer becomes a ServiceError carrying the problem
 * details (type, title, status, detail, upstreamErrors, errors[]); a body that is not problem
 * details (an HTML page from a proxy, an empty body) still gives one, with the status and a
 * synthesised title. Transport failures (timeout, connection reset) that outlast the retries
 * are ServiceErrors too, with `status` undefined and `code` the transport error code.
 * Messages carry the operation, status and problem text, never request bodies.
 */
/**
 * The code of a ServiceError for a 2xx answer that cannot be read. Asking again gets the same
 * answer, so it is not retried: the caller keeps what arrived for a person to read.
 */
export const UNREADABLE_ANSWER = 'unreadable_answer';

const NOT_SENT_CODES: ReadonlySet<string> = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']);

/** Whether a transport failure came before the request could reach the service (refused, no such host, no route, no connection in time): nothing was sent, so nothing was done. */
export const sentNothing = (code: string | undefined): boolean => NOT_SENT_CODES.has(code ?? '');

export class ServiceError extends Error {
  readonly status: number | undefined;
  readonly problem: ProblemDetails;
  readonly operation: string;
  readonly code: string | undefined;
  /** The service's correlation id for this request, when it sent one (report it with a 500). */
  readonly requestId: string | undefined;
  /** How long the service asked to be left alone (its Retry-After), when it said. */
  readonly retryAfterMs: number | undefined;
  /** With code UNREADABLE_ANSWER: the 2xx body as it arrived (its JSON, or its text when it was none). */
  readonly received: unknown;

  constructor(args: {
    operation: string;
    status?: number;
    problem: ProblemDetails;
    code?: string;
    requestId?: string;
    retryAfterMs?: number;
    received?: unknown;
    cause?: unknown;
  }) {
    super(describe(args.operation, args.status, args.problem, args.code), { cause: args.cause });
    this.name = 'ServiceError';
    this.operation = args.operation;
    this.status = args.status;
    this.problem = args.problem;
    this.code = args.code;
    this.requestId = args.requestId;
    this.retryAfterMs = args.retryAfterMs;
    this.received = args.received;
  }

  /** Whether the same request later may pass: no answer (a timeout, a refused or reset connection), 408, 425, 429 or 5xx. */
  get mayPassLater(): boolean {
    const status = this.status;
    return status === undefined || status === 408 || status === 425 || status === 429 || status >= 500;
  }

  /** Whether the request never reached the service: no connection could be made, so nothing was done. */
  get notSent(): boolean {
    return this.status === undefined && sentNothing(this.code);
  }

  /** Field-level failures of a 422, as `field: message` lines. */
  get fieldErrors(): string[] {
    return (this.problem.errors ?? []).map(describeFieldError);
  }
}

function describe(operation: string, status: number | undefined, problem: ProblemDetails, code: string | undefined): string {
  const head = status !== undefined ? `${operation} failed with ${status}` : code ? `${operation} failed (${code})` : `${operation} failed`;
  const text = [problem.title, problem.detail].filter(Boolean).join(': ');
  // A service that writes its one field error into detail as well is not quoted twice.
  const fields = (problem.errors ?? []).map(describeFieldError).filter((f) => !text.includes(f)).join('; ');
  // What each source said: a 503's detail may only say that one or more failed.
  const upstream = (problem.upstreamErrors ?? []).map((u) => u.detail).filter((d): d is string => Boolean(d) && !text.includes(d as string)).join('; ');
  return [head, text, fields, upstream && `upstream: ${upstream}`].filter(Boolean).join(' - ');
}
