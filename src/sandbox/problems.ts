/**
 * The sandbox's one error type: problem details (RFC 9457) served as application/problem+json,
 * made here and nowhere else. Type URIs follow docs/service.md's assumptions: a base plus a
 * kind as its last path segment, the same base the Failed results use.
 */
import type * as z from 'zod';
import { fieldErrors } from '../domain/issues';
import type { FieldError, ProblemDetails, UpstreamError } from '../verification/wire';

export const ERROR_TYPE_BASE = 'https://errors.verification.example';

export const problemType = (kind: string) => `${ERROR_TYPE_BASE}/${kind}`;

/** Field-level reasons the sandbox gives on 422 (errors[].code). */
export type FieldCode =
  | 'required'
  | 'invalid_value'
  | 'unknown_field'
  | 'invalid_json'
  | 'not_found'
  | 'conflict'
  | 'ambiguous'
  | 'primary_payer_id_not_accepted'
  | 'payer_not_in_network'
  | 'async_not_supported'
  | 'sync_not_supported'
  | 'portal_not_supported'
  | 'portal_requires_no_authentication'
  | 'credentials_not_stored'
  | 'login_method_mismatch'
  | 'mfa_email_missing'
  | 'mfa_phone_missing';

export class HttpProblem extends Error {
  readonly body: ProblemDetails;
  readonly headers: Record<string, string>;

  constructor(
    readonly status: number,
    kind: string,
    title: string,
    detail: string,
    extra: { errors?: FieldError[]; upstreamErrors?: UpstreamError[]; headers?: Record<string, string> } = {},
  ) {
    super(`${status} ${title}: ${detail}`);
    this.name = 'HttpProblem';
    this.headers = extra.headers ?? {};
    this.body = {
      type: problemType(kind),
      title,
      status,
      detail,
      ...(extra.upstreamErrors ? { upstreamErrors: extra.upstreamErrors } : {}),
      ...(extra.errors ? { errors: extra.errors } : {}),
    };
  }
}

export const unauthorized = (detail: string) =>
  new HttpProblem(401, 'Unauthorized', 'Unauthorized', detail, { headers: { 'www-authenticate': 'Bearer realm="sandbox"' } });

export const forbidden = (what: string) =>
  new HttpProblem(403, 'Forbidden', 'Forbidden', `this API key's customer may not use ${what}`);

export const notFound = (detail: string) => new HttpProblem(404, 'NotFound', 'Not Found', detail);

export function fieldError(field: string, code: FieldCode, message: string): FieldError {
  return { field, code, message };
}

export function unprocessable(errors: FieldError[], detail = 'the request failed validation'): HttpProblem {
  return new HttpProblem(422, 'ValidationFailed', 'Unprocessable Content', detail, { errors });
}

/** A 422 for a single field. */
export const invalidField = (field: string, code: FieldCode, message: string) =>
  unprocessable([fieldError(field, code, message)], `${field}: ${message}`);

export const unavailable = (retryAfterSeconds: number, detail = 'the service is temporarily unavailable') =>
  new HttpProblem(503, 'ServiceUnavailable', 'Service Unavailable', detail, {
    headers: { 'retry-after': String(retryAfterSeconds) },
  });

export const rateLimited = (retryAfterSeconds: number) =>
  new HttpProblem(429, 'RateLimited', 'Too Many Requests', 'rate limit exceeded; retry after the given delay', {
    headers: { 'retry-after': String(retryAfterSeconds) },
  });

/** Parses a body with a wire schema, or throws the 422 the service would answer. */
export function parseBody<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  throw unprocessable(fieldErrors(parsed.error.issues, body));
}
