import type { Bundle, BundleEntry, Resource } from 'fhir/r4';
import * as z from 'zod';
import { ChartWriteError, toChartWriteError } from './chart-errors';
import type { AccessTokens } from './fhir-auth';
import { nextPageUrl } from './search-pages';

type FhirKitClient = InstanceType<typeof import('fhir-kit-client', { with: { 'resolution-mode': 'import' } }).Client>;
type FhirKitBody = Parameters<FhirKitClient['transaction']>[0]['body'];

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
 * fetch's own for every exchange with the chart: a redirect is answered as the error it is, not
 * followed. fetch keeps a 307's body, and drops the Authorization header alone where the redirect
 * leaves the chart's origin: a chart's redirect (to plain http, or to another host) would take a
 * transaction of patient data there, and a search's identifiers.
 */
export const CHART_REQUESTS = { redirect: 'manual' } as const;

export async function chartClient(baseUrl: string, tokens: AccessTokens, timeoutMs: number): Promise<ChartClient> {
  const { Client } = await import('fhir-kit-client');
  const client: FhirKitClient = new Client({ baseUrl, requestOptions: CHART_REQUESTS });

  /** One exchange: the token, a deadline, and every failure as a ChartWriteError. */
  async function exchange(step: string, run: (options: { headers: Record<string, string>; signal: AbortSignal }) => Promise<unknown>): Promise<unknown> {
    // The token endpoint's own failures are final as they are; only the FHIR server's 401 asks for a new token.
    const authorization = await tokens.authorization().catch((err: unknown) => Promise.reject(toChartWriteError(err, step)));
    try {
      return await run({ headers: authorization ? { authorization } : {}, signal: AbortSignal.timeout(timeoutMs) });
    } catch (err) {
      const error = toChartWriteError(err, step);
      if (error.status !== 401 || !tokens.renewable) throw error;
      // A refused access token (revoked, or expired early): the next attempt fetches a new one.
      tokens.invalidate();
      throw new ChartWriteError(error.message.replace(/^write eligibility: /, ''), { retryable: true, status: 401, issues: error.issues });
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
    const answer = await exchange(step, (options) => client.batch({ body: body as unknown as FhirKitBody, options }));
    return answerEntries(step, answer, searches.length).map((entry, i) => {
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
        const page = searchSet(step, await exchange(step, (options) => client.request(url as string, { method: 'GET', options })));
        found.push(...matchesOf(page));
        try {
          url = nextPageUrl(page, followed, { baseUrl, maxPages: MAX_PAGES, what: typeOf(search) });
        } catch (err) {
          throw new ChartWriteError((err as Error).message, { retryable: false });
        }
      }
      return found;
    },
    async transaction(entries) {
      const step = 'transaction';
      const body: Bundle = { resourceType: 'Bundle', type: 'transaction', entry: entries };
      // The answer needs each entry's status and location, not the resources just sent back again.
      const answer = await exchange(step, (options) => client.transaction({ body: body as unknown as FhirKitBody, options: { ...options, headers: { ...options.headers, prefer: 'return=minimal' } } }));
      return answerEntries(step, answer, entries.length);
    },
  };
}

const typeOf = (search: string | undefined) => search?.split('?')[0] ?? 'resource';

/** The id a transaction answer gives for one entry: the resource's, or its Location's. */
export function idFrom(entry: TransactionEntry): string | undefined {
  const location = entry.response?.location ?? '';
  return entry.resource?.id ?? /\/([^/]+)\/_history\//.exec(location)?.[1] ?? (location.split('/').pop() || undefined);
}
