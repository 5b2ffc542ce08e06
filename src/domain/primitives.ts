import * as z from 'zod';

/** A calendar date as the service and FHIR `date` both write it. */
export const IsoDate = z
  .string()
  .regex(/^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/, { error: 'must be a date as YYYY-MM-DD' });
export type IsoDate = z.infer<typeof IsoDate>;

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
