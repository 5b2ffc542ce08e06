import type { FhirReader } from '../adapters/fhir/in';
import type { AccessTokens } from './fhir-auth';

export interface FhirKitReaderOptions {
  /** A static access token. */
  bearerToken?: string;
  /** Where each request's Authorization comes from (SMART Backend Services); a refused token is renewed once. */
  tokens?: AccessTokens;
  headers?: Record<string, string>;
  /** Stop following next links after this many pages. */
  maxPages?: number;
  /** Each request gives up after this long, as the write-back's do. Default 30 s. */
  timeoutMs?: number;
}

/** A FhirReader over fhir-kit-client (ESM-only, hence the dynamic import). */
export async function fhirKitReader(baseUrl: string, options: FhirKitReaderOptions = {}): Promise<FhirReader> {
  const { Client } = await import('fhir-kit-client');
  const client = new Client({ baseUrl, customHeaders: options.headers ?? {}, ...(options.bearerToken ? { bearerToken: options.bearerToken } : {}) });
  const maxPages = options.maxPages ?? 20;
  const tokens = options.tokens;
  const timeoutMs = options.timeoutMs ?? 30_000;

  /**
   * One request with the current token and a deadline (a FHIR server that never answers would
   * hold a notification, and every poll after it, for minutes); a token the server refuses is
   * renewed and the request made once more.
   */
  async function authorized<T>(request: (requestOptions: { headers?: Record<string, string>; signal: AbortSignal }) => Promise<T>): Promise<T> {
    if (!tokens) return request({ signal: AbortSignal.timeout(timeoutMs) });
    const once = async () => {
      const authorization = await tokens.authorization();
      return request({ ...(authorization && { headers: { authorization } }), signal: AbortSignal.timeout(timeoutMs) });
    };
    try {
      return await once();
    } catch (err) {
      if (statusOf(err) !== 401 || !tokens.renewable) throw err;
      tokens.invalidate();
      return once();
    }
  }

  return {
    async read(resourceType, id) {
      try {
        return await authorized((requestOptions) => client.read({ resourceType, id, options: requestOptions }));
      } catch (err) {
        const status = statusOf(err);
        if (status === 404 || status === 410) return undefined;
        throw err;
      }
    },
    async search(resourceType, params) {
      const found: unknown[] = [];
      let page: unknown = await authorized((requestOptions) => client.search({ resourceType, searchParams: params, options: requestOptions }));
      for (let n = 0; n < maxPages && isBundle(page); n++) {
        for (const entry of page.entry ?? []) if (entry.resource && entry.search?.mode !== 'outcome') found.push(entry.resource);
        const next = page.link?.find((l) => l.relation === 'next');
        if (!next) break;
        const bundle = { ...page, link: page.link ?? [] };
        page = await authorized(async (requestOptions) => client.nextPage({ bundle, options: requestOptions }));
      }
      return found;
    },
  };
}

function statusOf(err: unknown): number | undefined {
  return (err as { response?: { status?: number } }).response?.status;
}

interface PageBundle {
  resourceType: 'Bundle';
  entry?: Array<{ resource?: unknown; search?: { mode?: string } }>;
  link?: Array<{ relation: string; url: string }>;
}
function isBundle(value: unknown): value is PageBundle {
  return typeof value === 'object' && value !== null && (value as { resourceType?: unknown }).resourceType === 'Bundle';
}
