/** Where a search's next page is, once it is safe to follow. */

export interface PagedBundle {
  link?: Array<{ relation: string; url: string }>;
}

/**
 * The next link of a search Bundle, resolved against the base, or undefined on its last page;
 * remembered in `followed`. Reading part of what matched would act on part of it, so a server
 * paging in a circle, past `maxPages`, or away from its own origin (where the access token would
 * follow) fails the search. The URL given back is the one checked, and the one to request:
 * fhir-kit-client reads a link its own way ('http:host/x' as http://host/x, '/fhir/x' under the
 * base again), which would send the token where no check looked.
 */
export function nextPageUrl(page: PagedBundle, followed: Set<string>, options: { baseUrl: string; maxPages: number; what: string }): string | undefined {
  const next = page.link?.find((l) => l.relation === 'next')?.url;
  if (!next) return undefined;
  const { baseUrl, maxPages, what } = options;
  if (followed.has(next)) throw new Error(`FHIR search ${what}: the server gave a next link it had given before, after ${followed.size + 1} pages`);
  if (followed.size + 1 >= maxPages) throw new Error(`FHIR search ${what}: more than ${maxPages} pages; refused rather than read in part`);
  const url = URL.canParse(next, `${baseUrl}/`) ? new URL(next, `${baseUrl}/`) : undefined;
  const origin = url?.origin ?? 'no URL';
  if (origin !== new URL(baseUrl).origin) throw new Error(`FHIR search ${what}: the server's next link leaves it for ${origin}; not followed, it would carry the chart's access token there`);
  followed.add(next);
  return url?.href;
}

