import { isValidNpi, type Provider } from '../../../domain';
import type { FhirIssue } from '../operation-outcome';
import { systemUrl } from '../systems';
import { identifierType, personName } from './person';
import type { Practitioner } from './shapes';

/** The treating provider: NPI (us-npi, check digit verified), tax id (IRS EIN/TIN or type TAX) and name. */
export function providerOf(practitioner: Practitioner, path: string, issues: FhirIssue[]): Provider {
  const ids = practitioner.identifier ?? [];
  const npi = ids.find((i) => i.system === systemUrl('npi'))?.value?.trim();
  if (npi !== undefined && !isValidNpi(npi)) {
    issues.push({ expression: `${path}.identifier`, diagnostics: 'the us-npi identifier is not a valid NPI (10 digits with a check digit)', code: 'value' });
  }
  const taxId = ids.find((i) => i.system === systemUrl('taxId') || identifierType(i) === 'TAX')?.value?.trim();
  const name = practitioner.name?.length ? personName(practitioner.name, path, []) : undefined;
  return { npi, taxId, firstName: name?.firstName, lastName: name?.lastName };
}
