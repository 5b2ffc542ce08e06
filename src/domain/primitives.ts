import * as z from 'zod';

/** A calendar date as the service and FHIR `date` both write it, a day its month has (not 1978-02-30, as HL7's are read). */
export const IsoDate = z.iso.date({ error: 'must be a date as YYYY-MM-DD' });
export type IsoDate = z.infer<typeof IsoDate>;

/** A FHIR `date`: to the year, the month or the day. */
const FHIR_DATE = /^\d{4}(-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?)?$/;

export const isFhirDate = (value: string): boolean => FHIR_DATE.test(value) && (value.length < 10 || IsoDate.safeParse(value).success);

/**
 * A date a service wrote as a date-time at midnight, as .NET writes a DateTime (2026-05-12T00:00:00)
 * and Java one with Z or an offset, or at the day's last second, as a period's end is written
 * (2026-12-31T23:59:59.999): the day it names is the day written. Any other time of day is no
 * date: which day it meant depends on a zone the service does not say.
 */
const DAY_EDGE = /^(\d{4}-\d{2}-\d{2})T(?:00:00(?::00(?:\.0+)?)?|23:59(?::59(?:\.9+)?)?)(?:Z|[+-]\d{2}:?\d{2})?$/;

/** The day a date written as a date-time at its first or last moment names; any other value as written. */
export const dayWritten = (value: string): string => DAY_EDGE.exec(value)?.[1] ?? value;

/** Whether a date-time is at its day's first or last moment: a date written with a time (dayWritten). */
export const atDayEdge = (value: string): boolean => DAY_EDGE.test(value);

/** An instant with an offset (FHIR instant, the service's timestamps). */
export const IsoInstant = z.iso.datetime({ offset: true, error: 'must be an ISO 8601 date-time with offset' });
export type IsoInstant = z.infer<typeof IsoInstant>;

export const NonEmpty = z.string().trim().min(1, { error: 'must not be empty' });

/** Control characters FHIR strings may not hold (all but tab, line feed and carriage return): a stray NUL or escape. */
const CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/;
const CONTROLS = new RegExp(CONTROL.source, 'g');

/** The text without the control characters FHIR strings may not hold. */
export function withoutControlCharacters(text: string): string {
  return CONTROL.test(text) ? text.replace(CONTROLS, '') : text;
}

/** National Provider Identifier: ten digits, the last a Luhn check digit over the 80840 prefix. */
export const Npi = z
  .string()
  .regex(/^\d{10}$/, { error: 'must be 10 digits' })
  .refine(isValidNpi, { error: 'fails the NPI check digit' });

export function isValidNpi(npi: string): boolean {
  if (!/^\d{10}$/.test(npi)) return false;
  const digits = `80840${npi}`;
  let sum = 0;
  for (let i = digits.length - 1, double = false; i >= 0; i--, double = !double) {
    let d = digits.charCodeAt(i) - 48;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return sum % 10 === 0;
}
