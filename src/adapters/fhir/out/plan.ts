import type { CoverageEligibilityResponseInsurance as Insurance, Extension, Reference } from 'fhir/r4';
import type { VerificationResult } from '../../../verification/wire';
import { systemUrl } from '../systems';
import { planInforce } from './codes';
import { complexExtension } from './extensions';
import type { ResponseParts } from './parts';
import { address, defined, fhirDate, humanName, present, stringValue } from './values';

type Person = NonNullable<VerificationResult['patient']>;

/**
 * Why the plan is not in force on the visit's date by the payer's own dates, when they leave the
 * date out: a portal's status is often the plan's today, and a result verified weeks ahead (or
 * reused for a later appointment) may call Active a plan that ends before the visit or has not
 * begun. R4's inforce is for the service date. A date given to the month or the year is the whole of it.
 */
export function notInForceOn(plan: VerificationResult['plan'], servicedDate: string | undefined): string | undefined {
  if (!plan || !servicedDate) return undefined;
  const effective = fhirDate(plan.effectiveDate, 'result.plan.effectiveDate');
  const termination = fhirDate(plan.terminationDate, 'result.plan.terminationDate');
  const on = `Not in force on the date of service, ${servicedDate}:`;
  if (termination && servicedDate.slice(0, termination.length) > termination) return `${on} the plan's termination date is ${termination}.`;
  if (effective && servicedDate.slice(0, effective.length) < effective) return `${on} the plan's effective date is ${effective}.`;
  return undefined;
}

/**
 * What the figures are of, when the benefit period the payer gives does not hold the visit's date: a
 * portal shows this year's maximum and deductible used and remaining, so a result verified in December
 * for a January visit reads as what is left for January, when it resets. A
 * date to the month or the year is the whole of it; a period given reversed says nothing (unmapped).
 */
export function periodMissesVisit(plan: VerificationResult['plan'], servicedDate: string | undefined): string | undefined {
  if (!plan || !servicedDate) return undefined;
  const start = fhirDate(plan.benefitPeriod?.start, 'result.plan.benefitPeriod.start');
  const end = fhirDate(plan.benefitPeriod?.end, 'result.plan.benefitPeriod.end');
  if (start && end && start > end) return undefined;
  const after = end !== undefined && servicedDate.slice(0, end.length) > end;
  const before = start !== undefined && servicedDate.slice(0, start.length) < start;
  if (!after && !before) return undefined;
  const period = start && end ? `${start} to ${end}` : start ? `from ${start}` : `to ${end}`;
  return `The benefit period, ${period}, does not hold the date of service, ${servicedDate}: what is used and remaining is that period's.`;
}

/**
 * The insurance entry without its items: plan status as inforce (false when notInForce says why,
 * whatever the status), the benefit period, and the plan's other facts (name, type, group, raw
 * status, effective and termination dates), the assignment and the payer's view of patient and
 * subscriber in extensions.
 */
export function insuranceFor(result: VerificationResult, coverage: Reference, parts: ResponseParts, notInForce: string | undefined): Insurance {
  const plan = result.plan ?? {};
  const period = plan.benefitPeriod;
  const start = fhirDate(period?.start, 'result.plan.benefitPeriod.start');
  const end = fhirDate(period?.end, 'result.plan.benefitPeriod.end');
  const effectiveDate = fhirDate(plan.effectiveDate, 'result.plan.effectiveDate');
  const terminationDate = fhirDate(plan.terminationDate, 'result.plan.terminationDate');
  // R4 wants a Period's start no later than its end (per-1): one the portal gives reversed is kept as given, not written as a period.
  const reversed = start !== undefined && end !== undefined && start > end;
  if (reversed) parts.unmapped.push({ path: 'result.plan.benefitPeriod', value: period });
  return {
    coverage,
    inforce: notInForce ? false : planInforce(plan.status),
    benefitPeriod: (start || end) && !reversed ? { start, end } : undefined,
    extension: defined([
      complexExtension('plan', {
        name: stringValue(plan.name),
        type: stringValue(plan.type),
        groupNumber: stringValue(plan.groupNumber),
        groupName: stringValue(plan.groupName),
        status: stringValue(plan.status),
        effectiveDate: effectiveDate ? { valueDate: effectiveDate } : undefined,
        terminationDate: terminationDate ? { valueDate: terminationDate } : undefined,
      }),
      assignment(plan.assignment, parts),
      member('payer-patient', result.patient, 'result.patient'),
      member('payer-subscriber', result.subscriber, 'result.subscriber'),
    ]),
  };
}

/** The office and/or provider the plan assigns the member to (DHMO), as contained Location and Practitioner. */
function assignment(a: NonNullable<VerificationResult['plan']>['assignment'], parts: ResponseParts): Extension | undefined {
  if (!a) return undefined;
  // A blank name or id names nothing: an identifier of a system alone, or a Location of nothing, is not written.
  const [officeName, officeId] = [present(a.office?.name), present(a.office?.officeId)];
  const officeAddress = address(a.office?.address);
  const officeRef =
    officeName || officeId || officeAddress
      ? parts.contain(
          {
            resourceType: 'Location',
            id: 'assigned-office',
            name: officeName,
            address: officeAddress,
            identifier: officeId ? [{ system: systemUrl('clinicId'), value: officeId }] : undefined,
          },
          officeName,
        )
      : undefined;
  const providerName = humanName(present(a.provider?.firstName), undefined, present(a.provider?.lastName));
  const npi = present(a.provider?.npi);
  const providerRef =
    providerName || npi
      ? parts.contain({
          resourceType: 'Practitioner',
          id: 'assigned-provider',
          name: providerName ? [providerName] : undefined,
          identifier: npi ? [{ system: systemUrl('npi'), value: npi }] : undefined,
        })
      : undefined;
  return complexExtension('plan-assignment', {
    office: officeRef ? { valueReference: officeRef } : undefined,
    provider: providerRef ? { valueReference: providerRef } : undefined,
  });
}

/** The patient or subscriber as the payer has them on file, which may differ from the chart. */
function member(key: 'payer-patient' | 'payer-subscriber', person: Person | null | undefined, path: string): Extension | undefined {
  if (!person) return undefined;
  const name = humanName(person.firstName, undefined, person.lastName);
  const birthDate = fhirDate(person.dateOfBirth, `${path}.dateOfBirth`);
  return complexExtension(key, {
    name: name ? { valueHumanName: name } : undefined,
    birthDate: birthDate ? { valueDate: birthDate } : undefined,
    memberId: stringValue(person.memberId),
    relationship: stringValue(person.relationship),
  });
}
