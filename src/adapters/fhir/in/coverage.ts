import { CoverageOrder, type PayerAsNamed, type Relationship, type Subscriber } from '../../../domain';
import type { FhirIssue } from '../operation-outcome';
import { systemUrl } from '../systems';
import { FHIR_ID, type AnyResource, type BundleIndex } from './bundle-index';
import { payerAsNamed } from './payer';
import { birthDate, identifierType, personName, type PersonName } from './person';
import { relationshipOf } from './relationship';
import { Coverage, Organization, parseResource, Patient, Reference, RelatedPerson, type Identifier } from './shapes';

export interface ActiveCoverage {
  raw: AnyResource;
  coverage: Coverage;
}

/**
 * The patient's coverages to verify: status active, not self-pay, ordered by Coverage.order
 * (absent order after the ordered ones, then in Bundle order).
 */
export function activeCoverages(index: BundleIndex, patient: AnyResource, issues: FhirIssue[]): ActiveCoverage[] {
  const found: ActiveCoverage[] = [];
  for (const raw of index.ofType('Coverage')) {
    // Another patient's coverage is none of our business, even when it is malformed.
    const beneficiary = Reference.safeParse(raw.beneficiary);
    if (!beneficiary.success) continue;
    const resolved = index.resolve(beneficiary.data, ['Patient'], raw);
    if (resolved.kind !== 'found' || resolved.resource !== patient) continue;
    const coverage = parseResource(Coverage, raw, index.entryPath(raw), issues);
    if (!coverage || coverage.status !== 'active' || isSelfPay(coverage)) continue;
    found.push({ raw, coverage });
  }
  const rank = (c: ActiveCoverage) => c.coverage.order ?? Number.POSITIVE_INFINITY;
  return found.sort((a, b) => rank(a) - rank(b));
}

function isSelfPay(coverage: Coverage): boolean {
  return (coverage.type?.coding ?? []).some((c) => c.system === systemUrl('coverageSelfPay') && c.code === 'pay');
}

const ORDERS = CoverageOrder.options;

/**
 * Coverage.order ranks the coverages; a coverage without one takes the lowest rank no other
 * claims. The ranks then name positions, as HL7's IN1-22 is read: orders 1 and 3 are primary and
 * secondary. Duplicate orders and a fourth coverage are errors, not guesses.
 */
export function coverageOrders(coverages: ActiveCoverage[], issues: FhirIssue[]): Array<CoverageOrder | undefined> {
  const claimed = new Set<number>();
  const ranks = coverages.map(({ coverage }, i): number | undefined => {
    const order = coverage.order;
    if (order === undefined) return undefined;
    if (!Number.isInteger(order) || order < 1) {
      issues.push({ expression: `Coverage[${i}].order`, diagnostics: 'must be a positive whole number', code: 'value' });
      return undefined;
    }
    if (claimed.has(order)) {
      issues.push({ expression: `Coverage[${i}].order`, diagnostics: `another active coverage of this patient has order ${order}`, code: 'business-rule' });
      return undefined;
    }
    claimed.add(order);
    return order;
  });
  const filled = ranks.map((rank, i) => {
    if (rank !== undefined || coverages[i]?.coverage.order !== undefined) return rank;
    let free = 1;
    while (claimed.has(free)) free++;
    claimed.add(free);
    return free;
  });
  const positions = [...claimed].sort((a, b) => a - b);
  if (positions.length > ORDERS.length) {
    issues.push({ expression: 'Coverage', diagnostics: 'more than three active coverages for this patient', code: 'business-rule' });
  }
  return filled.map((rank) => (rank === undefined ? undefined : ORDERS[positions.indexOf(rank)]));
}

export interface CoverageFacts {
  payer: PayerAsNamed;
  /** The payor Organization as the chart knows it (Organization/id), when the Coverage names one it holds. */
  insurer: string | undefined;
  groupNumber: string | undefined;
  groupName: string | undefined;
  planName: string | undefined;
  subscriber: Subscriber;
  /** The beneficiary's own member id when the payer issues one apart from the subscriber's. */
  patientMemberId: string | undefined;
}

/** The appointment's patient, with the name and birth date already read (and faulted) as the patient's. */
export interface PatientAsRead {
  raw: AnyResource;
  resource: Patient;
  name: PersonName | undefined;
  birthDate: string | undefined;
}

/** What one coverage says about payer, plan and subscriber; issues name `Coverage[i]` elements. */
export function coverageFacts(
  index: BundleIndex,
  { raw, coverage }: ActiveCoverage,
  path: string,
  patient: PatientAsRead,
  dateOfService: string | undefined,
  timeZone: string | undefined,
  issues: FhirIssue[],
): CoverageFacts | undefined {
  const before = issues.length;
  const memberIdentifier = (coverage.identifier ?? []).find((i) => identifierType(i) === 'MB' && i.value?.trim())?.value?.trim();
  const memberId = coverage.subscriberId?.trim() || memberIdentifier;
  if (!memberId) issues.push({ expression: `${path}.subscriberId`, diagnostics: 'required (or an identifier typed v2-0203#MB)', code: 'required' });

  const subscriberPerson = subscriberOf(index, raw, coverage, path, patient, issues);
  const relationship = relationshipFor(coverage, path, subscriberPerson?.resource === patient.resource, issues);
  if (!coverage.subscriber && relationship && relationship !== 'self') {
    issues.push({ expression: `${path}.subscriber`, diagnostics: `required when the relationship is ${relationship}`, code: 'required' });
  }
  if (relationship === 'self' && subscriberPerson && subscriberPerson.resource !== patient.resource) {
    issues.push({ expression: `${path}.relationship`, diagnostics: 'is self, but Coverage.subscriber is another person', code: 'business-rule' });
  }
  // The patient as subscriber was read as the patient: reading them again would name each fault twice.
  const subscriberPath = `${path}.subscriber.resolve()`;
  const isPatient = subscriberPerson?.resource === patient.resource;
  const name = isPatient ? patient.name : subscriberPerson && personName(subscriberPerson.resource.name, subscriberPath, issues, dateOfService, timeZone);
  const dob = isPatient ? patient.birthDate : subscriberPerson && birthDate(subscriberPerson.resource.birthDate, `${subscriberPath}.birthDate`, issues, false, dateOfService);
  const payor = payerOf(index, raw, coverage, path, issues);

  if (issues.length > before || !name || !memberId || !relationship || !payor) return undefined;
  const group = classOf(coverage, 'group');
  return {
    payer: payor.payer,
    insurer: payor.organization?.id && FHIR_ID.test(payor.organization.id) ? `Organization/${payor.organization.id}` : undefined,
    groupNumber: group?.value?.trim() || undefined,
    groupName: group?.name?.trim() || undefined,
    planName: classOf(coverage, 'plan')?.name?.trim() || undefined,
    subscriber: { ...name, birthDate: dob, memberId, relationship },
    patientMemberId: memberIdentifier && memberIdentifier !== memberId ? memberIdentifier : undefined,
  };
}

function classOf(coverage: Coverage, type: 'group' | 'plan') {
  return (coverage.class ?? []).find((c) => (c.type?.coding ?? []).some((t) => t.system === systemUrl('coverageClass') && t.code === type));
}

/** The subscriber: Coverage.subscriber (Patient or RelatedPerson), or the patient when absent. */
function subscriberOf(
  index: BundleIndex,
  raw: AnyResource,
  coverage: Coverage,
  path: string,
  patient: { raw: AnyResource; resource: Patient },
  issues: FhirIssue[],
): { resource: Patient | RelatedPerson } | undefined {
  if (!coverage.subscriber) return { resource: patient.resource };
  const resolved = index.resolve(coverage.subscriber, ['Patient', 'RelatedPerson'], raw);
  if (resolved.kind !== 'found') {
    issues.push({ expression: `${path}.subscriber`, diagnostics: resolved.problem, code: 'not-found' });
    return undefined;
  }
  if (resolved.resource === patient.raw) return { resource: patient.resource };
  const schema = resolved.resource.resourceType === 'Patient' ? Patient : RelatedPerson;
  const person = parseResource(schema, resolved.resource, `${path}.subscriber.resolve()`, issues);
  return person ? { resource: person } : undefined;
}

function relationshipFor(coverage: Coverage, path: string, subscriberIsPatient: boolean, issues: FhirIssue[]): Relationship | undefined {
  if (!coverage.relationship) {
    if (subscriberIsPatient) return 'self';
    issues.push({ expression: `${path}.relationship`, diagnostics: 'required when the subscriber is not the patient', code: 'required' });
    return undefined;
  }
  const mapped = relationshipOf(coverage.relationship);
  if ('relationship' in mapped) return mapped.relationship;
  issues.push({ expression: `${path}.relationship`, diagnostics: `${mapped.unmapped} is not in mappings/fhir/subscriber-relationship.json`, code: 'code-invalid' });
  return undefined;
}

/**
 * The first payor that is an Organization (or a logical reference to one) names the payer; the
 * Organization, when it is an entry of the Bundle or read from the server, is the insurer the
 * chart knows.
 */
function payerOf(index: BundleIndex, raw: AnyResource, coverage: Coverage, path: string, issues: FhirIssue[]): { payer: PayerAsNamed; organization?: Organization } | undefined {
  const payors = coverage.payor ?? [];
  for (const [i, ref] of payors.entries()) {
    const resolved = index.resolve(ref, ['Organization', 'Patient', 'RelatedPerson'], raw);
    if (resolved.kind === 'found') {
      if (resolved.resource.resourceType !== 'Organization') continue;
      const org = parseResource(Organization, resolved.resource, `${path}.payor[${i}].resolve()`, issues);
      const payer = org && named(payerAsNamed(org.name, org.identifier), `${path}.payor[${i}].resolve().name`, issues);
      // One contained in the Coverage (#payer) is no resource of the chart's: nothing to reference.
      return org && payer && { payer, ...(!ref.reference?.startsWith('#') && { organization: org }) };
    }
    const logical = ref.type === undefined || ref.type === 'Organization';
    if (logical && !ref.reference && (ref.display || ref.identifier)) {
      const identifiers: Identifier[] = ref.identifier ? [ref.identifier] : [];
      const payer = named(payerAsNamed(ref.display, identifiers), `${path}.payor[${i}]`, issues);
      return payer && { payer };
    }
    issues.push({ expression: `${path}.payor[${i}]`, diagnostics: resolved.problem, code: 'not-found' });
    return undefined;
  }
  issues.push({ expression: `${path}.payor`, diagnostics: 'required: an Organization that names the payer', code: 'required' });
  return undefined;
}

function named(payer: PayerAsNamed, path: string, issues: FhirIssue[]): PayerAsNamed | undefined {
  if (payer.name || payer.id) return payer;
  issues.push({ expression: path, diagnostics: 'the payer needs a name or a payer id', code: 'required' });
  return undefined;
}
