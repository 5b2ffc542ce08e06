import * as z from 'zod';
import { carriesCredentials, isHttpUrl, isPlainHttpAcrossNetwork, plainHttpRefused } from '../url-checks';

/** The retirement date of /v1: after it a v1 base URL is refused; before it, warned about. */
export const V1_RETIREMENT = '2026-12-31';

/** Whether a text can travel as an HTTP header value: no control characters (CR and LF above all). */
const headerSafe = (text: string) => !/[\x00-\x1f\x7f]/.test(text);

/** Whether each character fits in the one byte a header value carries it in: Node refuses one past U+00FF (a zero-width space or a typographic dash a web page adds to a pasted key). */
const headerBytes = (text: string) => !/[^\x00-\xff]/.test(text);

export const ClientConfig = z
  .strictObject({
  /** The service root; the client appends /v2/... itself. */
  baseUrl: z
    .string()
    .refine(isHttpUrl, { error: 'must be an http(s) URL', abort: true })
    // The key travels in its own header; a user and password in the URL would be sent, and shown, besides it.
    .refine((url) => !carriesCredentials(url), { error: 'credentials do not belong in the URL; the API key comes from DENTAL_ELIG_API_KEY or apiKeyFile' })
    // The client appends /v2/… to the root as text: after a ? or # it would land in the query or be cut off.
    .refine((url) => !/[?#]/.test(url), { error: 'must be the service root, without a query or fragment (the client adds /v2/… to it)' }),
  apiKey: z
    .string()
    .min(1, { error: 'is required (DENTAL_ELIG_API_KEY or apiKeyFile)' })
    // A key pasted with its line end (a CRLF file, a secrets manager's value) cannot be sent as a header: named here, not as a network error.
    .refine(headerSafe, { error: 'holds a line break or another control character (copied with its line end?)' })
    .refine(headerBytes, { error: 'holds a character no HTTP header can carry, past U+00FF (copied from a web page or a document?)' }),
  /** Header the key travels in; `authorization` with scheme Bearer by default, `x-api-key` with no scheme elsewhere. */
  apiKeyHeader: z.string().regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, { error: 'must be an HTTP header name: no spaces, colons or other separators' }).default('authorization'),
  apiKeyScheme: z
    .string()
    .refine(headerSafe, { error: 'holds a line break or another control character' })
    .refine(headerBytes, { error: 'holds a character no HTTP header can carry, past U+00FF' })
    .default('Bearer'),
  /** Per-attempt limit for connect + headers and for the body. */
  timeoutMs: z.number().int().positive().default(30_000),
  /** Retries after the first attempt, for safe requests only. */
  maxRetries: z.number().int().min(0).max(10).default(4),
  retryMinDelayMs: z.number().int().min(0).default(500),
  retryMaxDelayMs: z.number().int().min(0).default(30_000),
  /** Plain http:// to another machine sends the key and patient data unencrypted: only when asked for. */
  allowInsecureHttp: z.boolean().default(false),
})
  .superRefine((config, ctx) => {
    if (isPlainHttpAcrossNetwork(config.baseUrl) && !config.allowInsecureHttp) {
      ctx.addIssue({
        code: 'custom',
        path: ['baseUrl'],
        message: plainHttpRefused('the API key and patient data', 'allowInsecureHttp, DENTAL_ELIG_ALLOW_INSECURE_HTTP=1'),
      });
    }
  });
export type ClientConfig = z.infer<typeof ClientConfig>;
export type ClientConfigInput = z.input<typeof ClientConfig>;
