import type { CoverageEligibilityResponseInsuranceItem as Item } from 'fhir/r4';
import type { VerificationProvider } from '../../../verification/wire';
import { systemUrl } from '../systems';
import { categoryConcept, mappedConcept } from './codes';
import type { ResponseParts } from './parts';
import { address, humanName, present } from './values';

/**
 * The provider the verification was run for, as a contained Practitioner (name, address, tax
 * id), and one item saying whether the payer counts that provider in or out of network.
 */
export function providerItem(p: VerificationProvider, parts: ResponseParts): Item {
  const name = humanName(p.firstName, p.middleName, p.lastName);
  const postal = address(p.address);
  // A blank tax id names nothing: an identifier of a system alone is not written.
  const taxId = present(p.taxId);
  const provider = parts.contain({
    resourceType: 'Practitioner',
    id: 'verification-provider',
    name: name ? [name] : undefined,
    address: postal ? [postal] : undefined,
    identifier: taxId
      ? [{ type: { coding: [{ system: systemUrl('identifierType'), code: 'TAX', display: 'Tax ID number' }] }, system: systemUrl('taxId'), value: taxId }]
      : undefined,
  });
  return {
    category: categoryConcept(undefined),
    name: 'Provider participation',
    provider,
    network: mappedConcept('participation', p.participation?.status),
  };
}
