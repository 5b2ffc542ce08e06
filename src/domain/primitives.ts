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
