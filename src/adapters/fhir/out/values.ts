/**
 * FHIR datatypes from the service's values. Dates and times the service writes badly are an
 * error naming the source element, never a silently dropped or an invalid FHIR value (a result's
 * dates are read as dates in wire.ts, so one written badly there is left out and kept before this).
 */
import type { Address, CoverageEligibilityResponseInsuranceItemBenefit, HumanName, Money, Quantity } from 'fhir/r4';
import { dayWritten, isFhirDate, withoutControlCharacters } from '../../../domain';
import { FhirInputError } from '../operation-outcome';
import { systemUrl } from '../systems';

const FHIR_DATE_TIME = /^\d{4}(-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01])(T([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?(Z|[+-]((0\d|1[0-3]):[0-5]\d|14:00)))?)?)?$/;

/** A blank date is one the portal does not know, as present() reads any blank value: none, not a malformed one. */
export function fhirDate(value: string | null | undefined, path: string): string | undefined {
  if (value == null || present(value) === undefined) return undefined;
  const date = dayWritten(value);
  if (!isFhirDate(date)) throw new FhirInputError([{ expression: path, diagnostics: 'must be a date (YYYY-MM-DD)', code: 'value' }]);
  return date;
}

/** Whether a value is a FHIR dateTime: a time with its offset, or a date to the year, month or day. */
export const isFhirDateTime = (value: string): boolean => FHIR_DATE_TIME.test(value);

/** A time needs its offset in FHIR; the service's timestamps carry one. */
export function fhirDateTime(value: string | null | undefined, path: string): string | undefined {
  if (value == null || present(value) === undefined) return undefined;
  if (!isFhirDateTime(value)) {
    throw new FhirInputError([{ expression: path, diagnostics: 'must be an ISO 8601 date-time with offset', code: 'value' }]);
  }
  return value;
}

/** Amounts are US dollars. */
export function money(value: number | null | undefined): Money | undefined {
  return value === null || value === undefined ? undefined : { value, currency: 'USD' };
}

const dollars = new Intl.NumberFormat('en-US', { style: 'currency', currency: 'USD' });

/** An amount as a person reads it, wherever one is shown (the chart's descriptions, the demo's table): `$1,234.50`. */
export function dollarsText(value: number): string {
  return dollars.format(value);
}

/** unsignedInt where the value is a count, else the number as a string, so an odd value is still carried. */
export function allowedCount(value: number | null | undefined): Pick<CoverageEligibilityResponseInsuranceItemBenefit, 'allowedUnsignedInt' | 'allowedString'> {
  if (value === null || value === undefined) return {};
  return isUnsignedInt(value) ? { allowedUnsignedInt: value } : { allowedString: String(value) };
}

export function usedCount(value: number | null | undefined): Pick<CoverageEligibilityResponseInsuranceItemBenefit, 'usedUnsignedInt' | 'usedString'> {
  if (value === null || value === undefined) return {};
  return isUnsignedInt(value) ? { usedUnsignedInt: value } : { usedString: String(value) };
}

const isUnsignedInt = (n: number) => Number.isInteger(n) && n >= 0 && n <= 2147483647;

/** The value when it says something, as prune leaves it: a portal's "" or " " is a value it does not know, the same as none. */
export const present = (value: string | null | undefined): string | undefined => (value == null ? undefined : prunedText(value));

/** A text with its first letter in upper case, as a sentence of parts begins: none for an empty one. */
export const capitalised = (text: string): string | undefined => (text ? `${text.charAt(0).toUpperCase()}${text.slice(1)}` : undefined);

/** The members of a list that say something (see present), each as given: a blank one names nothing. */
export const said = (list: readonly string[] | null | undefined): string[] => (list ?? []).filter((value) => present(value) !== undefined);

export const stringValue = (value: string | null | undefined) => (value ? { valueString: value } : undefined);

export function percent(value: number): Quantity {
  return { value, unit: '%', system: systemUrl('ucum'), code: '%' };
}

type Maybe<T> = T | null | undefined;

export function humanName(first: Maybe<string>, middle: Maybe<string>, last: Maybe<string>): HumanName | undefined {
  const given = [first, middle].filter((g): g is string => Boolean(g));
  if (given.length === 0 && !last) return undefined;
  return { family: last ?? undefined, given };
}

export function address(a: Maybe<{ line1?: Maybe<string>; line2?: Maybe<string>; city?: Maybe<string>; state?: Maybe<string>; postalCode?: Maybe<string> }>): Address | undefined {
  if (!a) return undefined;
  const line = said([a.line1 ?? '', a.line2 ?? '']);
  const [city, state, postalCode] = [present(a.city), present(a.state), present(a.postalCode)];
  if (line.length === 0 && !city && !state && !postalCode) return undefined;
  return { line, city, state, postalCode };
}

/** A URI as FHIR takes it, without whitespace: a service's "https://e.example/Site Maintenance" with its spaces percent-encoded, as a browser sends it. */
export const uriOf = (value: string): string => value.replace(/\s/g, encodeURIComponent);

/** The members of a list of optional values that are there. */
export function defined<T>(list: Array<T | undefined>): T[] {
  return list.filter((v): v is T => v !== undefined);
}

/**
 * Drops what FHIR does not allow to be there empty, at every depth: undefined properties and
 * array members, empty arrays, strings with nothing but whitespace (a portal's "" or " " for a
 * name it does not know), objects left with nothing, and extensions left with neither a value nor
 * extensions; and the control characters FHIR strings may not hold, wherever they are (the
 * identifiers the chart is searched by are refused with them at the wire, so only text loses them).
 * Builders write every element the result might fill.
 * Builders make every object afresh, so an object with nothing to drop is kept as it is, and only
 * those with something to drop are copied: most of a response (codings, references, quantities)
 * has nothing to drop, and this runs on every response written.
 */
export function prune<T>(value: T): T {
  return pruned(value) as T;
}

function pruned(value: unknown): unknown {
  if (typeof value === 'string') return prunedText(value);
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) return prunedArray(value);
  const object = value as Record<string, unknown>;
  let out: Record<string, unknown> | undefined;
  let kept = 0;
  for (const key in object) {
    const v = object[key];
    let p = pruned(v);
    if ((key === 'extension' || key === 'modifierExtension') && Array.isArray(p)) p = withoutEmptyExtensions(p);
    const drop = p === undefined || (Array.isArray(p) && p.length === 0);
    if (!drop) kept++;
    if (out === undefined) {
      if (!drop && p === v) continue;
      out = {};
      for (const before in object) {
        if (before === key) break;
        out[before] = object[before];
      }
    }
    if (!drop) out[key] = p;
  }
  return kept === 0 ? undefined : (out ?? object);
}

function prunedText(value: string): string | undefined {
  const text = withoutControlCharacters(value);
  return text.trim() === '' ? undefined : text;
}

/** An extension with no value[x] and no extensions says nothing, and FHIR refuses it (ext-1). */
function withoutEmptyExtensions(extensions: unknown[]): unknown[] {
  const empty = (e: unknown) => typeof e === 'object' && e !== null && Object.keys(e).every((k) => k === 'url' || k === 'id');
  return extensions.some(empty) ? extensions.filter((e) => !empty(e)) : extensions;
}

function prunedArray(array: unknown[]): unknown[] {
  let out: unknown[] | undefined;
  for (let i = 0; i < array.length; i++) {
    const v = array[i];
    const p = pruned(v);
    if (out === undefined) {
      if (p !== undefined && p === v) continue;
      out = array.slice(0, i);
    }
    if (p !== undefined) out.push(p);
  }
  return out ?? array;
}
