import { Gender, IsoDate, type Identifier } from '../../../domain';
import type { FhirIssue } from '../operation-outcome';
import { systemUrl } from '../systems';
import { dayInPeriod } from './period';
import type { HumanName, Identifier as FhirIdentifier } from './shapes';

export interface PersonName {
  firstName: string;
  middleName: string | undefined;
  lastName: string;
}

const NAME_PREFERENCE = ['official', 'usual', undefined, 'nickname', 'anonymous', 'temp', 'maiden'];

/**
 * The name to verify with, among those in force on the date of service (never an `old` name, nor
 * one whose period ended before that day or starts after it; with no date, every period counts):
 * official, else usual, else one with no use, else the first. The first given name is the first
 * name, the rest the middle name. A bound written as an instant is dated in the clinic's `timeZone`, as the visit is (dayInPeriod).
 */
export function personName(names: HumanName[] | undefined, path: string, issues: FhirIssue[], dateOfService: string | undefined, timeZone: string | undefined): PersonName | undefined {
  const current = (names ?? []).filter(
    (n, i) => n.use !== 'old' && (dateOfService === undefined || dayInPeriod(n.period, dateOfService, `${path}.name[${i}].period`, issues, timeZone) === 'within'),
  );
  const name = NAME_PREFERENCE.map((use) => current.find((n) => n.use === use)).find(Boolean) ?? current[0];
  if (!name) {
    // A name that is there but not in force is another fix for the sender than a name left out.
    const diagnostics = names?.length
      ? 'required: a name in force on the date of service (each given is old, ended or not yet started)'
      : 'required: a current name with family and given';
    issues.push({ expression: `${path}.name`, diagnostics, code: 'required' });
    return undefined;
  }
  const given = (name.given ?? []).map((g) => g.trim()).filter(Boolean);
  const family = name.family?.trim();
  if (!family) issues.push({ expression: `${path}.name.family`, diagnostics: 'required', code: 'required' });
  if (given.length === 0) issues.push({ expression: `${path}.name.given`, diagnostics: 'required', code: 'required' });
  if (!family || given.length === 0) return undefined;
  const [firstName, ...middle] = given as [string, ...string[]];
  return { firstName, middleName: middle.length > 0 ? middle.join(' ') : undefined, lastName: family };
}

/**
 * A full date; FHIR allows YYYY and YYYY-MM, which cannot identify a member. One after the date of
 * service is a mistyped year: sent, it spends a verification on a member the portal cannot find.
 */
export function birthDate(value: string | undefined, path: string, issues: FhirIssue[], required: boolean, dateOfService: string | undefined): string | undefined {
  if (value === undefined) {
    if (required) issues.push({ expression: path, diagnostics: 'required', code: 'required' });
    return undefined;
  }
  if (!IsoDate.safeParse(value).success) {
    // 1978-02-30 reached the service, verified as a birth date no payer holds: HL7's PID-7 was refused so.
    const diagnostics = /^\d{4}-\d{2}-\d{2}$/.test(value) ? 'must be a day the calendar has (YYYY-MM-DD)' : 'must be a full date (YYYY-MM-DD)';
    issues.push({ expression: path, diagnostics, code: 'value' });
    return undefined;
  }
  if (dateOfService !== undefined && value > dateOfService) {
    issues.push({ expression: path, diagnostics: `is after the date of service, ${dateOfService}`, code: 'value' });
    return undefined;
  }
  return value;
}

/** FHIR administrative-gender codes are the hub's own. */
export function gender(value: string | undefined, path: string, issues: FhirIssue[]): Gender | undefined {
  if (value === undefined) return undefined;
  const parsed = Gender.safeParse(value);
  if (!parsed.success) {
    issues.push({ expression: path, diagnostics: `must be one of ${Gender.options.join(', ')}`, code: 'code-invalid' });
    return undefined;
  }
  return parsed.data;
}

/** Identifiers with a value, typed by their v2-0203 code when they carry one. */
export function identifiers(list: FhirIdentifier[] | undefined): Identifier[] {
  return (list ?? []).flatMap((i) => {
    const value = i.value?.trim();
    return value && i.use !== 'old' ? [{ system: i.system, type: identifierType(i), value }] : [];
  });
}

export function identifierType(identifier: FhirIdentifier): string | undefined {
  const codings = identifier.type?.coding ?? [];
  return (codings.find((c) => c.system === systemUrl('identifierType')) ?? codings[0])?.code;
}
