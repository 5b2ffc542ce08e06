/** Where a search's next page is, once it is safe to follow. */

export interface PagedBundle {
  link?: Array<{ relation: string; url: string }>;
}

/**
 * The next link of a search Bundle, or undefined on its last page; remembered in `followed`.
 * Reading part of what matched would act on part of it, so a server paging in a circle, past
 * `maxPages`, or away from its own origin (where the access token would follow) fails the search.
 */
export function nextPageUrl(page: PagedBundle, followed: Set<string>, options: { baseUrl: string; maxPages: number; what: string }): string | undefined {
  const next = page.link?.find((l) => l.relation === 'next')?.url;
  if (!next) return undefined;
  const { baseUrl, maxPages, what } = options;
  if (followed.has(next)) throw new Error(`FHIR search ${what}: the server gave a next link it had given before, after ${followed.size + 1} pages`);
  if (followed.size + 1 >= maxPages) throw new Error(`FHIR search ${what}: more than ${maxPages} pages; refused rather than read in part`);
  // A relative link is the chart's own; fhir-kit-client sends an absolute one as given, the token with it.
  const origin = URL.canParse(next, `${baseUrl}/`) ? new URL(next, `${baseUrl}/`).origin : 'no URL';
  if (origin !== new URL(baseUrl).origin) throw new Error(`FHIR search ${what}: the server's next link leaves it for ${origin}; not followed, it would carry the chart's access token there`);
  followed.add(next);
  return next;
}

