import type { ContactPoint, Reference } from 'fhir/r4';
import { FhirInputError } from '../operation-outcome';
import { payerIdSystem } from '../in/payer';
import { extension } from './extensions';
import { defined, present } from './values';

/**
 * A relative reference `Type/id` given by the caller, or the `urn:uuid:` of a resource created in
 * the same transaction (the server rewrites it to the new id); `field` names the option in errors.
 */
export function relativeReference(type: string, value: string, field: string): Reference {
  if (URN_UUID.test(value)) return { reference: value };
  if (!referencePattern(type).test(value)) {
    throw new FhirInputError([{ expression: field, diagnostics: `must be a reference ${type}/<id>`, code: 'value' }]);
  }
  return { reference: value };
}

const patterns = new Map<string, RegExp>();
function referencePattern(type: string): RegExp {
  let pattern = patterns.get(type);
  if (!pattern) patterns.set(type, (pattern = new RegExp(`^${type}/[A-Za-z0-9\\-.]{1,64}$`)));
  return pattern;
}

const URN_UUID = /^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** The request a response answers: `CoverageEligibilityRequest/id`, or the `urn:uuid:` of a request written in the same transaction. */
export function requestReference(value: string): Reference {
  return relativeReference('CoverageEligibilityRequest', value, 'request');
}

export interface PayerNames {
  name?: string | null | undefined;
  id?: string | null | undefined;
  phone?: string | null | undefined;
}

/**
 * The insurer: the chart's Organization when given, else a logical reference by payer id and
 * name. Either way it carries the payer id, name and phone the result states.
 */
export function insurerReference(insurer: string | undefined, payer: PayerNames): Reference {
  if (!insurer && !present(payer.name) && !present(payer.id)) {
    throw new FhirInputError([{ expression: 'insurer', diagnostics: 'the result names no payer: give an Organization reference', code: 'required' }]);
  }
  return {
    ...(insurer ? relativeReference('Organization', insurer, 'insurer') : { type: 'Organization' }),
    identifier: payer.id ? { system: payerIdSystem(), value: payer.id } : undefined,
    display: payer.name ?? undefined,
    extension: defined([payer.phone ? extension('payer-phone', { valueContactPoint: phone(payer.phone) }) : undefined]),
  };
}

const phone = (value: string): ContactPoint => ({ system: 'phone', value });
