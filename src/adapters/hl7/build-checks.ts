import {
  EligibilityCheck,
  idempotencyKey,
  type CoverageOrder,
  type KnownCoverage,
  type PayerAsNamed,
  type PayerResolver,
  type PlanPeriod,
  type Provider,
} from '../../domain';
import type { PatientDemographics } from './read-patient';

export interface CheckSourceFields {
  messageControlId: string;
  messageType: string;
  sendingApplication?: string;
  sendingFacility?: string;
  appointmentId?: string;
  receivedAt: string;
}

export interface CheckParts {
  clinicId: string;
  patient: PatientDemographics;
  coverages: readonly KnownCoverage[];
  dateOfService: string;
  provider?: Provider | undefined;
  source: CheckSourceFields;
  resolver?: PayerResolver | undefined;
  /** The message's warnings, one line each; every check it makes carries them. */
  warnings?: readonly string[];
}

/**
 * One check per insurance, from parts that are valid already: the readers checked every datum
 * they cut from the message, so the types carry that and nothing is parsed twice (the corpus and
 * fuzz tests hold the result to the schema).
 */
export function assembleChecks(input: CheckParts): EligibilityCheck[] {
  return inForceOn(input.coverages, input.dateOfService).map((known) => {
    const { coverage, subscriber, patientMemberId } = known;
    const resolution = input.resolver?.resolve(coverage.payer);
    const period = spanOf(known, input.coverages);
    // Copies that add are Object.assign's, and spreads come last: see readPatient.
    const body = {
      clinicId: input.clinicId,
      patient: Object.assign({}, input.patient, patientMemberId && { memberId: patientMemberId }),
      subscriber,
      coverage: Object.assign({}, coverage, period && { period }, resolution && { resolution }),
      dateOfService: input.dateOfService,
      ...(input.provider && { provider: input.provider }),
    };
    const warnings = input.warnings?.length ? { warnings: [...input.warnings] } : {};
    return { idempotencyKey: idempotencyKey(body), source: { kind: 'hl7' as const, ...input.source }, ...body, ...warnings };
  });
}

/** Where a day falls in a plan's period (IN1-12 to IN1-13, both days in force): a plan the PMS listed, or the one a check carries. */
export function dayInPlan(coverage: { period?: PlanPeriod | undefined }, day: string): 'not-started' | 'ended' | 'within' {
  const { start, end } = coverage.period ?? {};
  return start !== undefined && day < start ? 'not-started' : end !== undefined && day > end ? 'ended' : 'within';
}

/**
 * A plan's dates as the chart's one Coverage of it states them: listed with two periods (last
 * year's and this year's under one member id), from the first start to the last end, open where
 * one of them is. Else the visit's check would write one year's dates, and a later visit's the other.
 */
export function spanOf(plan: KnownCoverage, all: readonly KnownCoverage[]): PlanPeriod | undefined {
  const key = planKey(plan);
  const periods = all.filter((known) => planKey(known) === key).map((known) => known.period);
  if (periods.length === 1) return plan.period;
  const starts = periods.map((p) => p?.start);
  const ends = periods.map((p) => p?.end);
  // ISO dates sort as days do.
  const first = starts.every(isDate) ? starts.sort()[0] : undefined;
  const last = ends.every(isDate) ? ends.sort().at(-1) : undefined;
  if (!first && !last) return undefined;
  const span: PlanPeriod = {};
  if (first) span.start = first;
  if (last) span.end = last;
  return span;
}

const isDate = (day: string | undefined): day is string => day !== undefined;

export const ORDERS: readonly CoverageOrder[] = ['primary', 'secondary', 'tertiary'];

/** A plan as a check's key knows it: the payer (its id, else its name) and the subscriber's member id. */
export function planKey({ coverage, subscriber }: { coverage: { payer: PayerAsNamed }; subscriber: { memberId: string } }): string {
  return `${coverage.payer.id ?? coverage.payer.name?.toUpperCase() ?? ''}\u0000${subscriber.memberId}`;
}

/**
 * The plans in force on the date of service, each once, in order again: a plan that ended before
 * the visit (one a PMS still lists), or one that begins after it (next year's, sent beside this
 * year's in December), makes no check, and the plan after it moves up, as the FHIR reader leaves
 * out a Coverage whose period misses the visit. Of one plan listed with two periods that both hold
 * the day, the first serves: two would be checks of one key. So too of one plan listed twice without
 * dates, which a record stored before c9d41a7 may hold: a message's plans are read once, a record's not.
 */
function inForceOn(coverages: readonly KnownCoverage[], day: string): readonly KnownCoverage[] {
  const seen = new Set<string>();
  const inForce = coverages.filter((known) => {
    const plan = planKey(known);
    if (dayInPlan(known, day) !== 'within' || seen.has(plan)) return false;
    seen.add(plan);
    return true;
  });
  if (inForce.length === coverages.length) return coverages;
  return inForce.map((known, i) => ({ ...known, coverage: { ...known.coverage, order: ORDERS[i] ?? known.coverage.order } }));
}

/**
 * assembleChecks for parts read back from storage (the pipeline builds an appointment's checks
 * again when insurance arrives): they crossed a boundary, so each check is validated.
 */
export function buildChecks(input: CheckParts): EligibilityCheck[] {
  return assembleChecks(input).map((check) => EligibilityCheck.parse(check));
}
