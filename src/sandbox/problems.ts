/**
 * The sandbox's one error type: problem details (RFC 9457) served as application/problem+json,
 * made here and nowhere else. Type URIs follow shared/spec/assumed-wire-shapes.md: a base plus a
 * kind as its last path segment, the same base the Failed results use.
 */
import type * as z from 'zod';
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

function valueAt(input: unknown, path: PropertyKey[]): unknown {
  let at: unknown = input;
  for (const key of path) {
    if (typeof at !== 'object' || at === null) return undefined;
    at = (at as Record<PropertyKey, unknown>)[key];
  }
  return at;
}

const dotted = (path: PropertyKey[]) => path.map(String).join('.');

/**
 * zod issues as errors[]: a missing value is `required`, an unexpected key `unknown_field`
 * (one entry per key), anything else `invalid_value`. The field is the dotted path, e.g.
 * `patient.dateOfBirth`; the message never repeats the value, which may be patient data.
 */
export function errorsFromZod(issues: z.core.$ZodIssue[], input: unknown): FieldError[] {
  const out: FieldError[] = [];
  for (const issue of issues) {
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) out.push(fieldError(dotted([...issue.path, key]), 'unknown_field', 'is not a field of this request'));
      continue;
    }
    const field = dotted(issue.path) || 'body';
    if (issue.code === 'invalid_type' && valueAt(input, issue.path) === undefined) {
      out.push(fieldError(field, 'required', 'is required'));
      continue;
    }
    out.push(fieldError(field, 'invalid_value', issue.message));
  }
  return out;
}

/** Parses a body with a wire schema, or throws the 422 the service would answer. */
export function parseBody<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  throw unprocessable(errorsFromZod(parsed.error.issues, body));
}
