import { hash } from 'node:crypto';
import * as z from 'zod';
import { dayInPeriod } from '../adapters/fhir/in/period';
import { dayInPlan, planKey, spanOf } from '../adapters/hl7';
import { dateAt, earliestDateAnywhere, startOfDate } from '../adapters/local-date';
import type { FhirIssue } from '../adapters/fhir/operation-outcome';
import { dayWritten, type EligibilityCheck, type KnownCoverage, type PatientInsuranceRecord } from '../domain';
import { present } from '../adapters/fhir/out/values';
import { storedOutcome } from '../verification/outcome';
import type { VerificationResult } from '../verification/wire';
import { planHoldsVisit, sharedPatient, whyEnding } from './chart-resources';
import { answeredThisRound, type AppointmentRow, type AppointmentStatus, type CheckOfPlan, type CheckRow, type CheckState, type StoreTx } from './job-store';

/**
 * What an appointment event does to the checks: the appointment is stored with the keys of the
 * checks it needs; a new check is created, a corrected one gets a new round (a new verification),
 * an unchanged one is left alone, and a check no booked appointment needs any more is withdrawn.
 * One function for HL7 and FHIR, run inside the transaction that stores the event.
 */

export interface SchedulePolicy {
  /** A completed result younger than this serves another appointment of the same coverage. */
  freshnessMs: number;
  /** How long before the visit a check whose result has gone stale is verified again. */
  reverifyLeadMs: number;
  /** Where a clinic is (clinics.json's timeZone), its visits' dates its own; undefined where none is known. */
  timeZoneOf?: (clinicId: string) => string | undefined;
}

export interface AppointmentEvent {
  key: string;
  patientKey: string;
  dateOfService: string;
  status: AppointmentStatus;
  checks: readonly EligibilityCheck[];
  basis: unknown;
}

export interface ScheduleContext {
  now: Date;
  policy: SchedulePolicy;
}

/** Checks still to be withdrawn are those no longer worked on, nor finished. */
const WITHDRAWABLE: ReadonlySet<CheckRow['state']> = new Set(['received', 'submitted', 'awaiting-result', 'result-stored', 'needs-attention']);
/** Checks withdrawn, or being: booked again, the plan is verified again (and its Coverage, if ended, is active again when written). */
const WITHDRAWN: ReadonlySet<CheckRow['state']> = new Set(['cancelled', 'ending-coverage']);

export async function scheduleAppointment(tx: StoreTx, event: AppointmentEvent, ctx: ScheduleContext): Promise<{ created: string[]; withdrawn: string[] }> {
  const now = ctx.now.toISOString();
  const earlier = await tx.getAppointment(event.key);
  const keys = event.status === 'booked' ? event.checks.map((c) => c.idempotencyKey) : [];
  const row: AppointmentRow = {
    key: event.key,
    patientKey: event.patientKey,
    dateOfService: event.dateOfService,
    status: event.status,
    checkKeys: keys,
    basis: event.basis,
    updatedAt: now,
  };
  await tx.putAppointment(row);
  const created: string[] = [];
  if (event.status === 'booked') {
    for (const check of event.checks) if (await upsertCheck(tx, check, event.patientKey, ctx)) created.push(check.idempotencyKey);
  }
  const dropped = (earlier?.checkKeys ?? []).filter((k) => !keys.includes(k));
  const withdrawn: string[] = [];
  const why = WITHDRAWN_BECAUSE[event.status];
  for (const key of dropped) if (await withdrawIfUnheld(tx, key, now, why)) withdrawn.push(key);
  return { created, withdrawn };
}

/** True when the check is new or needs a new verification. */
async function upsertCheck(tx: StoreTx, check: EligibilityCheck, patientKey: string, ctx: ScheduleContext): Promise<boolean> {
  const now = ctx.now.toISOString();
  const { fingerprint, coverageFingerprint } = fingerprints(check);
  let existing = await tx.getCheck(check.idempotencyKey);
  if (existing?.withdrawnBecause !== undefined) {
    // Booked again while being withdrawn (withdrawIfUnheld): its result serves a visit again, and is written as any.
    const { withdrawnBecause: _was, lastError: _why, ...booked } = existing;
    existing = { ...booked, updatedAt: now };
    await tx.putCheck(existing);
  }
  if (existing?.state === 'cancelled' && existing.fingerprint === fingerprint && followedStill(existing)) {
    // Booked again (moved back, say) while its verification is still followed at the service: that one is its own again,
    // awaited at its poll's time (or sent again under its externalId, its send's answer lost), not sent a second time as
    // a new round would be (its result then taken by no check).
    const { lastError: _why, ...awaited } = existing;
    await tx.putCheck({ ...awaited, check, patientKey, state: awaited.correlationId === undefined ? 'submitted' : 'awaiting-result', updatedAt: now });
    return false;
  }
  if (existing && existing.fingerprint === fingerprint && !WITHDRAWN.has(existing.state)) {
    if (chartCoverageChanged(existing.check, check)) {
      // Coordination of benefits changed (primary turned secondary), or the plan's dates: nothing to verify
      // anew, but the chart's Coverage is to follow, so a check whose result is in the chart is written again.
      await tx.putCheck({ ...existing, check, updatedAt: now, ...(resultWritten(existing) && { state: 'result-stored', dueAt: now }) });
      return false;
    }
    // The same event again, or another appointment the same day: one verification serves both.
    // A written check whose visit was cancelled and is booked again is verified again before it.
    if (existing.state === 'written' && existing.dueAt === undefined && existing.resultAt !== undefined) {
      const dueAt = reverifyAt(existing, new Date(existing.resultAt), ctx.policy);
      if (dueAt !== undefined) await tx.putCheck({ ...existing, dueAt, updatedAt: now });
    }
    return false;
  }
  const round = existing ? existing.round + 1 : 0;
  const base: CheckRow = {
    key: check.idempotencyKey,
    state: 'received',
    check,
    patientKey,
    fingerprint,
    coverageFingerprint,
    round,
    externalId: externalIdFor(check.idempotencyKey, fingerprint, round),
    attempts: 0,
    dueAt: now,
    createdAt: existing?.createdAt ?? now,
    updatedAt: now,
  };
  await tx.putCheck({ ...base, ...(await freshResultFor(tx, base, ctx)) });
  return true;
}

/**
 * A recent completed verification of this very coverage that tells of the check's visit
 * (servesVisit), and `usable` takes, as the fields that make the check use it: it keeps no
 * correlation id of its own (the verification is the other's) but gets a chart pair of its own,
 * found by its key, while the other appointment's pair stays as it was. Undefined when none does.
 */
export async function freshResultFor(
  tx: StoreTx,
  row: CheckRow,
  ctx: ScheduleContext,
  usable: (fresh: CheckRow) => boolean = () => true,
): Promise<Pick<CheckRow, 'state' | 'result' | 'resultAt' | 'mode' | 'reusedFrom'> | undefined> {
  const since = new Date(ctx.now.getTime() - ctx.policy.freshnessMs).toISOString();
  // Not only the newest: in December, next year's visit verified yesterday tells nothing of this year's.
  // A check cancelled for its plan being dropped does not serve the plan stated again, which is verified anew; one
  // cancelled for its visit (moved while its verification was at the service) does, once it has its round's result: a
  // re-verification's keeps the last round's until then, its correlation id already the round's.
  const fresh = (await tx.freshResults(row.coverageFingerprint, since)).find(
    (other) => (other.state !== 'cancelled' || (other.planDroppedAt === undefined && answeredThisRound(other))) && servesVisit(other, row.check.dateOfService) && usable(other),
  );
  if (fresh?.result === undefined) return undefined;
  return {
    state: 'result-stored',
    result: fresh.result,
    ...(fresh.resultAt !== undefined && { resultAt: fresh.resultAt }),
    ...(fresh.mode !== undefined && { mode: fresh.mode }),
    reusedFrom: fresh.correlationId ?? fresh.reusedFrom ?? fresh.key,
  };
}

/**
 * What the chart's Coverage states of a check that no new verification follows from: its order, the plan's dates, and,
 * read from a FHIR chart, the payor Organization its pair names as insurer (check.source.insurer) and the Coverage
 * itself (check.source.coverage): one deleted and made again, the same plan under a new id, is the one the pair names.
 */
export function chartCoverageChanged(stored: EligibilityCheck, check: EligibilityCheck): boolean {
  return chartCoverageOf(stored) !== chartCoverageOf(check);
}

/** What chartCoverageChanged compares of a check, as one string: a FHIR read's dedupe key holds it, so that a change of it is no duplicate. */
export function chartCoverageOf(check: EligibilityCheck): string {
  const { order, period } = check.coverage;
  // An HL7 check names no chart resource: its writer finds the insurer and the Coverage by identifier.
  const chart = check.source.kind === 'fhir' ? [check.source.insurer ?? null, check.source.coverage] : [null];
  return JSON.stringify([order, period?.start ?? null, period?.end ?? null, ...chart]);
}

/**
 * Whether a result verified for one visit tells another's benefits: what is used of a maximum or
 * a deductible counts within a benefit period, so only a visit in the result's benefit period,
 * within the plan's effective and termination dates, is served by it; without a stated period,
 * one in the same calendar year, the benefit year of most dental plans. A December result with
 * $200 of the maximum left says nothing of a January visit, when the maximum starts again.
 */
function servesVisit(fresh: CheckRow, dateOfService: string): boolean {
  const completed = completedPlan(fresh.result);
  if (completed === undefined) return false;
  const { plan } = completed;
  const issues: FhirIssue[] = [];
  const within = (start: string | undefined, end: string | undefined) => dayInPeriod({ start, end }, dateOfService, 'result.plan', issues) === 'within';
  const period = benefitPeriodOf(plan);
  const inPeriod = period !== undefined ? within(period.start, period.end) : fresh.check.dateOfService.slice(0, 4) === dateOfService.slice(0, 4);
  // A date the result writes unreadably settles nothing: the visit is verified for itself.
  return inPeriod && within(dated(plan?.effectiveDate), dated(plan?.terminationDate)) && issues.length === 0;
}

/** The plan a completed result states (none, where it states none); undefined for a result of another kind, or one whose plan dates were not read. */
function completedPlan(result: unknown): { plan: VerificationResult['plan'] } | undefined {
  const outcome = storedOutcome(result);
  if (outcome?.kind !== 'completed') return undefined;
  // A plan date the result writes as no date is left out as it is read: taken for none, the visit's date would be measured without it.
  return outcome.unread.some((u) => PLAN_DATE.test(u.path)) ? undefined : { plan: outcome.result.plan };
}

const PLAN_DATE = /^result\.plan(?:$|\.(?:effectiveDate|terminationDate|benefitPeriod)(?:$|\.))/;

/** A blank date is one the portal does not know, and one at midnight the day it names, as the writer reads them. */
function dated(value: string | null | undefined): string | undefined {
  const text = present(value);
  return text === undefined ? undefined : dayWritten(text);
}

/** The benefit period a plan states, as written; a period is a year: one bound stated, the other is a year from it, not open for good. */
function benefitPeriodOf(plan: VerificationResult['plan']): { start: string | undefined; end: string | undefined } | undefined {
  const [start, end] = [dated(plan?.benefitPeriod?.start), dated(plan?.benefitPeriod?.end)];
  if (start === undefined && end === undefined) return undefined;
  return { start: start ?? yearFrom(end, -1), end: end ?? yearFrom(start, 1) };
}

/**
 * The first day of the visit's benefit period where the result's period ended before the visit: a
 * result verified in December for a January visit, its maximum's remainder and deductible those
 * of the year before, which reset on that day. Undefined where the result states no full-date end
 * before the visit (or is no completed result).
 */
export function nextPeriodBegins(result: unknown, dateOfService: string): string | undefined {
  const completed = completedPlan(result);
  const end = completed && benefitPeriodOf(completed.plan)?.end;
  if (end === undefined || !/^\d{4}-\d{2}-\d{2}$/.test(end) || end >= dateOfService) return undefined;
  const day = new Date(`${end}T00:00:00Z`);
  day.setUTCDate(day.getUTCDate() + 1);
  return day.toISOString().slice(0, 10);
}

/**
 * The other end of a year-long period from a full date (YYYY-MM-DD), by the next period's first
 * day: a year on less a day, or a year back from the day after; undefined for another precision.
 * So a period ending 2028-02-29 began 2027-03-01 (a year back from 2028-03-01), not 2027-03-02.
 */
function yearFrom(bound: string | undefined, years: 1 | -1): string | undefined {
  if (bound === undefined || !/^\d{4}-\d{2}-\d{2}$/.test(bound)) return undefined;
  const day = new Date(`${bound}T00:00:00Z`);
  if (years === 1) day.setUTCFullYear(day.getUTCFullYear() + 1);
  day.setUTCDate(day.getUTCDate() - years);
  if (years === -1) day.setUTCFullYear(day.getUTCFullYear() - 1);
  return day.toISOString().slice(0, 10);
}

/**
 * The check's result is in the chart: written, or written as a failure that waits for a person
 * (whose pair is of this result, not of an earlier round's, when its verification is the result's).
 * The verification is the current round's too: a re-verification the service refused or left
 * pending waits for a person with the last round's result and pair still kept, not written again.
 */
function resultWritten(row: CheckRow): boolean {
  if (row.state === 'written') return true;
  const verification = row.written?.verification;
  return (
    row.state === 'needs-attention' &&
    verification !== undefined &&
    verification === row.correlationId &&
    verification === (row.result as { correlationId?: unknown } | undefined)?.correlationId
  );
}

/**
 * Why a check its appointment no longer holds is withdrawn, by what the appointment is now: `jobs
 * list` said 'cancelled or moved' of a check a corrected member id replaced, the visit still booked.
 */
const WITHDRAWN_BECAUSE: Record<AppointmentStatus, string> = {
  // A check is its clinic's, patient's, plan's and day's (idempotencyKey): a visit moved to another office is one too.
  booked: "the appointment verifies another check now (its date or office, the patient's details or a plan changed)",
  'awaiting-insurance': 'the appointment has no insurance in force now',
  'awaiting-correction': "the appointment's latest booking was refused for the patient's details (AE): it waits for their correction",
  'self-pay': 'the patient pays for the visit now (no insurance)',
  cancelled: 'the appointment was cancelled',
};

/**
 * A cancelled check whose verification at the service is followed for its round's result, or whose
 * send's answer, lost, is to be asked for again (withdrawIfUnheld, the worker's followCancelled).
 */
function followedStill(row: CheckRow): boolean {
  return (row.correlationId !== undefined || row.submittedAt !== undefined) && row.dueAt !== undefined && row.planDroppedAt === undefined && !answeredThisRound(row);
}

async function withdrawIfUnheld(tx: StoreTx, key: string, now: string, why: string): Promise<boolean> {
  if ((await tx.appointmentsHolding(key)).length > 0) return false;
  const check = await tx.getCheck(key);
  const closing = check && (await closingCheck(tx, check));
  if (closing) {
    // No other check would end its Coverage: only a write that creates one ends those beside it.
    const { dueAt: _due, withdrawnBecause: _was, ...rest } = closing;
    await tx.putCheck({ ...rest, state: 'ending-coverage', attempts: 0, dueAt: now, planDroppedAt: now, updatedAt: now, lastError: whyEnding(closing.check) });
    return true;
  }
  if (check?.state === 'written' && check.dueAt !== undefined) {
    // Its result stays in the chart; no visit is left to verify it again for.
    const { dueAt: _reverify, ...written } = check;
    await tx.putCheck({ ...written, updatedAt: now });
    return false;
  }
  if (!check || !WITHDRAWABLE.has(check.state)) return false;
  if (check.state === 'result-stored') {
    // A worker may have its pair on the way to the chart: withdrawn as a check written or not, once it
    // has found out which (the worker's lease holds others back until its write is done), not cancelled
    // now with a pair the chart may take that no check would name, nor a plan dropped later end.
    await tx.putCheck({ ...check, withdrawnBecause: why, attempts: 0, dueAt: now, updatedAt: now, lastError: why });
    return true;
  }
  const { dueAt, ...rest } = check;
  // Its verification at the service is followed still, at its poll's time: another visit of the plan (the visit moved) takes its result.
  const followed = check.state === 'awaiting-result' && check.correlationId !== undefined && dueAt !== undefined && { dueAt };
  // Its send under way, or its answer lost with the worker that sent it (killed): taken up once no worker holds it,
  // and sent again under its externalId to find what the service made of it (the worker's followCancelled).
  const answerAwaited = check.state === 'submitted' && { dueAt: now };
  // One waiting to be sent (again, after a failed send) has nothing at the service: no other visit of the plan waits for it (the worker's stillAtService).
  const { submittedAt: _sent, ...unsent } = rest;
  await tx.putCheck({ ...(check.state === 'received' ? unsent : rest), ...followed, ...answerAwaited, state: 'cancelled', updatedAt: now, lastError: why });
  return true;
}

/**
 * The check withdrawn whose Coverage is to end: the patient's record no longer names its plan (its
 * payer and member id, as the Coverage's key): a secondary dropped, a patient now paying for
 * themselves; or names it with dates that no longer hold the check's visit (a plan the PMS ended
 * early), the check then carrying those dates for its Coverage. Undefined for any other withdrawal
 * (the visit cancelled or moved: the plan still serves the patient). The member id alone
 * would keep a plan dropped beside one under the same number, as a PMS that files plans under the
 * patient's own number sends them. Whether or not this check's pair is known to be written: a
 * first write under way when the plan is dropped makes the Coverage all the same (the worker's
 * lease holds the ending back until it is done), as a corrected check's earlier round did.
 * Only for a patient of one sender, whose record holds every plan they have (as endedCoverage),
 * and not for one merged into another, whose written checks stay as they are.
 */
async function closingCheck(tx: StoreTx, row: CheckRow): Promise<CheckRow | undefined> {
  if (row.state !== 'written' && !WITHDRAWABLE.has(row.state)) return undefined;
  const onRecord = await planOnRecord(tx, row);
  if (onRecord === undefined) return undefined;
  const [first] = onRecord.listed;
  if (first === undefined) return row;
  if (onRecord.listed.some((known) => dayInPlan(known, row.check.dateOfService) === 'within')) return undefined;
  const period = spanOf(first, onRecord.plans);
  const dated = { ...row, check: { ...row.check, coverage: { ...row.check.coverage, ...(period && { period }) } } };
  // Listed twice with a gap the visit falls in: the Coverage's one period, from first to last, says no more.
  return planHoldsVisit(dated.check) ? undefined : dated;
}

/**
 * The Coverages this plugin wrote of plans the patient's record no longer names, for visits no
 * longer to come: over, or cancelled once their check was written. A dropped plan's check held by
 * a visit to come ends its Coverage as it is withdrawn (closingCheck); with none, the plan's
 * latest check whose write is in the chart does (restsInChart; ending-coverage). Once: the plan's
 * other such checks are marked as its drop seen (planDroppedAt) too, as one that ended it is, so the next change of the record
 * does not end the Coverage again through an older visit's check (the EHR may have made it active
 * again meanwhile); a plan stated again and dropped again is ended by the check whose write made
 * it active again (the worker's write clears the mark). A check cancelled with its verification at the
 * service is marked too, so that the plan stated again is verified anew (servesAnotherVisit). A plan the PMS ended before the visit and
 * now drops is ended all the same, its Coverage cancelled rather than dated (asDropped): dated
 * already, through its latest check as any; still being dated, by the check dating it. Not for a
 * patient every sender shares nor one merged into another, as closingCheck. `record` is the
 * patient's as the message leaves it, `droppedMemberIds` those of the plans it drops
 * (droppedMemberIds). The keys of the checks taken.
 */
export async function endDroppedPlans(
  tx: StoreTx,
  patientKey: string,
  record: PatientInsuranceRecord,
  droppedMemberIds: readonly string[],
  now: string,
): Promise<string[]> {
  if (record.mergedInto !== undefined) return [];
  const listed = new Set(record.coverages.map(planKey));
  // Only these: a booking's new checks, or any still being verified, are not read (a record changes at most bookings);
  // nor the checks of the plans still listed, a patient's years of history.
  const rows = (await tx.checksOfPatient(patientKey, droppedMemberIds, RESTING_OR_ENDING)).filter((row) => !listed.has(planKey(row.check)) && row.check.source.kind === 'hl7' && !sharedPatient(row.check));
  const taken: string[] = [];
  const ending = new Set<string>();
  const resting: Array<CheckOfPlan | CheckRow> = rows.filter((row) => row.state !== 'ending-coverage');
  for (const { key, state } of rows) {
    if (state !== 'ending-coverage') continue;
    // Read again, locked: a worker (on PostgreSQL, since the read above) may have done with it, a dating then resting in the chart as any check.
    const current = await tx.getCheck(key);
    if (current === undefined) continue;
    if (current.state !== 'ending-coverage') resting.push(current);
    if (current.state === 'ending-coverage' || dropSeen(current)) ending.add(planKey(current.check));
    if (current.state !== 'ending-coverage' || planHoldsVisit(current.check)) continue;
    // Being dated: the PMS's last word is the drop (the worker, dating it meanwhile, ends it again as this says: endCoverage).
    const undated = asDropped(current.check);
    await tx.putCheck({ ...current, check: undated, attempts: 0, dueAt: now, planDroppedAt: now, updatedAt: now, lastError: whyEnding(undated) });
    taken.push(key);
  }
  const dropped = new Map<string, Array<CheckOfPlan | CheckRow>>();
  for (const row of resting) {
    if (!restsInChart(row) || dropSeen(row)) continue;
    const plan = planKey(row.check);
    dropped.set(plan, [...(dropped.get(plan) ?? []), row]);
  }
  for (const [plan, written] of dropped) {
    // A check of a visit to come ends it already (closingCheck): the others are only marked.
    const latest = ending.has(plan) ? undefined : written.reduce((a, b) => (b.check.dateOfService > a.check.dateOfService ? b : a));
    for (const { key } of written) {
      // Read again, locked: another instance's worker may have moved it since.
      const current = await tx.getCheck(key);
      if (current === undefined || !restsInChart(current) || dropSeen(current)) continue;
      const check = asDropped(current.check);
      if (key !== latest?.key) {
        // One waiting for a person is left to none, as the latest is once its Coverage is ended (endCoverage): the plan is gone, its visit over.
        const withdrawn = current.state === 'needs-attention' && { state: 'cancelled' as const, dueAt: undefined, lastError: whyEnding(check) };
        await tx.putCheck({ ...current, check, ...withdrawn, planDroppedAt: now, updatedAt: now });
        continue;
      }
      const { dueAt: _reverify, ...rest } = current;
      await tx.putCheck({ ...rest, check, state: 'ending-coverage', attempts: 0, dueAt: now, planDroppedAt: now, updatedAt: now, lastError: whyEnding(check) });
      taken.push(key);
    }
  }
  await letGoDropped(tx, rows, now);
  return taken;
}

/**
 * endDroppedPlans' rule for a check followed at the service, on the FHIR road: a read of a patient's
 * appointment names their active Coverages (`active`), and a cancelled check of theirs read from a
 * Coverage no longer among them (deleted, moved to another patient, its status ended), followed for
 * its verification's result or holding it (servesAnotherVisit), is marked with its plan's drop, as an
 * HL7 record no longer listing the plan marks one: a Coverage made again in its place, the same plan
 * or a new enrolment, is verified anew. Run before the read's checks are scheduled, which would take
 * that result (freshResultFor), and on a read that changes nothing else (a Coverage deleted and made
 * again between two reads). `memberIds`: of the plans the appointment held and holds, the only ones
 * such a check could serve it with. Nothing is ended: a FHIR chart's Coverages are the EHR's.
 */
export async function endGoneCoverages(tx: StoreTx, patientKey: string, active: readonly string[], memberIds: readonly string[], now: string): Promise<void> {
  if (memberIds.length === 0) return;
  const rows = (await tx.checksOfPatient(patientKey, memberIds, ['cancelled'])).filter((row) => row.check.source.kind === 'fhir');
  await letGoDropped(tx, rows, now, ({ check: { source } }) => source.kind === 'fhir' && !active.includes(source.coverage));
}

/** The checks of `rows` that would serve another visit with a result asked for before their plan's drop (servesAnotherVisit), and are `gone`, marked with it and followed no longer. */
async function letGoDropped(tx: StoreTx, rows: readonly CheckOfPlan[], now: string, gone: (current: CheckRow) => boolean = () => true): Promise<void> {
  for (const row of rows) {
    if (!servesAnotherVisit(row)) continue;
    // Read again, locked: a worker may have let it go since, or taken its result.
    const current = await tx.getCheck(row.key);
    if (current === undefined || !servesAnotherVisit(current) || !gone(current)) continue;
    await tx.putCheck({ ...current, dueAt: undefined, planDroppedAt: now, updatedAt: now });
  }
}

/**
 * A check cancelled with its verification at the service (its visit moved), followed for that
 * result or holding it, which another visit of its plan would take (freshResultFor, the worker's
 * stillAtService), and which no appointment holds, so no withdrawal marks its plan's drop. Its
 * result asked for before the drop serves no plan stated again (the drop may be a plan ended and a
 * new enrolment begun): marked as dropped, it is followed no longer. Once: a patient's years of
 * cancelled checks are read at a drop only while unmarked.
 */
function servesAnotherVisit(row: Pick<CheckOfPlan, 'state' | 'planDroppedAt' | 'dueAt' | 'resultAt'> & { written?: unknown }): boolean {
  return row.state === 'cancelled' && !restsInChart(row) && row.planDroppedAt === undefined && (row.dueAt !== undefined || row.resultAt !== undefined);
}

/** Whether the check's mark is of its plan's drop: one of its plan's dates moved off its visit (a Coverage dated) is not. */
function dropSeen(row: Pick<CheckOfPlan, 'planDroppedAt' | 'check'>): boolean {
  return row.planDroppedAt !== undefined && planHoldsVisit(row.check);
}

/**
 * A check of a plan the PMS no longer sends: without the dates a plan ended before the visit gave
 * it (the Coverage keeps them: droppedCoverage), so it is ended as a plan dropped is, cancelled,
 * not dated.
 */
function asDropped(check: EligibilityCheck): EligibilityCheck {
  const { period: _dates, ...coverage } = check.coverage;
  return planHoldsVisit(check) ? check : { ...check, coverage };
}

/**
 * Whether the patient's record, as the PMS has left it, no longer lists the plan a check verified:
 * a plan dropped while the check was still under way for a visit already over, which
 * endDroppedPlans, run at the drop, could not take (its write was not in the chart yet). Only
 * where the record speaks for the check's Coverage (planOnRecord), as at a withdrawal.
 */
export async function planDroppedSince(tx: StoreTx, row: CheckRow): Promise<boolean> {
  return (await planOnRecord(tx, row))?.listed.length === 0;
}

/**
 * The patient's plans as the PMS has left them, and those of them that are the check's plan (its
 * payer and member id, the Coverage's key). Undefined where the record does not speak for the
 * check's Coverage: not an HL7 patient, one every sender shares (their record holds one sender's
 * plans), one merged into another (whose written checks stay as they are), or none on file.
 */
async function planOnRecord(tx: StoreTx, row: CheckRow): Promise<{ plans: KnownCoverage[]; listed: KnownCoverage[] } | undefined> {
  if (row.check.source.kind !== 'hl7' || sharedPatient(row.check)) return undefined;
  const record = await tx.getPatient(row.patientKey);
  if (record === undefined || record.mergedInto !== undefined) return undefined;
  const plan = planKey(row.check);
  return { plans: record.coverages, listed: record.coverages.filter((known) => planKey(known) === plan) };
}

/** The states of a check restsInChart may take, and of one ending its plan's Coverage. */
const RESTING_OR_ENDING: readonly CheckState[] = ['written', 'needs-attention', 'cancelled', 'ending-coverage'];

/**
 * A check done with, whose write made its plan's Coverage in the chart: written, or waiting for a
 * person with a pair written (an error response, a check given up or a payer's refusal, makes the
 * Coverage as a result does), or withdrawn with a pair written: its visit cancelled once a failure
 * was written, or while a re-verification was under way, the earlier result still in the chart.
 */
function restsInChart(row: { state: CheckState; written?: unknown }): boolean {
  if (row.state === 'written') return true;
  return row.written !== undefined && (row.state === 'needs-attention' || row.state === 'cancelled');
}

/**
 * The first visit date still to come at a clinic in `timeZone`: the date it is there now, so in
 * Guam yesterday's visits are over from Guam's midnight. Where the zone is not known, the earliest
 * date it is anywhere on Earth now (UTC−12): the UTC date would drop a US evening's visits that day
 * once UTC has passed midnight.
 */
export function firstDateToCome(now: Date, timeZone: string | undefined): string {
  return timeZone === undefined ? earliestDateAnywhere(now) : dateAt(now, timeZone);
}

/**
 * Whether the visit's date has begun where its clinic is; where that is not known, at UTC, as
 * reverifyAt takes it (a US clinic's visit from the evening before, an Australian one's from mid-morning).
 */
export function visitDayCome(check: EligibilityCheck, now: Date, policy: SchedulePolicy): boolean {
  const timeZone = policy.timeZoneOf?.(check.clinicId);
  return check.dateOfService <= (timeZone === undefined ? now.toISOString().slice(0, 10) : dateAt(now, timeZone));
}

/** The clinic an appointment's basis names: an HL7 one's always, a FHIR one's once it is read with one (rows stored before, none). */
const AtClinic = z.looseObject({ clinicId: z.string() });

/** The clinic a stored appointment is at, as its basis says. */
export function clinicOf(appointment: AppointmentRow): string | undefined {
  return AtClinic.safeParse(appointment.basis).data?.clinicId;
}

/** Whether a stored appointment's visit is still to come where its clinic is (see firstDateToCome). */
export function stillToCome(appointment: AppointmentRow, now: Date, policy: SchedulePolicy): boolean {
  const clinicId = clinicOf(appointment);
  return appointment.dateOfService >= firstDateToCome(now, clinicId === undefined ? undefined : policy.timeZoneOf?.(clinicId));
}

/**
 * When a written check is to be verified again: once its result is older than the freshness
 * window, or its benefit period has given way to the visit's, but no sooner than the lead time
 * before the visit; never after the visit. The visit is
 * taken to begin at the start of its date where the clinic is, at UTC's where that is not known.
 */
export function reverifyAt(check: CheckRow, resultAt: Date, policy: SchedulePolicy): string | undefined {
  const { dateOfService, clinicId } = check.check;
  const timeZone = policy.timeZoneOf?.(clinicId);
  const begins = (date: string) => (timeZone === undefined ? Date.parse(`${date}T00:00:00Z`) : startOfDate(date, timeZone).getTime());
  const visit = begins(dateOfService);
  // A result of the benefit period before the visit's is stale once the visit's begins, fresh or not; one
  // verified since that day began (a portal still answering last year's) is not verified again for it.
  const next = nextPeriodBegins(check.result, dateOfService);
  const fresh = resultAt.getTime() + policy.freshnessMs;
  const stale = next !== undefined && begins(next) > resultAt.getTime() ? Math.min(fresh, begins(next)) : fresh;
  const at = Math.max(stale, visit - policy.reverifyLeadMs);
  return at < visit ? new Date(at).toISOString() : undefined;
}

/** One verification request: the same event twice is one, a correction or a re-verification another. */
export function externalIdFor(key: string, fingerprint: string, round: number): string {
  return `elig_${digest([key, fingerprint, String(round)]).slice(0, 32)}`;
}

/** The plugin's own failure kind for a check given up (mappings/failure-kinds.json). */
export const NOT_VERIFIED = 'NotVerified';

/** How the correlation id of a failure this plugin stores begins (localCorrelationId). */
export const LOCAL = 'local-';

/**
 * The correlation id of the failure this plugin stores for a round it could not verify, sent
 * under `externalId`: a webhook of that round coming after all finds its check by it.
 */
export function localCorrelationId(externalId: string): string {
  return `${LOCAL}${externalId}`;
}

/**
 * Whether the check's result is this plugin's not-verified failure of its round (given up: the service failing, away
 * or asking for fewer requests), no answer of the service's: a send of it whose answer was lost may still have been verified there.
 */
export function givenUpUnverified(row: Pick<CheckRow, 'result' | 'externalId'>): boolean {
  if ((row.result as { correlationId?: unknown } | undefined)?.correlationId !== localCorrelationId(row.externalId)) return false;
  const outcome = storedOutcome(row.result);
  return outcome?.kind === 'failed' && outcome.failure.kind === NOT_VERIFIED;
}

/**
 * The externalId a check's next round (`round`) is sent under when it is sent again as it is (jobs retry, the worker
 * sending again what it gave up): a new one, but for a round given up unverified (givenUpUnverified), whose send, its
 * answer lost (a timeout, a 504), the service may have verified. Under that one the service answers with the
 * verification it made, or makes it now, where a new one would be a second verification, billed. Nothing the service
 * answered is kept under it: answered a failure to retry, or a result, a round has its new one (transitionFor, reverify);
 * nor is one given up more than SAME_VERIFICATION_MS before `now`.
 */
export function externalIdAgain(row: Pick<CheckRow, 'key' | 'fingerprint' | 'result' | 'resultAt' | 'externalId'>, round: number, now: Date): string {
  // A verification the lost send made is taken as a result of now (resultAt): a day after the give-up it is verified anew,
  // not taken days old as fresh for the visits it serves and for its re-verification.
  const recent = row.resultAt !== undefined && now.getTime() - Date.parse(row.resultAt) < SAME_VERIFICATION_MS;
  return recent && givenUpUnverified(row) && !lostEachTime(row) ? row.externalId : externalIdFor(row.key, row.fingerprint, round);
}

/** How long after a round was given up unverified it is sent again under its externalId (externalIdAgain). */
export const SAME_VERIFICATION_MS = 86_400_000;

/** How the detail of a round given up for the service not knowing its verification at each poll (a 404) begins. */
export const LOST_EACH_TIME = 'The verification service lost the verification each time';

/**
 * Whether the round was given up for the service losing its verification: each send again under its externalId was
 * answered with one a poll then found unknown. Under it the service answers that one again, and every retry would be
 * given up so; a new externalId is a verification the service can keep.
 */
function lostEachTime(row: Pick<CheckRow, 'result'>): boolean {
  const outcome = storedOutcome(row.result);
  return outcome?.kind === 'failed' && (outcome.problem.detail?.startsWith(LOST_EACH_TIME) ?? false);
}

/** Hashes of what the request carries: no patient data is stored or sent in clear by them. */
export function fingerprints(check: EligibilityCheck): { fingerprint: string; coverageFingerprint: string } {
  const { patient, subscriber, coverage, provider, clinicId } = check;
  const coverageParts = [
    clinicId,
    patient.firstName,
    patient.middleName ?? '',
    patient.lastName,
    patient.birthDate,
    patient.gender ?? '',
    patient.memberId ?? '',
    subscriber.firstName,
    subscriber.middleName ?? '',
    subscriber.lastName,
    subscriber.birthDate ?? '',
    subscriber.memberId,
    subscriber.relationship,
    coverage.payer.id ?? '',
    coverage.payer.name ?? '',
    coverage.groupNumber ?? '',
  ];
  const coverageFingerprint = digest(coverageParts);
  return { coverageFingerprint, fingerprint: digest([coverageFingerprint, check.dateOfService, provider?.npi ?? '']) };
}

function digest(parts: readonly string[]): string {
  return hash('sha256', JSON.stringify(parts), 'hex');
}
