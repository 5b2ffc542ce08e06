import type { Resource } from 'fhir/r4';

/** Whether the chart already holds this content; the server's id, meta and narrative aside, key order aside. */
export function sameContent(built: Resource, stored: Resource | undefined): boolean {
  if (!stored) return false;
  return sameJson(built, stored, SERVERS_OWN);
}

const SERVERS_OWN = new Set(['id', 'meta', 'text']);

/**
 * Whether two values are the same JSON, key order aside: walked side by side, where writing both
 * out with sorted keys made a copy of each object and a text of each resource on every write.
 * `ignored` names properties of the top level left out of the comparison.
 */
function sameJson(a: unknown, b: unknown, ignored?: ReadonlySet<string>): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    return a.every((v, i) => sameJson(v ?? null, b[i] ?? null));
  }
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  let keys = 0;
  for (const key in left) {
    const v = left[key];
    if (v === undefined || ignored?.has(key)) continue;
    if (!Object.hasOwn(right, key) || !sameJson(v, right[key])) return false;
    keys++;
  }
  for (const key in right) if (right[key] !== undefined && !ignored?.has(key)) keys--;
  return keys === 0;
}
