import { samePeriod, type CoverageOrder, type KnownCoverage, type PlanPeriod, type Relationship, type Subscriber } from '../../domain';
import { sameText } from '../clinic-routing';
import { dayInPlan, ORDERS, planKey } from './build-checks';
import type { CodeTables } from './code-tables';
import type { PersonName } from './data-types';
import { planDayIn } from './hl7-date';
import { problemAt, warningAt, type Hl7Problem } from './hl7-errors';
import type { FieldPath } from './field-path';
import type { Hl7Message, Hl7Segment } from './hl7-message';
import type { Hl7Profile } from './profile';
import { firstValue, groupsOf, holdsAny, nulledAt, whereFound, whereMissing, type Where } from './read-fields';
import { readDate, readName, type PatientDemographics } from './read-patient';

/**
 * Insurance from IN1 groups (an IN1 and what follows it up to the next IN1: its IN2, IN3 and any
 * Z-segment), wherever they appear: the standard puts them in ADT, many dental PMSs put them in
 * SIU too.
 */
export interface InsuranceReading {
  /** Whether the message carried insurance at all (an IN1); without one the last known applies. */
  present: boolean;
  /** In coordination-of-benefits order; empty when every IN1 said self-pay. */
  coverages: KnownCoverage[];
  /** The IN1 (its sequence) each coverage was read from, in the same order. */
  sequences: number[];
  /** What the message did with each coverage's dates, in the same order: see keptPeriods. */
  datesSent: Array<Record<keyof PlanPeriod, DateSent>>;
}

/** A plan date as sent: left empty, deleted (HL7's null, ""), or given (readable or not). */
type DateSent = 'empty' | 'null' | 'given';

export function readInsurance(
  message: Hl7Message,
  profile: Hl7Profile,
  codes: CodeTables,
  patient: PatientDemographics,
  problems: Hl7Problem[],
  warnings: Hl7Problem[],
  timeZone: string | undefined,
): InsuranceReading {
  const all = groupsOf(message.segments, 'IN1');
  const empty = all.filter((group) => emptyGroup(group, profile));
  for (const group of empty) warnings.push(warningAt({ segment: 'IN1', sequence: group[0]?.sequence ?? 1, field: 3 }, 101, 'insurance group empty: taken as no insurance'));
  const groups = all.filter((group) => !empty.includes(group) && !holdsAny(group, profile.insurance.selfPay));
  const read = groups.map((group) => ({ group, coverage: readOne(group, profile, codes, patient, problems, warnings, timeZone) }));
  const declared = read.map(({ group }) => declaredOrder(group, profile));
  // Declared priorities are used only when they are complete and distinct among plans in force together
  // (this year's 1 and 2 beside next year's 1 and 2 are); otherwise IN1 order.
  const clash = (i: number, j: number) => i < j && declared[i] === declared[j] && togetherInForce(read[i]?.coverage, read[j]?.coverage);
  const useDeclared = declared.every((o) => o !== undefined) && !read.some((_, i) => read.some((_, j) => clash(i, j)));
  const ranked = once(
    read.map(({ group, coverage }, i) => ({ group, coverage, rank: (useDeclared ? declared[i] : undefined) ?? i + 1 })).sort((a, b) => a.rank - b.rank),
    warnings,
  );
  const extra = fourthAtOnce(ranked);
  if (extra) problems.push(problemAt({ segment: 'IN1', sequence: extra.group[0]?.sequence ?? ORDERS.length + 1 }, 100, 'more than three insurances in force at once'));
  // Past the third, a plan is one whose dates keep it from the others' days (next year's, sent in December): the visit's day orders those again.
  // A loop, not flatMap: on Node 20 flatMap costs half a microsecond for three plans.
  const coverages: KnownCoverage[] = [];
  const sequences: number[] = [];
  const datesSent: InsuranceReading['datesSent'] = [];
  ranked.forEach(({ group, coverage }, i) => {
    if (!coverage) return;
    const order = ORDERS[Math.min(i, ORDERS.length - 1)] as CoverageOrder;
    coverages.push({ ...coverage, coverage: { ...coverage.coverage, order } });
    sequences.push(group[0]?.sequence ?? 1);
    datesSent.push({ start: dateSent(group, profile.insurance.planEffective), end: dateSent(group, profile.insurance.planExpiration) });
  });
  return { present: all.length > 0, coverages, sequences, datesSent };
}

function dateSent(group: Hl7Segment[], paths: readonly FieldPath[]): DateSent {
  return firstValue(group, paths) ? 'given' : nulledAt(group, paths) ? 'null' : 'empty';
}

/**
 * The message's plans with the dates HL7 says it leaves as they were: a date field left empty
 * changes nothing, so a plan on file (the same payer and member id, listed once there and here)
 * keeps that date, while one sent as "" (HL7's null) is deleted (and one that cannot be read is
 * none, as readPeriod says). A kept date that would end the plan before the message's other date
 * begins it is not kept: a new start after the old end is a renewed plan. A plan left with no date
 * by a deletion carries an empty period, which clears the chart Coverage's (undefined: no dates
 * stated, and the Coverage's period is left alone).
 */
export function keptPeriods(reading: InsuranceReading, known: readonly KnownCoverage[]): KnownCoverage[] {
  const once = (plans: readonly KnownCoverage[], plan: string) => plans.filter((other) => planKey(other) === plan).length === 1;
  return reading.coverages.map((coverage, i) => {
    const sent = reading.datesSent[i] ?? { start: 'empty', end: 'empty' };
    const plan = planKey(coverage);
    const before = once(reading.coverages, plan) && once(known, plan) ? known.find((other) => planKey(other) === plan)?.period : undefined;
    const stated = coverage.period ?? {};
    let start = stated.start ?? (sent.start === 'empty' ? before?.start : undefined);
    let end = stated.end ?? (sent.end === 'empty' ? before?.end : undefined);
    if (start !== undefined && end !== undefined && start > end) {
      if (stated.start === undefined) start = undefined;
      else if (stated.end === undefined) end = undefined;
    }
    if (start === undefined && end === undefined) {
      return sent.start === 'null' || sent.end === 'null' ? { ...coverage, period: {} } : coverage;
    }
    const period: PlanPeriod = {};
    if (start !== undefined) period.start = start;
    if (end !== undefined) period.end = end;
    return samePeriod(period, coverage.period) ? coverage : { ...coverage, period };
  });
}

/**
 * The member ids of the plans on file that are not among `now`'s (by payer and member id): the one
 * case in which a Coverage this plugin wrote may have to end with no visit to come, and the checks
 * to look at for it, those of these member ids alone (checksOfPatient), not the patient's whole
 * history. A patient new to the store has none on file, so most bookings read no checks for it.
 */
export function droppedMemberIds(onFile: readonly KnownCoverage[] | undefined, now: readonly KnownCoverage[]): string[] {
  const listed = new Set(now.map(planKey));
  return [...new Set((onFile ?? []).filter((plan) => !listed.has(planKey(plan))).map((plan) => plan.subscriber.memberId))];
}

/** Whether two plans hold on some day together (a plan not read, or with no dates, holds on every day). */
function togetherInForce(one: KnownCoverage | undefined, other: KnownCoverage | undefined): boolean {
  if (!one || !other) return true;
  return dayInPlan(other, one.period?.start ?? '') === 'within' || dayInPlan(one, other.period?.start ?? '') === 'within';
}

/**
 * The plan, in rank order, that is a fourth in force on one day (a plan with no dates is in force
 * on every day), or undefined. Four plans of which two ended before the others began (this year's
 * and next year's, both listed in December) are no more than two at once.
 */
function fourthAtOnce<T extends { coverage: KnownCoverage | undefined }>(ranked: readonly T[]): T | undefined {
  if (ranked.length <= ORDERS.length) return undefined;
  // The most plans at once are in force on the day one of them begins ('' for one with no start: before any day).
  for (const { coverage } of ranked) {
    if (!coverage) continue;
    const day = coverage.period?.start ?? '';
    const atOnce = ranked.filter((other) => other.coverage === undefined || dayInPlan(other.coverage, day) === 'within');
    if (atOnce.length > ORDERS.length) return atOnce[ORDERS.length];
  }
  return undefined;
}

/**
 * The insurances in rank order, each plan once: a PMS or an engine that lists one plan twice (the
 * same payer and member id, an IN1 copied or sent for both medical and dental benefits) would make
 * two checks of one key, the copy ranked secondary, and the one verification written to the chart
 * with the order of whichever came last. A copy is left out with a warning naming its IN1. The
 * same plan with other dates (last year's and this year's) is kept: the visit's day picks one.
 */
function once<T extends { group: Hl7Segment[]; coverage: KnownCoverage | undefined }>(ranked: readonly T[], warnings: Hl7Problem[]): T[] {
  if (ranked.length < 2) return [...ranked];
  const seen = new Map<string, number>();
  return ranked.filter(({ group, coverage }) => {
    if (!coverage) return true;
    const plan = `${planKey(coverage)}\u0000${coverage.period?.start ?? ''}\u0000${coverage.period?.end ?? ''}`;
    const sequence = group[0]?.sequence ?? 1;
    const first = seen.get(plan);
    if (first === undefined) {
      seen.set(plan, sequence);
      return true;
    }
    warnings.push(warningAt({ segment: 'IN1', sequence, field: 3 }, 100, `repeats the plan of IN1${first > 1 ? `[${first}]` : ''} (same payer and member id): read once`));
    return false;
  });
}

/**
 * An IN1 with nothing but its set id, nor anything in the segments after it the insurance is read
 * from: how some PMSs say a patient has no insurance. The IN1 is looked at first: most have a payer.
 */
function emptyGroup([in1, ...rest]: Hl7Segment[], profile: Hl7Profile): boolean {
  if (!in1?.emptyAfter(1)) return false;
  const read = insuranceSegments(profile);
  return rest.every((segment) => !read.has(segment.name) || segment.emptyAfter(0));
}

const segmentsRead = new WeakMap<Hl7Profile, ReadonlySet<string>>();

/**
 * The segments the profile reads an insurance from (IN1, IN2, a dialect's Z-segment): a group runs
 * to the next IN1, so in a SIU it also holds the appointment's RGS, AIS and AIP, no part of it.
 */
function insuranceSegments(profile: Hl7Profile): ReadonlySet<string> {
  const known = segmentsRead.get(profile);
  if (known) return known;
  const { subscriberRelationship, selfPay, ...paths } = profile.insurance;
  const valued = [...subscriberRelationship, ...selfPay].map((entry) => entry.path);
  const names = new Set(['IN1', ...[...Object.values(paths).flat(), ...valued].map((path) => path.segment)]);
  segmentsRead.set(profile, names);
  return names;
}

function declaredOrder(group: Hl7Segment[], profile: Hl7Profile): number | undefined {
  for (const path of profile.insurance.order) {
    const value = firstValue(group, [path])?.value;
    if (value && /^[1-3]$/.test(value)) return Number(value);
  }
  return undefined;
}

function readOne(
  group: Hl7Segment[],
  profile: Hl7Profile,
  codes: CodeTables,
  patient: PatientDemographics,
  problems: Hl7Problem[],
  warnings: Hl7Problem[],
  timeZone: string | undefined,
): KnownCoverage | undefined {
  const paths = profile.insurance;
  const scope = { segments: group };
  const text = (p: typeof paths.payerId) => firstValue(group, p)?.value;
  const payerId = text(paths.payerId);
  const payerName = text(paths.payerName);
  if (!payerId && !payerName) problems.push(problemAt(whereMissing(group, [...paths.payerId, ...paths.payerName]), 101, 'payer id and name missing'));
  const relationship = readRelationship(group, profile, codes, patient, problems);
  const self = relationship?.relationship === 'self';
  const patientMemberId = text(paths.patientMemberId);
  // For the patient's own plan the patient's member number is the subscriber's.
  const memberId = text(paths.subscriberMemberId) ?? (self ? patientMemberId : undefined);
  if (!memberId) problems.push(problemAt(whereMissing(group, paths.subscriberMemberId), 101, 'member id missing'));

  const named = firstValue(group, paths.subscriberName) !== undefined;
  // IN1-16 left empty for the patient's own plan means the patient; for anyone else it is missing.
  const statedName = named || (relationship !== undefined && !self) ? readName(scope, paths.subscriberName, 'subscriber', problems) : undefined;
  const statedBirthDate = readDate(scope, paths.subscriberBirthDate, 'subscriber birth date', problems, false);
  if (relationship && self && !isPatient(patient, statedName, statedBirthDate)) {
    const fields = [...paths.subscriberName, ...paths.subscriberBirthDate].map((p) => p.text).join('/');
    problems.push(problemAt(relationship.where, 103, `relationship self but ${fields} name another person`));
    return undefined;
  }
  const name = statedName ?? (self ? patient : undefined);
  const birthDate = statedBirthDate ?? (self ? patient.birthDate : undefined);

  if (!relationship || !name || !memberId || (!payerId && !payerName)) return undefined;
  const subscriber: Subscriber = {
    firstName: name.firstName,
    lastName: name.lastName,
    memberId,
    relationship: relationship.relationship,
    ...(name.middleName && { middleName: name.middleName }),
    ...(birthDate && { birthDate }),
  };
  const groupNumber = text(paths.groupNumber);
  const groupName = text(paths.groupName);
  const planName = text(paths.planName);
  const period = readPeriod(scope, profile, warnings, timeZone);
  // Key by key, as readPatient says why.
  const payer: KnownCoverage['coverage']['payer'] = {};
  if (payerName) payer.name = payerName;
  if (payerId) payer.id = payerId;
  return {
    coverage: {
      order: 'primary', // replaced once every group is read
      payer,
      ...(groupNumber && { groupNumber }),
      ...(groupName && { groupName }),
      ...(planName && { planName }),
    },
    subscriber,
    ...(patientMemberId && { patientMemberId }),
    ...(period && { period }),
  };
}

/**
 * The plan's effective and expiration dates (IN1-12, IN1-13). One given to the month or the year
 * is the whole of it, as FHIR's Coverage.period is: effective `202607` from July 1, expiring
 * `202612` through December 31. One that cannot be read (00000000, as some PMSs write no date)
 * bounds nothing, and the ACK says so: the plan is verified as one without. One written with a time
 * and an offset is dated in `timeZone`, where the visit is, but for one at a day's edge (planDayIn).
 */
function readPeriod(scope: { segments: Hl7Segment[] }, profile: Hl7Profile, warnings: Hl7Problem[], timeZone: string | undefined): KnownCoverage['period'] {
  const flaws: Hl7Problem[] = [];
  const dated = (paths: readonly FieldPath[], what: string, edge: 'first' | 'last') => {
    const day = readDate(scope, paths, what, flaws, false, edge);
    return day && (planDayIn(firstValue(scope.segments, paths)?.value ?? '', timeZone) ?? day);
  };
  const start = dated(profile.insurance.planEffective, 'plan effective date', 'first');
  const end = dated(profile.insurance.planExpiration, 'plan expiration date', 'last');
  warnings.push(...flaws.map((flaw) => ({ ...flaw, reason: `${flaw.reason}: taken as none`, ackCode: 'AA' as const })));
  if (!start && !end) return undefined;
  const period: PlanPeriod = {};
  if (start) period.start = start;
  if (end) period.end = end;
  return period;
}

/**
 * Coverages known from an earlier message, for the patient as this one describes them: a subscriber
 * who is the patient (self) takes the patient's name and birth date when those no longer match, so
 * a corrected name or birth date reaches the check whole instead of contradicting its subscriber.
 */
export function coveragesOfPatient(coverages: readonly KnownCoverage[], patient: PatientDemographics): KnownCoverage[] {
  return coverages.map((known) => {
    const { subscriber } = known;
    if (subscriber.relationship !== 'self' || isPatient(patient, subscriber, subscriber.birthDate)) return known;
    const { firstName, middleName, lastName, birthDate } = patient;
    return { ...known, subscriber: { firstName, lastName, birthDate, memberId: subscriber.memberId, relationship: 'self', ...(middleName && { middleName }) } };
  });
}

/** Whatever of a subscriber's name (family and given) and birth date is stated is the patient's. */
function isPatient(patient: PatientDemographics, name: PersonName | undefined, birthDate: string | undefined): boolean {
  const sameName = name === undefined || (sameText(name.lastName, patient.lastName) && sameText(name.firstName, patient.firstName));
  return sameName && (birthDate === undefined || birthDate === patient.birthDate);
}

/**
 * IN1-17 by the tables the profile names for it, with where it was read. When no relationship is
 * given, the subscriber is the patient only if IN1-16 is empty or names the patient (and IN1-18,
 * if present, is the patient's birth date): many PMSs leave IN1-17 empty for the patient's own
 * plan.
 */
function readRelationship(
  group: Hl7Segment[],
  profile: Hl7Profile,
  codes: CodeTables,
  patient: PatientDemographics,
  problems: Hl7Problem[],
): { relationship: Relationship; where: Where } | undefined {
  const entries = profile.insurance.subscriberRelationship;
  for (const { path, tables } of entries) {
    const found = firstValue(group, [path]);
    if (!found) continue;
    const reading = codes.relationship(found.value, tables);
    if (reading === undefined) {
      problems.push(problemAt(whereFound(found), 103, `relationship code is not in ${oneOf(tables.map(codes.relationshipTableLabel))}`));
      return undefined;
    }
    if (reading === 'ambiguous') {
      problems.push(problemAt(whereFound(found), 103, `relationship is ambiguous: send a code of ${codes.relationshipTableLabel(tables[0] ?? '')}`));
      return undefined;
    }
    return { relationship: reading, where: whereFound(found) };
  }
  const paths = profile.insurance;
  const where = whereMissing(group, entries.map((e) => e.path));
  const silent: Hl7Problem[] = [];
  const name = firstValue(group, paths.subscriberName) ? readName({ segments: group }, paths.subscriberName, 'subscriber', silent) : undefined;
  const birthDate = readDate({ segments: group }, paths.subscriberBirthDate, 'subscriber birth date', silent, false);
  if (silent.length === 0 && isPatient(patient, name, birthDate)) return { relationship: 'self', where };
  problems.push(problemAt(where, 101, 'relationship to patient missing'));
  return undefined;
}

/** `a`, `a or b`, `a, b or c`. */
function oneOf(items: readonly string[]): string {
  return items.length <= 1 ? (items[0] ?? '') : `${items.slice(0, -1).join(', ')} or ${items.at(-1)}`;
}
