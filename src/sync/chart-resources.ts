import { createHash } from 'node:crypto';
import type { Coverage, CoverageClass, Extension, Identifier as FhirIdentifier, Organization, Patient, Reference } from 'fhir/r4';
import { samePeriod, type EligibilityCheck, type Identifier, type PlanPeriod } from '../domain';
import { dayInPlan } from '../adapters/hl7';
import { payerIdSystem } from '../adapters/fhir/in/payer';
import { extensionUrl } from '../adapters/fhir/out/extensions';
import { prune } from '../adapters/fhir/out/values';
import { systemUrl } from '../adapters/fhir/systems';
import { ChartWriteError } from './chart-errors';
import { sameContent } from './same-content';

/**
 * The chart resources an HL7-sourced check is written against, which an HL7 feed does not give
 * as FHIR references: the insurer Organization, the Patient and the Coverage. Each is found by an
 * identifier (the search condition) or created from the check. Pure: the writer does the I/O.
 */
export type ChartPartKind = 'insurer' | 'patient' | 'coverage';

export interface ChartPart {
  kind: ChartPartKind;
  resourceType: 'Organization' | 'Patient' | 'Coverage';
  /** The search that finds it, e.g. `identifier=<system>|<value>`; also the transaction's ifNoneExist. */
  condition: string;
  /** A Patient or Coverage this plugin may have written under an identifier it no longer gives: found by that one when not by the condition, it is given the current one. */
  rekey?: Rekey;
}

type SystemAndValue = { system: string; value: string };
/** An identifier of this plugin's, as it was written and as it is now. */
export type Rekey = { from: SystemAndValue; to: SystemAndValue };

export const US_CORE_COVERAGE = 'http://hl7.org/fhir/us/core/StructureDefinition/us-core-coverage';
const ORDER = { primary: 1, secondary: 2, tertiary: 3 } as const;

/** The payer as the request names it: the payer network's when resolved, else as the PMS wrote it. */
export function payerOf(check: EligibilityCheck): { id?: string | undefined; name?: string | undefined } {
  const resolved = check.coverage.resolution?.status === 'resolved' ? check.coverage.resolution : undefined;
  return resolved ? { id: resolved.commonPayerId, name: resolved.name } : check.coverage.payer;
}

/**
 * What to find or create for an HL7 check: the Patient and Coverage always, the insurer when the
 * payer has an id (a payer known only by name stays a logical reference by name, since a name
 * search matches by prefix and could find another payer).
 */
export function chartParts(check: EligibilityCheck): ChartPart[] {
  const payerId = payerOf(check).id;
  const patient = patientIdentifier(check);
  const coverage = { system: systemUrl('chartCoverage'), value: coverageKey(check, patient) };
  const former = formerPatientSystem(check, patient.system);
  return [
    ...(payerId ? [{ kind: 'insurer' as const, resourceType: 'Organization' as const, condition: identifierCondition(payerIdSystem(), payerId) }] : []),
    {
      kind: 'patient',
      resourceType: 'Patient',
      condition: identifierCondition(patient.system, patient.value),
      ...(former ? { rekey: { from: { system: former, value: patient.value }, to: patient } } : {}),
    },
    {
      kind: 'coverage',
      resourceType: 'Coverage',
      condition: identifierCondition(coverage.system, coverage.value),
      ...(former ? { rekey: { from: { ...coverage, value: coverageKey(check, { ...patient, system: former }) }, to: coverage } } : {}),
    },
  ];
}

export function identifierCondition(system: string, value: string): string {
  return `identifier=${encodeURIComponent(searchEscaped(system))}|${encodeURIComponent(searchEscaped(value))}`;
}

/**
 * A token as FHIR search reads it literally: a comma would make an identifier `MP,10045` a search
 * for either part (finding another patient's `10045`), and `|` or `$` would split it, so each is
 * escaped with a backslash, as is the backslash itself.
 */
const searchEscaped = (token: string) => token.replace(/[\\,$|]/g, (c) => `\\${c}`);

export function insurerResource(check: EligibilityCheck): Organization {
  const payer = payerOf(check);
  return {
    resourceType: 'Organization',
    active: true,
    ...(payer.id ? { identifier: [{ system: payerIdSystem(), value: payer.id }] } : {}),
    type: [{ coding: [{ system: 'http://terminology.hl7.org/CodeSystem/organization-type', code: 'ins', display: 'Insurance Company' }] }],
    ...(payer.name ? { name: payer.name } : {}),
  };
}

export function patientResource(check: EligibilityCheck): Patient {
  const { patient } = check;
  return {
    resourceType: 'Patient',
    identifier: patient.identifiers.map((i) => fhirIdentifier(check, i)),
    name: [{ family: patient.lastName, given: [patient.firstName, ...(patient.middleName ? [patient.middleName] : [])] }],
    birthDate: patient.birthDate,
    ...(patient.gender ? { gender: patient.gender } : {}),
    extension: [{ url: extensionUrl('patient-stated-at'), valueInstant: check.source.receivedAt }],
  };
}

/**
 * A Patient this plugin created, with the name, birth date and gender a message received later
 * states brought up to date (a spelling or birth date the front desk corrected). The PMS's name is
 * the first; the rest (a name the EHR added, telecom, address) is kept, and so are the identifiers
 * (the Patient is found by the first; adding each one a message names would pile up every number
 * a PMS ever sent). Undefined when nothing differs, when it holds a later message's statement, or
 * when it is not this plugin's: a Patient without `patient-stated-at` is the EHR's own (or written
 * before the stamp was), and the EHR keeps its demographics.
 */
export function updatedPatient(stored: Patient, fresh: Patient): Patient | undefined {
  const storedAt = statedAt(stored, 'patient-stated-at');
  const freshAt = statedAt(fresh, 'patient-stated-at');
  if (!storedAt || !freshAt || Date.parse(storedAt) >= Date.parse(freshAt)) return undefined;
  const updated: Patient = {
    ...stored,
    name: [...(fresh.name ?? []), ...(stored.name ?? []).slice(1)],
    ...(fresh.birthDate ? { birthDate: fresh.birthDate } : {}),
    ...(fresh.gender ? { gender: fresh.gender } : {}),
  };
  // A later message stating the same is no new version of the Patient.
  return sameContent(updated, stored) ? undefined : restamped(updated, fresh, 'patient-stated-at');
}

/**
 * A US Core Coverage: the member id as subscriberId and as the identifier typed MB (the
 * patient's own number where the plan issued one), the beneficiary, the relationship, the payor,
 * the plan's dates, the order. It also carries a key identifier of this plugin (patient, payer and member id,
 * hashed), because a member id alone is shared by every dependant on the subscriber's plan.
 */
export function coverageResource(check: EligibilityCheck, refs: { patient: string; insurer: Reference }): Coverage {
  const { subscriber, coverage } = check;
  // Pruned as the pair is: the insurer's reference comes with an empty extension list when the payer has no phone.
  return prune({
    resourceType: 'Coverage',
    meta: { profile: [US_CORE_COVERAGE] },
    identifier: [
      { type: { coding: [{ system: systemUrl('identifierType'), code: 'MB' }] }, value: check.patient.memberId ?? subscriber.memberId },
      { system: systemUrl('chartCoverage'), value: coverageKey(check, patientIdentifier(check)) },
    ],
    status: 'active',
    ...(subscriber.relationship === 'self' ? { subscriber: { reference: refs.patient } } : {}),
    subscriberId: subscriber.memberId,
    beneficiary: { reference: refs.patient },
    relationship: { coding: [{ system: systemUrl('subscriberRelationship'), code: subscriber.relationship }] },
    payor: [refs.insurer],
    ...(coverage.groupNumber
      ? { class: [{ type: { coding: [{ system: systemUrl('coverageClass'), code: 'group' }] }, value: coverage.groupNumber, ...(coverage.groupName ? { name: coverage.groupName } : {}) }] }
      : {}),
    ...(coverage.period && { period: coverage.period }),
    order: ORDER[coverage.order],
    extension: [{ url: extensionUrl('coverage-stated-at'), valueInstant: check.source.receivedAt }],
  });
}

/**
 * The Coverage the chart holds, with what the check states of it brought up to date: a change of
 * coordination of benefits (primary turned secondary), group, relationship, member number or plan
 * dates sent by the PMS since the Coverage was written. Undefined when the check states nothing new, or
 * when the Coverage holds what a message received later stated (a check's result can arrive
 * hours after a newer message's, and must not turn the order back). What the check does not state
 * (a period when the PMS never sent dates, the status, the EHR's own identifiers, classes and extensions) is kept, and so is a subscriber
 * the EHR named for a dependant; the patient as subscriber is not, once no longer the subscriber.
 * Dates the PMS deleted (`datesDeleted`, HL7's null) take the period away.
 */
export function updatedCoverage(stored: Coverage, fresh: Coverage, datesDeleted = false): Coverage | undefined {
  const storedAt = statedAt(stored, 'coverage-stated-at');
  const freshAt = statedAt(fresh, 'coverage-stated-at');
  if (storedAt && freshAt && Date.parse(storedAt) >= Date.parse(freshAt)) return undefined;
  const { subscriber: storedSubscriber, period: storedPeriod, ...kept } = stored;
  const period = fresh.period ?? (datesDeleted ? undefined : storedPeriod);
  // Ended by this plugin when the PMS stopped sending its member id, and stated again since: active again.
  const ended = (e: Extension) => e.url === extensionUrl('coverage-ended');
  const endedAt = stored.status === 'cancelled' ? stored.extension?.find(ended)?.valueInstant : undefined;
  const reopened = endedAt !== undefined && freshAt !== undefined && Date.parse(freshAt) > Date.parse(endedAt);
  const subscriber = fresh.subscriber ?? (storedSubscriber?.reference === fresh.beneficiary.reference ? undefined : storedSubscriber);
  const identifier = replaced(stored.identifier, fresh.identifier, isMemberNumber);
  const classes = replaced(stored.class, fresh.class, isGroup);
  const updated: Coverage = {
    ...kept,
    ...(reopened && { status: 'active' as const, extension: stored.extension?.filter((e) => !ended(e)) }),
    ...(identifier ? { identifier } : {}),
    ...(subscriber ? { subscriber } : {}),
    subscriberId: fresh.subscriberId,
    relationship: fresh.relationship,
    payor: fresh.payor,
    ...(classes ? { class: classes } : {}),
    ...(period && { period }),
    order: fresh.order,
  };
  // When the message was received matters only with something it changed: bumping it alone would be a new version of the Coverage per check.
  // A Coverage written before it carried one takes it once, or an older message's late result would still turn it back.
  if (storedAt && sameContent(updated, stored)) return undefined;
  return restamped(updated, fresh, 'coverage-stated-at');
}

/**
 * A Coverage this plugin wrote for the patient, ended (status cancelled) because the PMS no longer
 * sends it: its member number is none the patient is insured under now (`insuredUnder`, the
 * subscriber member ids of the patient's record), as after a corrected member id or a change of
 * plan, which the check being written is the Coverage of; or it is the check's member number under
 * another payer, which the record names only for the check's plan (an employer that changed
 * carriers, the member number being the employee's). Undefined for anything else: a Coverage the
 * EHR made (no key of this plugin), one not active (the EHR's own call), the check's own, one under
 * a member id the patient still has, or one a message received after the check's stated.
 */
export function endedCoverage(stored: Coverage, check: EligibilityCheck, insuredUnder: readonly string[]): Coverage | undefined {
  const key = stored.identifier?.find((i) => i.system === systemUrl('chartCoverage'))?.value;
  const memberId = stored.subscriberId;
  if (stored.status !== 'active' || key === undefined || memberId === undefined || ownCoverageKeys(check).includes(key)) return undefined;
  const stillNamed = insuredUnder.filter((m) => m === memberId).length - (memberId === check.subscriber.memberId ? 1 : 0);
  if (stillNamed > 0) return undefined;
  return droppedCoverage(stored, check.source.receivedAt);
}

/**
 * Whether the check's plan, by the dates it carries, is in force on its visit: one the PMS ended
 * before the visit (or begins after it), withdrawn for that, has its Coverage dated rather than cancelled.
 */
export function planHoldsVisit(check: { dateOfService: string; coverage: { period?: PlanPeriod | undefined } }): boolean {
  return dayInPlan(check.coverage, check.dateOfService) === 'within';
}

/** Why a check's Coverage is ending, for a person: its plan dropped, or its dates moved off the visit. */
export function whyEnding(check: EligibilityCheck): string {
  return planHoldsVisit(check) ? 'the PMS no longer sends this plan' : "the plan's dates no longer hold the visit";
}

/**
 * The check's Coverage once its plan no longer serves the check's visit, as a message received at
 * `at` says: cancelled when the PMS no longer sends the plan (droppedCoverage), else given the
 * plan's dates as the check now carries them (the plan ended early: the Coverage stays the
 * patient's, for the days it was in force). Undefined when there is nothing to change.
 */
export function closedCoverage(stored: Coverage, check: EligibilityCheck, at: string): Coverage | undefined {
  if (planHoldsVisit(check)) return droppedCoverage(stored, at);
  const storedAt = statedAt(stored, 'coverage-stated-at');
  const period = check.coverage.period;
  if ((storedAt && Date.parse(storedAt) > Date.parse(at)) || samePeriod(stored.period, period)) return undefined;
  const dated: Coverage = { ...stored, ...(period && { period }) };
  return restamped(dated, { ...dated, extension: [{ url: extensionUrl('coverage-stated-at'), valueInstant: at }] }, 'coverage-stated-at');
}

/**
 * A Coverage this plugin wrote, ended (status cancelled) because a message received at `droppedAt`
 * no longer names its plan. Undefined for one not active (ended already, or the EHR's own call),
 * or one a message received after that stated.
 */
export function droppedCoverage(stored: Coverage, droppedAt: string): Coverage | undefined {
  if (stored.status !== 'active') return undefined;
  const storedAt = statedAt(stored, 'coverage-stated-at');
  if (storedAt && Date.parse(storedAt) > Date.parse(droppedAt)) return undefined;
  // Marked as this plugin's doing: a later message stating the plan again makes it active again (updatedCoverage).
  return { ...stored, status: 'cancelled', extension: [...(stored.extension ?? []), { url: extensionUrl('coverage-ended'), valueInstant: droppedAt }] };
}

/** Whether the patient is known by an identifier every sender shares (an OID or URI authority): one sender's record says nothing of another's plans. */
export function sharedPatient(check: { patient: { identifiers: readonly Pick<Identifier, 'system'>[] } }): boolean {
  return globalSystem(firstIdentifier(check).system) !== undefined;
}

/**
 * A Patient or Coverage found by the identifier this plugin gave it before (Rekey), with the
 * current one in its place: once one facility's message has taken it, another facility's
 * patient with the same number is no longer found by it. Undefined when it has the current one.
 */
export function rekeyed<T extends Patient | Coverage>(stored: T, rekey: Rekey): T | undefined {
  const is = (i: FhirIdentifier, id: SystemAndValue) => i.system === id.system && i.value === id.value;
  const identifiers = stored.identifier ?? [];
  if (!identifiers.some((i) => is(i, rekey.from))) return undefined;
  return { ...stored, identifier: identifiers.filter((i) => !is(i, rekey.to)).map((i) => (is(i, rekey.from) ? { ...i, ...rekey.to } : i)) };
}

/** A rekeyed Coverage moved to the Patient the check is written against (another facility's patient gets its own): its beneficiary, and a self subscriber with it. */
export function forBeneficiary(stored: Coverage, beneficiary: Reference): Coverage {
  if (stored.beneficiary.reference === beneficiary.reference) return stored;
  const self = stored.subscriber?.reference === stored.beneficiary.reference;
  return { ...stored, beneficiary, ...(self ? { subscriber: beneficiary } : {}) };
}

type StatedAt = 'coverage-stated-at' | 'patient-stated-at';
const statedAt = (resource: Coverage | Patient, key: StatedAt) => resource.extension?.find((e) => e.url === extensionUrl(key))?.valueInstant;

/**
 * The update with the fresh resource's stamp of when its message was received, and without a
 * narrative generated from the data (or its extensions), which would describe what changed as it
 * was: the server makes it again. A narrative a person wrote stays.
 */
function restamped<T extends Coverage | Patient>(updated: T, fresh: T, key: StatedAt): T {
  const extension = replaced(updated.extension, fresh.extension, (e: Extension) => e.url === extensionUrl(key));
  const { text, ...rest } = { ...updated, ...(extension ? { extension } : {}) };
  return (text?.status === 'generated' || text?.status === 'extensions' ? rest : { ...rest, ...(text ? { text } : {}) }) as T;
}

const isMemberNumber = (i: FhirIdentifier) => !i.system && i.type?.coding?.some((c) => c.code === 'MB') === true;
const isGroup = (c: CoverageClass) => c.type.coding?.some((t) => t.system === systemUrl('coverageClass') && t.code === 'group') === true;

/** `stored` with the entries `which` picks replaced by those `fresh` has; unchanged when `fresh` has none. */
function replaced<T>(stored: T[] | undefined, fresh: T[] | undefined, which: (item: T) => boolean): T[] | undefined {
  const ours = (fresh ?? []).filter(which);
  return ours.length === 0 ? stored : [...ours, ...(stored ?? []).filter((item) => !which(item))];
}

/**
 * The appointment the verification was for. The check knows only its id and date, not its
 * times, and R4 requires start and end on a booked Appointment (app-3): so it is linked, not
 * created, by a logical reference an EHR holding that appointment can resolve.
 */
export function appointmentReference(check: EligibilityCheck): Reference | undefined {
  const { source } = check;
  if (source.kind === 'fhir') return source.appointment ? { reference: source.appointment } : undefined;
  if (!source.appointmentId) return undefined;
  return { type: 'Appointment', identifier: { system: scoped('hl7AppointmentId', ...hl7Scope(check, undefined, 'Appointment.identifier')), value: source.appointmentId } };
}

/** The identifier the Patient is found by: the check's first, as its idempotency key uses it. */
function patientIdentifier(check: EligibilityCheck): SystemAndValue {
  const { system, value } = fhirIdentifier(check, firstIdentifier(check));
  return { system: system ?? '', value: value ?? '' };
}

function firstIdentifier<T extends Pick<Identifier, 'system'>>(check: { patient: { identifiers: readonly T[] } }): T {
  const first = check.patient.identifiers[0];
  if (!first) throw new ChartWriteError('Patient.identifier: the check carries no patient identifier to find the chart\'s Patient by', { retryable: false });
  return first;
}

/**
 * An HL7 identifier as FHIR. An assigning authority written as a URI or an OID is the system.
 * Any other is a namespace (MOLARPMS) that names a PMS product more often than one installation
 * of it, and two practices running it number their patients apart: it scopes a system of this
 * plugin under the sending facility (else application), as the job store keys a patient. Without
 * an authority, the facility alone. Only what every message of the sender states the same way
 * goes in: an identity that moved with an optional component would split one patient in two.
 */
function fhirIdentifier(check: EligibilityCheck, identifier: Identifier): FhirIdentifier {
  return {
    ...(identifier.type ? { type: { coding: [{ system: systemUrl('identifierType'), code: identifier.type }] } } : {}),
    system: globalSystem(identifier.system) ?? scoped('hl7PatientId', ...hl7Scope(check, identifier.system, 'Patient.identifier')),
    value: identifier.value,
  };
}

/**
 * The system a namespace alone scoped before the sending facility did too, where that differs:
 * what this plugin wrote then is still found, and takes the current identifier.
 */
function formerPatientSystem(check: EligibilityCheck, current: string): string | undefined {
  const namespace = firstIdentifier(check).system?.trim();
  if (!namespace || globalSystem(namespace)) return undefined;
  const former = scoped('hl7PatientId', namespace);
  return former === current ? undefined : former;
}

/** An authority written as a URI or an OID names its system everywhere. */
function globalSystem(authority: string | undefined): string | undefined {
  const trimmed = authority?.trim();
  if (!trimmed) return undefined;
  if (/^(urn:|https?:\/\/)/i.test(trimmed)) return trimmed;
  return /^\d+(\.\d+)+$/.test(trimmed) ? `urn:oid:${trimmed}` : undefined;
}

/** Where an HL7 identifier was assigned: the sending facility (else application), then the namespace within it. */
function hl7Scope(check: EligibilityCheck, namespace: string | undefined, element: string): string[] {
  const source = check.source.kind === 'hl7' ? check.source : undefined;
  const sender = source?.sendingFacility || source?.sendingApplication;
  const scope = [sender, namespace?.trim()].filter((part): part is string => Boolean(part));
  if (scope.length === 0) throw new ChartWriteError(`${element}: the HL7 message names no assigning authority, facility or application to scope it by`, { retryable: false });
  return scope;
}

const scoped = (key: 'hl7PatientId' | 'hl7AppointmentId', ...scope: string[]) => [systemUrl(key), ...scope.map(encodeURIComponent)].join('/');

/** The keys the check's own Coverage is found under: the current one, and the one a rekey moves it from. */
function ownCoverageKeys(check: EligibilityCheck): string[] {
  const patient = patientIdentifier(check);
  const former = formerPatientSystem(check, patient.system);
  return [coverageKey(check, patient), ...(former ? [coverageKey(check, { ...patient, system: former })] : [])];
}

/** Hashes the patient's identifier, the payer and the member id. */
function coverageKey(check: EligibilityCheck, patient: SystemAndValue): string {
  const payer = payerOf(check);
  const parts = [patient.system, patient.value, payer.id ?? payer.name?.toUpperCase() ?? '', check.subscriber.memberId];
  return `cov_${createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, 32)}`;
}
