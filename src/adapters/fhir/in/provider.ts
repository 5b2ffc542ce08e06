import { isValidNpi, type Provider } from '../../../domain';
import type { FhirIssue } from '../operation-outcome';
import { systemUrl } from '../systems';
import { identifierType, personName } from './person';
import type { Practitioner } from './shapes';

/**
 * The treating provider: NPI (us-npi, check digit verified), tax id (IRS EIN/TIN or type TAX) and
 * name. The payer needs no NPI to answer, so an invalid one is left out with a warning, not an error.
 */
export function providerOf(practitioner: Practitioner, path: string, dateOfService: string | undefined, timeZone: string | undefined, warnings: FhirIssue[]): Provider {
  const ids = practitioner.identifier ?? [];
  const written = ids.find((i) => i.system === systemUrl('npi'))?.value?.trim();
  const npi = written !== undefined && isValidNpi(written) ? written : undefined;
  if (written !== undefined && npi === undefined) {
    warnings.push({
      expression: `${path}.identifier`,
      diagnostics: 'the us-npi identifier is not a valid NPI (10 digits with a check digit): verified without it',
      code: 'value',
      severity: 'warning',
    });
  }
  const taxId = ids.find((i) => i.system === systemUrl('taxId') || identifierType(i) === 'TAX')?.value?.trim();
  const name = practitioner.name?.length ? personName(practitioner.name, path, [], dateOfService, timeZone) : undefined;
  return { npi, taxId, firstName: name?.firstName, lastName: name?.lastName };
}
