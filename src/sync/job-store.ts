import * as z from 'zod';
import { EligibilityCheck, PatientInsuranceRecord, PlanPeriod } from '../domain';
import { outcomeKindOf, type OutcomeKind } from '../verification/outcome';

/**
 * The job store is the pipeline's source of truth: every message as received, the patients'
 * insurance, the appointments and each check's state. The interface is asynchronous and keeps no
 * process-local state that matters (claims are leases in the store, keys are unique in the
 * store), so a PostgreSQL implementation fits behind it as well as the SQLite default.
 */

export const CheckState = z.enum([
  'received',
  'submitted',
  'awaiting-result',
  'result-stored',
  'written',
  'needs-attention',
  /** Withdrawn because its plan no longer serves the visit (the PMS dropped it, or ended it before): the Coverage it wrote is to end in the chart, then cancelled. */
  'ending-coverage',
  'cancelled',
  'dead',
]);
export type CheckState = z.infer<typeof CheckState>;

/** The states a worker picks up when they are due (a cancelled check only while its verification is followed for its result). */
export const WORKABLE_STATES: readonly CheckState[] = ['received', 'submitted', 'awaiting-result', 'result-stored', 'written', 'ending-coverage', 'cancelled'];

/** The workable states whose work is the chart's alone (a result to write, a Coverage to end): a worker does it in places of its own. */
export const CHART_WORK_STATES: readonly CheckState[] = ['result-stored', 'ending-coverage'];
/** CHART_WORK_STATES for SQL, written out as the claims' partial index (checks_chart_due) has it. */
export const CHART_WORK_SQL = `('result-stored', 'ending-coverage')`;
/** The other workable states: work for the service (a send, a poll, a re-verification). */
export const SERVICE_WORK_STATES: readonly CheckState[] = WORKABLE_STATES.filter((state) => !CHART_WORK_STATES.includes(state));

/**
 * What a claim takes: up to `limit` due checks, of them at most `chart` of the chart's work
 * (CHART_WORK_STATES), taken first, and at most `service` of the service's (SERVICE_WORK_STATES);
 * each cap is `limit` when not given.
 */
export interface ClaimOptions {
  now: string;
  limit: number;
  chart?: number;
  service?: number;
  owner: string;
  leaseMs: number;
  /**
   * Told, once the claim is committed, how many of the checks it took another worker had leased:
   * its lease run out, or its process gone (on PostgreSQL, another instance's, killed or stopped).
   */
  tookOver?: ((checks: number) => void) | undefined;
}

/**
 * A claim in its order, for both stores (ClaimOptions): `take` leases up to a number of due checks
 * of one work, the chart's first, then the service's up to what those leave of `limit`.
 */
export async function claimInTurn(options: ClaimOptions, take: (work: 'chart' | 'service', limit: number) => CheckRow[] | Promise<CheckRow[]>): Promise<CheckRow[]> {
  const chartCap = Math.min(options.limit, options.chart ?? options.limit);
  const chart = chartCap > 0 ? await take('chart', chartCap) : [];
  const serviceCap = Math.min(options.limit - chart.length, options.service ?? options.limit);
  return serviceCap > 0 ? [...chart, ...(await take('service', serviceCap))] : chart;
}

export const WrittenIds = z.looseObject({
  requestId: z.string(),
  responseId: z.string(),
  /** The verification whose result the pair holds (the result's correlationId): absent in rows written before it was kept. */
  verification: z.string().optional(),
  /**
   * The round whose result it is: a round given up unverified is sent again under its externalId (externalIdAgain), and
   * given up again its failure has the same correlation id. Absent in rows written before it was kept.
   */
  round: z.number().int().min(0).optional(),
});
export type WrittenIds = z.infer<typeof WrittenIds>;

export const CheckRow = z.strictObject({
  /** The check's idempotency key: one clinic, patient, coverage and date of service. */
  key: z.string().min(1),
  state: CheckState,
  check: EligibilityCheck,
  patientKey: z.string().min(1),
  /** What the request says (names, birth dates, member ids, group, payer, provider): a change is a new verification. */
  fingerprint: z.string().min(1),
  /** The same, without the date of service: a fresh result for the coverage may serve another appointment. */
  coverageFingerprint: z.string().min(1),
  /** Counts verifications of this check: a correction or a re-verification is a new round, with a new externalId. */
  round: z.number().int().min(0),
  externalId: z.string().min(1),
  mode: z.enum(['sync', 'async']).optional(),
  portalId: z.string().optional(),
  correlationId: z.string().optional(),
  attempts: z.number().int().min(0),
  /** When this round was first sent to the service (pendingGiveUpMs counts from it). */
  submittedAt: z.string().optional(),
  /** When a worker should next look at it; absent when nothing is scheduled. */
  dueAt: z.string().optional(),
  lastError: z.string().optional(),
  /** The verification body as the service gave it (or as the pipeline made it for a check it could not send). */
  result: z.unknown().optional(),
  resultAt: z.string().optional(),
  written: WrittenIds.optional(),
  /** The verification whose fresh result this check uses instead of one of its own. */
  reusedFrom: z.string().optional(),
  /**
   * Why its visit stopped needing it (a cancellation, a move, a merge) while its result was on its
   * way to the chart (result-stored): a write in hand then may have reached the chart, so the check
   * is withdrawn once it is known whether its pair is there (the worker's write, or a look for it).
   */
  withdrawnBecause: z.string().optional(),
  /** When the message was received that dropped the check's plan, or ended it before the visit (ending-coverage): a Coverage a later message stated stays. */
  planDroppedAt: z.string().optional(),
  /** When a person dismissed it, needing attention or dead (jobs dismiss): it holds while this is the check's last change (dismissed). */
  dismissedAt: z.string().optional(),
  createdAt: z.string(),
  updatedAt: z.string(),
});
export type CheckRow = z.infer<typeof CheckRow>;

/** The states a check waits in for a person (jobs retry, or jobs dismiss once they have dealt with it). */
export const FOR_A_PERSON: readonly CheckState[] = ['needs-attention', 'dead'];

/**
 * Whether a person has dismissed the check as it is: one left to a person whose last change was
 * the dismissal. Nothing in the pipeline reads it: a late result, a new round or any other change
 * moves the check on as before, and a check changed since waits for a person again.
 */
export function dismissed(row: Pick<CheckRow, 'state' | 'dismissedAt' | 'updatedAt'>): boolean {
  return FOR_A_PERSON.includes(row.state) && row.dismissedAt !== undefined && row.dismissedAt === row.updatedAt;
}

/** The same of check `c` in SQL. */
export function dismissedSql(sql: CheckRowSql, c: string): string {
  // Never NULL, so that NOT of it holds for a check never dismissed.
  return `(${c}.state IN ${FOR_A_PERSON_SQL} AND COALESCE(${sql.field(c, ['dismissedAt'])}, '') = ${sql.field(c, ['updatedAt'])})`;
}

/** FOR_A_PERSON as an SQL list. */
export const FOR_A_PERSON_SQL = `(${FOR_A_PERSON.map((state) => `'${state}'`).join(', ')})`;

/**
 * A check as a patient's history is read for the Coverages of plans the PMS dropped
 * (checksOfPatient): what it says of its plan and of its write in the chart, and no more. Neither
 * its verification body nor its request's people: read and parsed for each of a patient's checks,
 * years of them, at each message that drops a plan, they were most of its cost.
 */
export const CheckOfPlan = z.strictObject({
  key: z.string().min(1),
  state: CheckState,
  /** Whether a pair of its is in the chart (CheckRow's written). */
  written: z.literal(true).optional(),
  planDroppedAt: z.string().optional(),
  /** A cancelled check's: whether it is followed for its verification's result, or holds one (endDroppedPlans marks such a check's drop). */
  dueAt: z.string().optional(),
  resultAt: z.string().optional(),
  check: z.strictObject({
    dateOfService: z.string(),
    source: z.strictObject({ kind: z.enum(['hl7', 'fhir']) }),
    /** The first identifier's system alone: whether every sender shares the patient. */
    patient: z.strictObject({ identifiers: z.array(z.strictObject({ system: z.string().optional() })) }),
    coverage: z.strictObject({ payer: z.strictObject({ id: z.string().optional(), name: z.string().optional() }), period: PlanPeriod.optional() }),
    subscriber: z.strictObject({ memberId: z.string() }),
  }),
});
export type CheckOfPlan = z.infer<typeof CheckOfPlan>;

/** A CheckOfPlan as both stores select it, each field by its path in the row's JSON (null where it has none). */
export interface CheckOfPlanRecord {
  key: string;
  state: string;
  written: boolean | number;
  plan_dropped_at: string | null;
  due_at: string | null;
  result_at: string | null;
  date_of_service: string;
  source_kind: string;
  patient_system: string | null;
  payer_id: string | null;
  payer_name: string | null;
  period_start: string | null;
  period_end: string | null;
  member_id: string;
}

export function checkOfPlanFrom(r: CheckOfPlanRecord): CheckOfPlan {
  const given = <T>(value: T | null) => value ?? undefined;
  // A period with neither bound (its dates deleted) holds every visit, as none does.
  const period = r.period_start !== null || r.period_end !== null ? { start: given(r.period_start), end: given(r.period_end) } : undefined;
  return CheckOfPlan.parse({
    key: r.key,
    state: r.state,
    written: r.written ? true : undefined,
    planDroppedAt: given(r.plan_dropped_at),
    dueAt: given(r.due_at),
    resultAt: given(r.result_at),
    check: {
      dateOfService: r.date_of_service,
      source: { kind: r.source_kind },
      patient: { identifiers: [{ system: given(r.patient_system) }] },
      coverage: { payer: { id: given(r.payer_id), name: given(r.payer_name) }, period },
      subscriber: { memberId: r.member_id },
    },
  });
}

/** awaiting-correction: an HL7 booking refused for what it said of the patient, waiting for an ADT to correct their record (HeldBooking). */
export const AppointmentStatus = z.enum(['booked', 'awaiting-insurance', 'awaiting-correction', 'self-pay', 'cancelled']);
export type AppointmentStatus = z.infer<typeof AppointmentStatus>;

export const AppointmentRow = z.strictObject({
  /** The source and the appointment's id there, e.g. hl7|BSD-MAIN|APT-1 or fhir|Appointment/123. */
  key: z.string().min(1),
  patientKey: z.string().min(1),
  dateOfService: z.string(),
  status: AppointmentStatus,
  /** Keys of the checks this appointment needs; another appointment that day may hold the same. */
  checkKeys: z.array(z.string()),
  /** What the checks are built from, so they can be built again when the patient's insurance changes. */
  basis: z.unknown(),
  updatedAt: z.string(),
});
export type AppointmentRow = z.infer<typeof AppointmentRow>;

export const MessageKind = z.enum(['hl7', 'webhook', 'fhir-notification']);
export type MessageKind = z.infer<typeof MessageKind>;

export const MessageStatus = z.enum(['received', 'handled', 'dead']);
export type MessageStatus = z.infer<typeof MessageStatus>;

export const MessageRow = z.strictObject({
  id: z.number().int(),
  kind: MessageKind,
  /** Unique per kind: a sender's control id, a webhook-id. A repeat is answered as before and not applied again. */
  dedupeKey: z.string(),
  receivedAt: z.string(),
  raw: z.string(),
  status: MessageStatus,
  /** Why it is dead, or what handling it did (never patient data). */
  detail: z.string().optional(),
  /** The answer that was sent (an HL7 message's ACKs), to send the same again for a repeat. */
  answer: z.string().optional(),
});
export type MessageRow = z.infer<typeof MessageRow>;

export type NewMessage = Omit<MessageRow, 'id'>;

/** A row of the messages table, as both stores name its columns. */
export interface MessageRecord {
  id: number;
  kind: string;
  dedupe_key: string;
  received_at: string;
  raw: string;
  status: string;
  detail: string | null;
  answer: string | null;
}

export function messageFrom(r: MessageRecord): MessageRow {
  return MessageRow.parse({
    id: r.id,
    kind: r.kind,
    dedupeKey: r.dedupe_key,
    receivedAt: r.received_at,
    raw: r.raw,
    status: r.status,
    ...(r.detail !== null && { detail: r.detail }),
    ...(r.answer !== null && { answer: r.answer }),
  });
}

/** What runs inside one store transaction: all of it commits, or none of it. */
export interface StoreTx {
  /** Adds a message, or returns the earlier one with the same kind and dedupe key. */
  addMessage(message: NewMessage): Promise<{ message: MessageRow; duplicate: boolean }>;
  updateMessage(id: number, change: Partial<Pick<MessageRow, 'status' | 'detail' | 'answer'>>): Promise<void>;
  /** The message kept under this kind and dedupe key, if one is. */
  findMessage(kind: MessageKind, dedupeKey: string): Promise<MessageRow | undefined>;
  /** The FHIR notifications kept dead whose detail begins with `prefix` (refusedOn's `Appointment/<id>: `). */
  deadLettersNaming(prefix: string): Promise<MessageRow[]>;

  getPatient(patientKey: string): Promise<PatientInsuranceRecord | undefined>;
  putPatient(patientKey: string, record: PatientInsuranceRecord): Promise<void>;

  getAppointment(key: string): Promise<AppointmentRow | undefined>;
  putAppointment(row: AppointmentRow): Promise<void>;
  /** The patient's appointments by date of service, but `except` (one the caller has just written, say). */
  appointmentsOfPatient(patientKey: string, except?: string): Promise<AppointmentRow[]>;
  /** Booked appointments (of any patient) that hold this check key. */
  appointmentsHolding(checkKey: string): Promise<AppointmentRow[]>;
  /** Booked appointments (of any patient) that hold a check of this FHIR Coverage (its source's, e.g. Coverage/123). */
  appointmentsVerifying(coverage: string): Promise<AppointmentRow[]>;

  getCheck(key: string): Promise<CheckRow | undefined>;
  putCheck(row: CheckRow): Promise<void>;
  /**
   * The checks made for this patient (their patientKey) under one of these subscriber member ids, in
   * one of `states`, as CheckOfPlan, unlocked: one to change is read again with getCheck.
   */
  checksOfPatient(patientKey: string, memberIds: readonly string[], states: readonly CheckState[]): Promise<CheckOfPlan[]>;
  checkByCorrelationId(correlationId: string): Promise<CheckRow | undefined>;
  /** The check whose send under this externalId is under way (submitted: the service's answer not stored yet). */
  sentUnder(externalId: string): Promise<CheckRow | undefined>;
  /** The checks of this coverage with a completed result taken at or after `since`, newest first. */
  freshResults(coverageFingerprint: string, since: string): Promise<CheckRow[]>;
  /**
   * The checks of this coverage whose verification is still to be sent or under way (received,
   * submitted, awaiting-result), and those cancelled without their round's result (answeredThisRound):
   * one cancelled with its request at the service still takes that result (the worker tells which by
   * their fields).
   */
  verifying(coverageFingerprint: string): Promise<CheckRow[]>;

  getMeta(key: string): Promise<string | undefined>;
  setMeta(key: string, value: string): Promise<void>;
}

export interface CheckFilter {
  states?: readonly CheckState[];
  /** Changed after this instant (updatedAt): on SQLite, what was dated by a clock since stepped back. */
  changedAfter?: string;
  limit?: number;
}

export interface StoreCounts {
  checks: Record<string, number>;
  messages: Record<string, number>;
  awaitingInsurance: number;
  /** HL7 bookings held for a correction of the patient's details (awaiting-correction). */
  awaitingCorrection: number;
  /** Checks left to a person (FOR_A_PERSON) that no person has dismissed. */
  forAPerson: number;
  /** Checks due now and not leased. */
  due: number;
  /** When the oldest due check became due. */
  oldestDueAt: string | undefined;
}

/**
 * The store was out of reach, or its connection was lost in the middle of the work (a restart or
 * failover of the database): nothing of the work is done, or it committed as the connection went
 * and a second run finds it done. The same work later is the remedy, not a person.
 */
export class StoreUnavailableError extends Error {
  constructor(cause: Error) {
    super(cause.message, { cause });
    this.name = 'StoreUnavailableError';
  }
}

/** How a store writes a field of a check row's JSON (of the table alias `t`, by its path) in SQL, and a text to compare as JavaScript does (code point by code point). */
export interface CheckRowSql {
  field(t: string, path: readonly string[]): string;
  asText(expression: string): string;
}

/**
 * Whether check `c` may be the one its plan's Coverage is ended through when the PMS drops the plan
 * (endDroppedPlans: the latest, by visit, of an HL7 patient's checks of the plan that rest in the
 * chart, their drop not seen), however old: a prune keeps it. Kept unless a later such check of the
 * same patient and plan is sure to be: the same member id, and the same payer id, or both without
 * one and the same payer name (planKey takes the name without case; names differing only so keep
 * both). A tie keeps both. A drop is seen (schedule's dropSeen) when the check is marked and its
 * plan's dates hold its visit (dayInPlan's 'within').
 */
export function planLatestSql(sql: CheckRowSql, c: string): string {
  const f = (t: string, path: string) => sql.field(t, path.split('.'));
  const day = (t: string) => sql.asText(f(t, 'check.dateOfService'));
  const dropSeen = (t: string) =>
    `(${f(t, 'planDroppedAt')} IS NOT NULL
      AND (${f(t, 'check.coverage.period.start')} IS NULL OR ${day(t)} >= ${f(t, 'check.coverage.period.start')})
      AND (${f(t, 'check.coverage.period.end')} IS NULL OR ${day(t)} <= ${f(t, 'check.coverage.period.end')}))`;
  const payer = (t: string, of: 'id' | 'name') => f(t, `check.coverage.payer.${of}`);
  return `(${f(c, 'check.source.kind')} = 'hl7' AND (${c}.state = 'written' OR ${f(c, 'written')} IS NOT NULL) AND NOT ${dropSeen(c)}
    AND NOT EXISTS (SELECT 1 FROM checks o WHERE ${f('o', 'patientKey')} = ${f(c, 'patientKey')}
      AND ${f('o', 'check.subscriber.memberId')} = ${f(c, 'check.subscriber.memberId')}
      AND (${payer('o', 'id')} = ${payer(c, 'id')} OR (${payer('o', 'id')} IS NULL AND ${payer(c, 'id')} IS NULL AND ${payer('o', 'name')} = ${payer(c, 'name')}))
      AND ${f('o', 'check.source.kind')} = 'hl7'
      AND (o.state = 'written' OR (o.state IN ('needs-attention', 'cancelled') AND ${f('o', 'written')} IS NOT NULL))
      AND NOT ${dropSeen('o')}
      AND ${day('o')} > ${day(c)}))`;
}

/**
 * Whether check `c` is done with before the cutoff: its result, its visit and every visit that
 * holds it before then. `at` names the statement's placeholders for the cutoff instant and its day.
 */
export function doneBeforeSql(sql: CheckRowSql, c: string, at: { before: string; day: string }): string {
  return `(${c}.result_at IS NULL OR ${c}.result_at < ${at.before}) AND ${sql.asText(sql.field(c, ['check', 'dateOfService']))} < ${at.day}
    AND NOT EXISTS (SELECT 1 FROM appointment_checks l JOIN appointments a ON a.key = l.appointment_key WHERE l.check_key = ${c}.key AND a.date_of_service >= ${at.day})`;
}

/**
 * The states in which a check rests for good unless a person acts: those a prune takes once its
 * visit is over (JobStore.prune). A check left to a person (needs-attention, dead) goes too: a visit
 * more than the retention period over has nothing left to verify, and `jobs retry` had that long.
 * The stores' partial indexes (checks_finished) name the same states.
 */
export const RESTING_STATES_SQL = `('cancelled', 'written', 'needs-attention', 'dead')`;

/**
 * Whether check `c` died ending its plan's Coverage (its retries used up while the chart was away): the
 * chart still holds that Coverage active, and `jobs retry` is the way to end it, however long ago the
 * visit was. A prune keeps it, unless a person has dismissed it (ended the Coverage by hand, say).
 */
export function endingLeftSql(sql: CheckRowSql, c: string): string {
  return `(${c}.state = 'dead' AND ${sql.field(c, ['planDroppedAt'])} IS NOT NULL AND NOT ${dismissedSql(sql, c)})`;
}

/** What a prune deletes, one kind at a time: see JobStore.prune. */
export const PRUNED = ['messages', 'checks', 'appointments'] as const;
export type Pruned = (typeof PRUNED)[number];
/** One batch of a prune: the cutoff, the most rows it takes, and where the batch before it stopped. */
export interface PruneBatch {
  before: string;
  limit: number;
  after?: string;
}
/** What one batch did: rows deleted, bodies cut, and where the next goes on from (none: nothing is left). */
export interface PruneDone {
  pruned: number;
  trimmed?: number;
  after?: string;
}

export interface JobStore {
  /** The schema version the store was upgraded from as this program opened it; undefined when it was at this program's, or new. */
  readonly upgradedFrom?: number | undefined;
  /**
   * The time by the clock instances sharing the store go by (PostgreSQL: the database's), for a
   * sync to time its work by: leases, due times and what it dates. None where one process works
   * the store (SQLite): that machine's clock.
   */
  now?(): Date;
  /**
   * Runs `work` in one transaction. A store shared by several instances may run it again after a
   * lost race (a deadlock, a key another instance inserted first), so `work` does nothing outside
   * `tx` that a second run would repeat.
   */
  transaction<T>(work: (tx: StoreTx) => Promise<T>): Promise<T>;
  /**
   * Leases up to `limit` due checks for `leaseMs`: no other worker takes them until the lease
   * runs out, so a worker that dies lets another pick its checks up. The chart's work comes first,
   * up to `chart`, then the service's, up to `service`, each the most overdue first (ClaimOptions):
   * the worker claims each into places of its own, so a result the service gave goes into the
   * chart as it comes, not after the batch's last send. One call, as a claim was before there
   * were two kinds: a claim of nothing answers on a full SQLite disk, and would say the store is
   * back (watchOutages) between two claims that fail.
   */
  claimDue(options: ClaimOptions): Promise<CheckRow[]>;
  /**
   * Called once before a worker takes its first check; returns how many checks a worker that is
   * gone still held, given back now. One process works a SQLite store: the first worker takes a
   * lock that the OS drops with the process (a kill -9 too), so whatever is still leased in the
   * file was a dead process's and goes on at once rather than when its lease runs out; a worker
   * in another process is refused while one works the file. Several instances share PostgreSQL:
   * there each worker's instance holds a lock on a connection of its own, which PostgreSQL drops
   * with the process, and the leases taken under a lock that is gone are free at once.
   */
  beginWork(): Promise<number>;
  /** Ends a lease early (the worker is done with the check, or gives it back). */
  release(key: string, owner: string): Promise<void>;
  /** When the next check falls due, for a worker deciding how long to sleep. */
  nextDueAt(): Promise<string | undefined>;
  /** The checks in the filter's states, the last changed first. */
  listChecks(filter?: CheckFilter): Promise<CheckRow[]>;
  listAppointments(status?: AppointmentStatus): Promise<AppointmentRow[]>;
  listMessages(filter?: { status?: MessageStatus; kind?: MessageKind; limit?: number }): Promise<MessageRow[]>;
  getMessage(id: number): Promise<MessageRow | undefined>;
  counts(now: string): Promise<StoreCounts>;
  /**
   * Takes a token from a rate bucket every instance shares (one per portal, say), refilled at
   * `perSecond` up to `perSecond`; returns how many milliseconds to wait before sending (0: now).
   */
  takeRateToken?(bucket: string, perSecond: number, now: string): Promise<number>;
  /**
   * Deletes one batch, at most `limit` rows, of the finished work of one kind from before `before`
   * (an instant), in one transaction: messages handled (dead letters stay for a person); checks
   * done with (cancelled, or written with nothing scheduled) or left (needing attention, or dead)
   * whose visit, and every appointment's that holds them, is before it, with their bodies and links,
   * but one that died ending its plan's Coverage (endingLeftSql) and the one each plan's Coverage is
   * ended through when the PMS drops it (the latest of an HL7 patient's plan whose write is in the
   * chart, its drop not seen yet: endDroppedPlans reads it however old); appointments whose visit is
   * before it and that hold no check. Patients stay. A check kept so (a plan's latest) loses its
   * result's benefits, `result.result`, once its visit and result are before `before` (`trimmed`
   * counts them): what reads it then needs the result's status and ids alone, and each patient's plan
   * would otherwise keep 10 to 30 KB for good. `after`, given back, goes on from where the last
   * batch of this run stopped (rows kept are not looked at again); undefined: nothing is left to look at.
   */
  prune(options: PruneBatch & { kind: Pruned }): Promise<PruneDone>;
  /** Whether the store answers (for /healthz). */
  ping(): Promise<void>;
  close(): Promise<void>;
  /**
   * Moves the end of a lease this owner holds to `leaseMs` after `now`, while a step is still in
   * flight; false when the lease is no longer the owner's (it ran out and another worker took it).
   */
  extendLease(options: { key: string; owner: string; now: string; leaseMs: number }): Promise<boolean>;
}

/**
 * Why a store at schema version `found` is not opened by this program, which knows `known`;
 * undefined when it may be. Only the process that works a store (serve, an embedded sync) upgrades
 * one: a reader (the jobs commands) that did would move the schema under a serve of the version
 * before, still running, and a serve started again at that version would then refuse the store.
 * The version is all an earlier program checks: a key added to a stored document (the strict
 * CheckRow, AppointmentRow, MessageRow, PatientInsuranceRecord) takes a migration of its own in
 * both stores, a table unchanged or not, or a program of the same version opens the store and
 * refuses the rows it cannot read one by one (as mergedInto was added, within SQLite 7).
 */
export function schemaRefusal(found: number, known: number, upgrade: boolean): string | undefined {
  if (found > known) return `job store schema version ${found} is newer than this program knows (${known}); upgrade the program`;
  if (found < known && !upgrade) return `job store schema version ${found} is older than this program's (${known}); start serve of this version on it first, which upgrades it`;
  return undefined;
}

/** Whether a stored verification body is a completed one (a result that may serve another appointment). */
export function hasCompletedResult(row: CheckRow): boolean {
  return resultKindOf(row) === 'completed';
}

/**
 * Whether the check holds its round's answer: a re-verification's round keeps the last round's
 * result until its own comes, older than its send (submittedAt), so that one is not. The stores'
 * `verifying` reads the same by result_at.
 */
export function answeredThisRound(row: Pick<CheckRow, 'resultAt' | 'submittedAt'>): boolean {
  return row.resultAt !== undefined && (row.submittedAt === undefined || row.resultAt >= row.submittedAt);
}

/** The kind of the check's result (its status), undefined while it has none. */
export function resultKindOf(row: CheckRow): OutcomeKind | undefined {
  const status = (row.result as { status?: unknown } | undefined)?.status;
  return typeof status === 'string' ? outcomeKindOf(status) : undefined;
}

/** A rate bucket as a store keeps it: tokens left (below zero while requests wait their turn) at a time. */
export interface RateBucket {
  tokens: number;
  atMs: number;
}

/**
 * How far ahead of the clock a rate bucket's time is taken for a clock stepped back, not for the
 * clocks of instances sharing the store differing by a moment's reading: they go by the
 * database's (JobStore.now).
 */
const CLOCK_STEPPED_BACK_MS = 60_000;

/**
 * One token from a bucket, as TokenBucket.reserve does in memory: refill for the time passed, take
 * one, and say how long until it is there. Both stores run this inside a transaction on the row.
 */
export function takeToken(bucket: RateBucket | undefined, perSecond: number, now: string): { bucket: RateBucket; waitMs: number } {
  const nowMs = Date.parse(now);
  if (!Number.isFinite(nowMs)) throw new Error('takeRateToken: now is not an ISO 8601 instant');
  if (!(perSecond > 0)) throw new Error('takeRateToken: perSecond must be above 0');
  const last = bucket ?? { tokens: perSecond, atMs: nowMs };
  // Clocks of several instances differ a little: time never runs backwards for the bucket. A bucket
  // further ahead was dated by a clock since stepped back (NTP correcting one that ran ahead): waited
  // for, it would refill nothing until this clock caught up, an hour or a day, each request waiting
  // longer than the last. It goes on from now, with the tokens it has.
  const since = last.atMs - nowMs > CLOCK_STEPPED_BACK_MS ? nowMs : last.atMs;
  const atMs = Math.max(since, nowMs);
  const tokens = Math.min(perSecond, last.tokens + ((atMs - since) / 1000) * perSecond) - 1;
  return { bucket: { tokens, atMs }, waitMs: tokens >= 0 ? 0 : Math.ceil((-tokens / perSecond) * 1000) };
}
