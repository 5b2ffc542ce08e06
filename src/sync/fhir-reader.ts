import { describeIssue } from '../domain/issues';
import { timerMs } from '../timer-ms';
import { CHART_TRAFFIC, isPlainHttpAcrossNetwork, plainHttpRefused } from '../url-checks';
import type { FhirReader } from '../adapters/fhir/in';
import { FHIR_ID } from '../adapters/fhir/in/bundle-index';
import { FhirInputError, type FhirIssue } from '../adapters/fhir/operation-outcome';
import { CHART_TIMEOUT_MS, chartAgent } from './chart-client';
import { answerOf, answerTooLarge, ChartWriteError, chartAnswered, toChartWriteError, tooLargeToRead } from './chart-errors';
import type { AccessTokens } from './fhir-auth';
import { nextPageUrl, type PagedBundle } from './search-pages';

export interface FhirKitReaderOptions {
  /** A static access token. */
  bearerToken?: string;
  /** Where each request's Authorization comes from (SMART Backend Services); a refused token is renewed once. */
  tokens?: AccessTokens;
  headers?: Record<string, string>;
  /** A search with more pages than this fails rather than give part of what matched. Default 1,000. */
  maxPages?: number;
  /** Each request gives up after this long, as the write-back's do. Default 30 s. */
  timeoutMs?: number;
  /** Plain http:// to another machine sends the access token and patient data unencrypted: only when asked for, as for the writer. */
  allowInsecureHttp?: boolean;
}

/**
 * fetch's own for every read: a redirect is answered as the error it is, not followed. fetch keeps
 * a 307's body, and drops the Authorization header alone where the redirect leaves the chart's
 * origin: a chart's redirect (to plain http, or to another host) would take a search's identifiers
 * there. (The writer's exchanges, through undici's request, follow none either.) fhir-kit-client
 * builds each Request with these, and fetch takes the dispatcher from it: every answer under the
 * chart's limit, as the writer's are.
 */
const CHART_REQUESTS = { redirect: 'manual', dispatcher: chartAgent } as const;

/** A FhirReader over fhir-kit-client (ESM-only, hence the dynamic import). */
export async function fhirKitReader(baseUrl: string, options: FhirKitReaderOptions = {}): Promise<FhirReader> {
  // Refused here too, not only where the sync is created: an embedder may build the reader alone.
  if (isPlainHttpAcrossNetwork(baseUrl) && !options.allowInsecureHttp) throw new Error(`baseUrl: ${plainHttpRefused(CHART_TRAFFIC, 'allowInsecureHttp')}`);
  const { Client } = await import('fhir-kit-client');
  const client = new Client({ baseUrl, customHeaders: options.headers ?? {}, requestOptions: CHART_REQUESTS, ...(options.bearerToken ? { bearerToken: options.bearerToken } : {}) });
  const maxPages = options.maxPages ?? 1000;
  const tokens = options.tokens;
  // A timer (AbortSignal.timeout) waits for it: longer than one can wait, every read would give up at once, as the writer's timeoutMs is refused too.
  const timeout = timerMs(1).default(CHART_TIMEOUT_MS).safeParse(options.timeoutMs);
  if (!timeout.success) throw new Error(describeIssue(timeout.error, 'timeoutMs'));
  const timeoutMs = timeout.data;

  /**
   * One request with the current token and a deadline (a FHIR server that never answers would
   * hold a notification, and every poll after it, for minutes); a token the server refuses is
   * renewed and the request made once more. What the chart would answer so again is a
   * FhirInputError, as the notification it came for is kept for a person: an answer past the
   * chart's limit, and a failure the writer takes as final too (chartAnswered: a refusal, 400,
   * 403, a 401 after the renewal, a redirect; the token endpoint's refusal), as nextPageUrl's
   * refusals are. What may pass (the chart out of reach, slow, throttling or failing: 408, 429,
   * 5xx) is thrown to be tried again. Neither names the URL, which for a search holds the patient
   * searched by. (fetch keeps
   * undici's refusal as the cause it is known by only where both share a realm: in a VM, Jest's,
   * it reads as a connection cut, and the answer is not read all the same.)
   */
  async function authorized<T>(step: { resourceType: string; verb: 'read' | 'search' }, request: ChartRead<T>): Promise<T> {
    const refused = (diagnostics: string, code: FhirIssue['code']) => new FhirInputError([{ expression: step.resourceType, diagnostics, code }]);
    try {
      return await renewing(request);
    } catch (err) {
      if (answerTooLarge(err)) throw refused(tooLargeToRead(`the FHIR server's answer to the ${step.verb}`), 'too-costly');
      // The SMART token endpoint's own failure: its refusal (a key it does not know) is final for the writer too.
      if (err instanceof ChartWriteError) throw err.retryable ? new Error(`${step.resourceType}: ${err.reason}`) : refused(err.reason, 'security');
      const response = answerOf(err);
      if (!response) {
        // The chart out of reach or silent, in the writer's words: fetch's own ('fetch failed', 'The operation was
        // aborted due to timeout') name neither the chart nor why, in the log and the notification's dead letter.
        const unreached = toChartWriteError(err, step.verb);
        throw unreached.retryable ? new Error(`${step.resourceType}: ${unreached.reason}`, { cause: err }) : err;
      }
      const answer = chartAnswered(response, step.verb);
      if (!answer.retryable) throw refused(answer.text, response.status === 401 || response.status === 403 ? 'security' : 'processing');
      // In these words, not fhir-kit-client's "HTTP 503: GET <url>": a log line or a dead letter would quote the patient searched by.
      throw new Error(`${step.resourceType}: ${answer.text}`);
    }
  }

  async function renewing<T>(request: ChartRead<T>): Promise<T> {
    if (!tokens) return request({ signal: AbortSignal.timeout(timeoutMs) });
    const once = async () => {
      const authorization = await tokens.authorization();
      return request({ ...(authorization && { headers: { authorization } }), signal: AbortSignal.timeout(timeoutMs) });
    };
    try {
      return await once();
    } catch (err) {
      if (answerOf(err)?.status !== 401 || !tokens.renewable) throw err;
      tokens.invalidate();
      return once();
    }
  }

  return {
    async read(resourceType, id) {
      // fhir-kit-client puts the id in the URL as given: `x/../Patient/p` would read another resource, `x?_id=…` or `.` search.
      if (!FHIR_ID.test(id)) throw new Error(`FHIR read ${resourceType}: the id is not an R4 id (1 to 64 letters, digits, '-' and '.')`);
      return authorized({ resourceType, verb: 'read' }, async (requestOptions) => {
        try {
          return await client.read({ resourceType, id, options: requestOptions });
        } catch (err) {
          // Not there (deleted: 410) is the chart's answer, not a refusal.
          const status = answerOf(err)?.status;
          if (status === 404 || status === 410) return undefined;
          throw err;
        }
      });
    },
    /**
     * Every page: the poll moves its cursor past what a search gave, so a search cut short would
     * lose what was on the pages not read (nextPageUrl fails it instead).
     */
    async search(resourceType, params, searchOptions) {
      const found: unknown[] = [];
      const followed = new Set<string>();
      const step = { resourceType, verb: 'search' } as const;
      let page = await authorized(step, (requestOptions) => client.search({ resourceType, searchParams: params, options: requestOptions }));
      while (isBundle(page)) {
        for (const entry of page.entry ?? []) if (entry.resource && entry.search?.mode !== 'outcome') found.push(entry.resource);
        // fhir-kit-client keeps the Request each answer came to: the page's own URL, for a link relative to it.
        const pageUrl = Client.httpFor(page).request?.url ?? `${baseUrl}/`;
        const next = nextPageUrl(page, followed, { baseUrl, pageUrl, maxPages: Math.min(maxPages, searchOptions?.maxPages ?? maxPages), what: resourceType });
        if (!next) break;
        page = await authorized(step, async (requestOptions) => client.request(next, { options: requestOptions }));
      }
      return found;
    },
  };
}

type ChartRead<T> = (requestOptions: { headers?: Record<string, string>; signal: AbortSignal }) => Promise<T>;

interface PageBundle extends PagedBundle {
  resourceType: 'Bundle';
  entry?: Array<{ resource?: unknown; search?: { mode?: string } }>;
}
function isBundle(value: unknown): value is PageBundle {
  return typeof value === 'object' && value !== null && (value as { resourceType?: unknown }).resourceType === 'Bundle';
}
