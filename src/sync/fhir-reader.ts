import type { FhirReader } from '../adapters/fhir/in';

export interface FhirKitReaderOptions {
  bearerToken?: string;
  headers?: Record<string, string>;
  /** Stop following next links after this many pages. */
  maxPages?: number;
}

/** A FhirReader over fhir-kit-client (ESM-only, hence the dynamic import). */
export async function fhirKitReader(baseUrl: string, options: FhirKitReaderOptions = {}): Promise<FhirReader> {
  const { Client } = await import('fhir-kit-client');
  const client = new Client({ baseUrl, customHeaders: options.headers ?? {}, ...(options.bearerToken ? { bearerToken: options.bearerToken } : {}) });
  const maxPages = options.maxPages ?? 20;
  return {
    async read(resourceType, id) {
      try {
        return await client.read({ resourceType, id });
      } catch (err) {
        const status = (err as { response?: { status?: number } }).response?.status;
        if (status === 404 || status === 410) return undefined;
        throw err;
      }
    },
    async search(resourceType, params) {
      const found: unknown[] = [];
      let page: unknown = await client.search({ resourceType, searchParams: params });
      for (let n = 0; n < maxPages && isBundle(page); n++) {
        for (const entry of page.entry ?? []) if (entry.resource && entry.search?.mode !== 'outcome') found.push(entry.resource);
        const next = page.link?.find((l) => l.relation === 'next');
        if (!next) break;
        page = await client.nextPage({ bundle: { ...page, link: page.link ?? [] } });
      }
      return found;
    },
  };
}

interface PageBundle {
  resourceType: 'Bundle';
  entry?: Array<{ resource?: unknown; search?: { mode?: string } }>;
  link?: Array<{ relation: string; url: string }>;
}
function isBundle(value: unknown): value is PageBundle {
  return typeof value === 'object' && value !== null && (value as { resourceType?: unknown }).resourceType === 'Bundle';
}
