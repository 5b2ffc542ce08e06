import type { Bundle, BundleEntry, Resource } from 'fhir/r4';
import { Agent, request } from 'undici';
import * as z from 'zod';
import { ChartWriteError, toChartWriteError } from './chart-errors';
import type { AccessTokens } from './fhir-auth';
import { nextPageUrl } from './search-pages';

/** The chart's FHIR server as the write-back uses it: searches in one batch, writes in one transaction. */
export interface ChartClient {
  /** The one resource each search finds, or undefined; more than one is an error naming the search's resource type. */
  findEach(searches: readonly string[]): Promise<Array<Resource | undefined>>;
  /** Every resource one search finds, page after page. */
  findAll(search: string): Promise<Resource[]>;
  /** The transaction's answer entries, one per entry sent. */
  transaction(entries: BundleEntry[]): Promise<TransactionEntry[]>;
}

const AnswerEntry = z.looseObject({
  resource: z.looseObject({ resourceType: z.string(), id: z.string().min(1).optional() }).optional(),
  response: z.looseObject({ status: z.string(), location: z.string().optional() }).optional(),
});
export type TransactionEntry = z.infer<typeof AnswerEntry>;
const Answer = z.looseObject({ entry: z.array(AnswerEntry).default([]) });
const SearchSet = z.looseObject({
  resourceType: z.literal('Bundle'),
  entry: z.array(z.looseObject({ resource: z.looseObject({ resourceType: z.string() }).optional(), search: z.looseObject({ mode: z.string().optional() }).optional() })).default([]),
  link: z.array(z.looseObject({ relation: z.string(), url: z.string() })).optional(),
});
type SearchSet = z.infer<typeof SearchSet>;
/** More pages than this fail a search: it looks for one patient's few Coverages. */
const MAX_PAGES = 20;

function searchSet(step: string, answer: unknown): SearchSet {
  const found = SearchSet.safeParse(answer);
  if (!found.success) throw new ChartWriteError(`the FHIR server answered the ${step} without a search Bundle`, { retryable: false });
  return found.data;
}

const matchesOf = (page: SearchSet) => page.entry.flatMap((e) => (e.resource && (e.search?.mode ?? 'match') === 'match' ? [e.resource as Resource] : []));

/**
 * undici's request, not fhir-kit-client: its fetch (a Request built twice, web streams, the body
 * teed to follow a redirect) cost about 0.4 ms of CPU an exchange more, and a write is two. A
 * redirect is not followed: the FHIR server's 3xx is its answer.
 */
export async function chartClient(baseUrl: string, tokens: AccessTokens, timeoutMs: number): Promise<ChartClient> {
  const url = `${baseUrl}/`;

  /**
   * One exchange with the token and a deadline, every failure a ChartWriteError: a Bundle posted to
   * the base, or a search read (a search of the base's, or a next link the chart gave).
   */
  async function exchange(step: string, send: { post: Bundle; prefer?: string } | { get: string }): Promise<unknown> {
    // The token endpoint's own failures are final as they are; only the FHIR server's 401 asks for a new token.
    const authorization = await tokens.authorization().catch((err: unknown) => Promise.reject(toChartWriteError(err, step)));
    const headers = { accept: FHIR_JSON, ...('post' in send && { 'content-type': FHIR_JSON }), ...(authorization && { authorization }), ...('prefer' in send && send.prefer && { prefer: send.prefer }) };
    const response = await answer(send, headers).catch((err: unknown) => Promise.reject(toChartWriteError(err, step)));
    if (response.status >= 200 && response.status < 300 && typeof response.data !== 'string') return response.data;
    const error = toChartWriteError({ response }, step);
    if (error.status !== 401 || !tokens.renewable) throw error;
    // A refused access token (revoked, or expired early): the next attempt fetches a new one.
    tokens.invalidate();
    throw new ChartWriteError(error.reason, { retryable: true, status: 401, issues: error.issues });
  }

  /** The answer's status and JSON (its text when it is not JSON, which no answer may be). */
  async function answer(send: { post: Bundle } | { get: string }, headers: Record<string, string>): Promise<{ status: number; data: unknown }> {
    const signal = AbortSignal.timeout(timeoutMs);
    const res =
      'post' in send
        ? await request(url, { method: 'POST', headers, body: JSON.stringify(send.post), signal, dispatcher: chartAgent })
        : await request(new URL(send.get, url), { method: 'GET', headers, signal, dispatcher: chartAgent });
    const text = await res.body.text();
    try {
      return { status: res.statusCode, data: text ? JSON.parse(text) : {} };
    } catch {
      return { status: res.statusCode, data: text };
    }
  }

  function answerEntries(step: string, answer: unknown, sent: number): TransactionEntry[] {
    const parsed = Answer.safeParse(answer);
    if (!parsed.success || parsed.data.entry.length !== sent) {
      throw new ChartWriteError(`the FHIR server's answer to the ${step} is not a Bundle with one entry per request`, { retryable: false });
    }
    return parsed.data.entry;
  }

  /** Each search's matches, the searches sent in one batch. */
  async function searchEach(searches: readonly string[]): Promise<Resource[][]> {
    const step = 'search for what the chart holds';
    const body: Bundle = { resourceType: 'Bundle', type: 'batch', entry: searches.map((url) => ({ request: { method: 'GET', url } })) };
    const answered = await exchange(step, { post: body });
    return answerEntries(step, answered, searches.length).map((entry, i) => {
      const type = typeOf(searches[i]);
      const status = Number(entry.response?.status?.split(' ')[0]);
      if (Number.isFinite(status) && (status < 200 || status >= 300)) throw toChartWriteError({ response: { status, data: entry.resource } }, `search for a ${type}`);
      return matchesOf(searchSet(`search for a ${type}`, entry.resource));
    });
  }

  return {
    async findEach(searches) {
      return (await searchEach(searches)).map((matches, i) => {
        if (matches.length > 1) throw new ChartWriteError(`${typeOf(searches[i])}.identifier: ${matches.length} resources in the chart carry the identifier it is found by; one must go`, { retryable: false });
        return matches[0];
      });
    },
    async findAll(search) {
      // A GET, not a batch entry: a server need give no next link inside a batch's answer (Medplum gives none).
      const step = `search for a ${typeOf(search)}`;
      const found: Resource[] = [];
      const followed = new Set<string>();
      for (let url: string | undefined = search; url; ) {
        const page = searchSet(step, await exchange(step, { get: url }));
        found.push(...matchesOf(page));
        try {
          url = nextPageUrl(page, followed, { baseUrl, pageUrl: new URL(url, `${baseUrl}/`).href, maxPages: MAX_PAGES, what: typeOf(search) });
        } catch (err) {
          throw toChartWriteError(err, step);
        }
      }
      return found;
    },
    async transaction(entries) {
      const step = 'transaction';
      const body: Bundle = { resourceType: 'Bundle', type: 'transaction', entry: entries };
      // The answer needs each entry's status and location, not the resources just sent back again.
      const answered = await exchange(step, { post: body, prefer: 'return=minimal' });
      return answerEntries(step, answered, entries.length);
    },
  };
}

const FHIR_JSON = 'application/fhir+json';

/**
 * The chart's answers are a batch of identifier searches, a page of one patient's Coverages and a
 * transaction's statuses: a few hundred KB at most. One past the limit is refused as it arrives
 * rather than read whole (a runaway search of gigabytes, parsed while every ACK waits).
 */
export const MAX_CHART_ANSWER_BYTES = 32 * 1024 * 1024;
/** The chart's side, its SMART authorization too: every answer under MAX_CHART_ANSWER_BYTES. */
export const chartAgent = new Agent({ maxResponseSize: MAX_CHART_ANSWER_BYTES });
/** How long one request to the chart (or its token endpoint) waits unless told: the writer's, the reader's and the sync's reader alike. */
export const CHART_TIMEOUT_MS = 30_000;

const typeOf = (search: string | undefined) => search?.split('?')[0] ?? 'resource';

/** The id a transaction answer gives for one entry: the resource's, or its Location's. */
export function idFrom(entry: TransactionEntry): string | undefined {
  const location = entry.response?.location ?? '';
  return entry.resource?.id ?? /\/([^/]+)\/_history\//.exec(location)?.[1] ?? (location.split('/').pop() || undefined);
}
