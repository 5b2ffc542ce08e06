import * as z from 'zod';

/** The retirement date of /v1: after it a v1 base URL is refused; before it, warned about. */
export const V1_RETIREMENT = '2026-12-31';

/** This machine: plain HTTP to it never crosses a network. */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  return host === 'localhost' || host.endsWith('.localhost') || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

export const ClientConfig = z
  .strictObject({
  /** The service root; the client appends /v2/... itself. */
  baseUrl: z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }),
  apiKey: z.string().min(1, { error: 'is required (DENTAL_ELIG_API_KEY or apiKeyFile)' }),
  /** Header the key travels in; `authorization` with scheme Bearer by default, `x-api-key` with no scheme elsewhere. */
  apiKeyHeader: z.string().min(1).default('authorization'),
  apiKeyScheme: z.string().default('Bearer'),
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
    // Refinements run on a baseUrl the url check refused too: that issue names it already.
    if (!URL.canParse(config.baseUrl)) return;
    const url = new URL(config.baseUrl);
    if (url.protocol === 'http:' && !isLoopbackHost(url.hostname) && !config.allowInsecureHttp) {
      ctx.addIssue({
        code: 'custom',
        path: ['baseUrl'],
        message:
          'plain http to a host other than this machine would send the API key and patient data unencrypted; use https, or allow it explicitly (allowInsecureHttp, DENTAL_ELIG_ALLOW_INSECURE_HTTP=1)',
      });
    }
  });
export type ClientConfig = z.infer<typeof ClientConfig>;
export type ClientConfigInput = z.input<typeof ClientConfig>;
