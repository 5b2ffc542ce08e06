import { FhirInputError, type FhirIssue } from '../adapters/fhir/operation-outcome';

/** Where a search's next page is, once it is safe to follow. */

export interface PagedBundle {
  link?: Array<{ relation: string; url: string }>;
}

/**
 * The next link of a search Bundle, resolved as a browser would, against `pageUrl`, the URL the
 * page came on (a server may give '?page=2' alone, on the search's own path), or undefined on its
 * last page; remembered in `followed`. Reading part of what matched would act on part of it, so a
 * server paging in a circle, past `maxPages`, or away from the chart's origin (`baseUrl`'s, where
 * the access token would follow) fails the search, with a FhirInputError: searched again, the
 * server pages so again, so what needed the search is for a person (a notification a dead letter,
 * a write needs-attention), not tried again. The URL given back is the one checked, and the one to
 * request: fhir-kit-client reads a link its own way ('http:host/x' as http://host/x, '/fhir/x' under
 * the base again), which would send the token where no check looked.
 */
export function nextPageUrl(page: PagedBundle, followed: Set<string>, options: { baseUrl: string; pageUrl: string; maxPages: number; what: string }): string | undefined {
  const next = page.link?.find((l) => l.relation === 'next')?.url;
  if (!next) return undefined;
  const { baseUrl, pageUrl, maxPages, what } = options;
  const refused = (diagnostics: string, code: FhirIssue['code']) => new FhirInputError([{ expression: what, diagnostics: `the FHIR server's search ${diagnostics}`, code }]);
  const url = URL.canParse(next, pageUrl) ? new URL(next, pageUrl) : undefined;
  // A circle by where the links lead: '?page=2' on two pages of two paths is two pages.
  const key = url?.href ?? next;
  if (followed.has(key)) throw refused(`gave a next link it had given before, after ${followed.size + 1} pages; not read in part`, 'invalid');
  if (followed.size + 1 >= maxPages) throw refused(`gave more than ${maxPages} pages; refused rather than read in part`, 'too-costly');
  // The origin alone, never the link: its query holds what was searched by (a patient).
  const origin = url?.origin ?? 'no URL';
  if (origin !== new URL(baseUrl).origin) throw refused(`gave a next link leaving it for ${origin}; not followed, it would carry the chart's access token there`, 'security');
  followed.add(key);
  return url?.href;
}
