/**
 * What a verification came to. The service names Partial and Failed; pending and success names
 * are not published, so the usual synonyms are accepted, and a status nobody knows is kept and
 * surfaced as `unknown`, never dropped. v1 shapes still met in the wild (errors in details.code /
 * details.message, coinsurance percentage.final as a string) are normalised with a warning.
 */
import type * as z from 'zod';
import { classifyFailure, type FailureClassification, looseWord } from './failure-kinds';
import { describeIssue, valueAt } from '../domain/issues';
import { BenefitData, HttpProblemDetails, type ProblemDetails, Verification, VerificationResult } from './wire';

export type OutcomeKind = 'completed' | 'partial' | 'failed' | 'pending' | 'unknown';

const STATUS_SYNONYMS: Record<string, OutcomeKind> = {
  completed: 'completed',
  complete: 'completed',
  success: 'completed',
  succeeded: 'completed',
  successful: 'completed',
  done: 'completed',
  partial: 'partial',
  partiallycompleted: 'partial',
  failed: 'failed',
  failure: 'failed',
  error: 'failed',
  pending: 'pending',
  queued: 'pending',
  submitted: 'pending',
  processing: 'pending',
  inprogress: 'pending',
  running: 'pending',
};

export function outcomeKindOf(status: string): OutcomeKind {
  return STATUS_SYNONYMS[looseWord(status)] ?? 'unknown';
}

/**
 * A SQL condition that `status` (an expression giving a result's status as text) is of one of
 * `kinds`, as outcomeKindOf reads it: case, spaces, underscores and hyphens aside (SQLite and PostgreSQL alike).
 */
export function statusOfKindSql(status: string, kinds: readonly OutcomeKind[]): string {
  const names = Object.entries(STATUS_SYNONYMS).flatMap(([name, kind]) => (kinds.includes(kind) ? [`'${name}'`] : []));
  return `replace(replace(replace(lower(${status}), ' ', ''), '_', ''), '-', '') IN (${names.join(', ')})`;
}

/** The kind of a failure (InvalidCredentials, PatientNotFound, …), as its problem type names it; undefined for any other outcome. */
export function failureKindIn(outcome: VerificationOutcome): string | undefined {
  return outcome.kind === 'failed' ? outcome.failure.kind : undefined;
}

/** Whether a verification of this kind has its result: Pending, and a status this plugin does not know, are waited on. */
export function hasResult(kind: OutcomeKind): boolean {
  return kind === 'completed' || kind === 'partial' || kind === 'failed';
}

export type ValidationKind = 'valid' | 'invalid' | 'pending' | 'unknown';

/**
 * A credentials validation's status (Pending, Valid, Invalid are known) read with the same
 * synonyms as a verification's: Queued is pending, Success valid, Failed invalid.
 */
export function validationKindOf(status: string): ValidationKind {
  const word = looseWord(status);
  if (word === 'valid' || word === 'validated') return 'valid';
  if (word === 'invalid' || word === 'rejected') return 'invalid';
  const kind = outcomeKindOf(status);
  return kind === 'completed' ? 'valid' : kind === 'failed' ? 'invalid' : kind === 'pending' ? 'pending' : 'unknown';
}

/** A value of a result left out as not in the expected shape, where it was (`result.…`) and as it was sent. */
export interface UnreadValue {
  path: string;
  value: unknown;
}

export type VerificationOutcome =
  | { kind: 'completed' | 'partial'; verification: Verification; result: VerificationResult; warnings: string[]; unread: UnreadValue[] }
  | {
      kind: 'failed';
      verification: Verification;
      problem: ProblemDetails;
      failure: FailureClassification;
      warnings: string[];
    }
  | { kind: 'pending'; verification: Verification; warnings: string[] }
  | { kind: 'unknown'; verification: Verification; status: string; warnings: string[] };

/** A result's issues named from the verification that holds it (`result.…`), as a caller told of the body reads them. */
export function inResult(issues: readonly z.core.$ZodIssue[]): z.core.$ZodIssue[] {
  return issues.map((issue) => ({ ...issue, path: ['result', ...issue.path] }));
}

/**
 * A result the store keeps, as an outcome; undefined for one kept as the service sent it because it
 * could not be read (an answer left to a person), which no reader of the store can take further.
 */
export function storedOutcome(result: unknown): VerificationOutcome | undefined {
  try {
    return toOutcome(result);
  } catch {
    return undefined;
  }
}

/** Parses a verification body (GET, sync answer or webhook) into its outcome. */
export function toOutcome(body: unknown): VerificationOutcome {
  const verification = Verification.parse(body);
  const warnings: string[] = [];
  const kind = outcomeKindOf(verification.status);
  switch (kind) {
    case 'completed':
    case 'partial': {
      const { result, unread } = readableResult(normaliseLegacyResult(verification.result ?? {}, warnings), warnings);
      return { kind, verification, result, warnings, unread };
    }
    case 'failed': {
      const problem = normaliseProblem(verification.result ?? {}, warnings);
      return { kind, verification, problem, failure: classifyFailure(problem.type), warnings };
    }
    case 'pending':
      return { kind, verification, warnings };
    case 'unknown':
      // Quoted in a log line: a status of 500 KB (a signed webhook's, the service's fault) is not copied whole.
      warnings.push(`status ${JSON.stringify(verification.status.length > 60 ? `${verification.status.slice(0, 60)}…` : verification.status)} is not one this client knows; kept as is`);
      return { kind, verification, status: verification.status, warnings };
  }
}

/** Problem details from a body that may be v2 (type/detail) or v1 (details.code/details.message). */
export function normaliseProblem(body: unknown, warnings: string[]): ProblemDetails {
  const obj = isRecord(body) ? body : {};
  const details = isRecord(obj.details) ? obj.details : undefined;
  if (details && obj.type === undefined) {
    warnings.push('v1 error shape (details.code/details.message) normalised to problem details');
    const code = (typeof details.code === 'string' && details.code.trim()) || 'Unknown';
    const rest = Object.fromEntries(Object.entries(obj).filter(([k]) => k !== 'details'));
    return readableProblem({
      ...rest,
      type: `urn:v1-error:${code}`,
      title: rest.title ?? code,
      detail: typeof details.message === 'string' ? details.message : undefined,
    }, warnings);
  }
  return readableProblem(obj, warnings);
}

/** Problem details as far as they can be read: a malformed one still says what went wrong. */
function readableProblem(body: Record<string, unknown>, warnings: string[]): ProblemDetails {
  const parsed = HttpProblemDetails.safeParse(body);
  if (parsed.success) return parsed.data;
  warnings.push(`problem details not in the expected shape (${describeIssue(parsed.error)}); kept what could be read`);
  // Only the fields in error are left out: errors[], upstream errors and what the service added still say what failed.
  const unreadable = new Set(parsed.error.issues.map((issue) => issue.path[0]));
  const rest = HttpProblemDetails.safeParse(Object.fromEntries(Object.entries(body).filter(([key]) => !unreadable.has(key))));
  if (rest.success) return { ...rest.data, title: rest.data.title ?? 'Unreadable problem details' };
  return { title: 'Unreadable problem details' };
}

/**
 * A result as far as it can be read: each value not in the expected shape (a maximum a portal
 * gives as "Unlimited", a date as a number) is left out and kept, so one odd figure does not leave
 * the whole verification to a person: the rest is charted, and what was left out is charted with
 * it (toCoverageEligibilityResponse). An entry of a list becomes null, the others keeping their
 * index; a value left out that its place does not allow to be missing takes its holder with it, as
 * does what a benefit entry is of (its care, network, scope, term or period: QUALIFYING_KEYS), without
 * which it would say more than the payer did.
 * A result that is no object at all is not read. The warning names where, never what: it is logged.
 */
function readableResult(body: unknown, warnings: string[]): { result: VerificationResult; unread: UnreadValue[] } {
  const unread = new Map<string, UnreadValue>();
  let current = body;
  // Each round leaves out one value at least; a body that would take more rounds than this is no result.
  for (let round = 0; ; round++) {
    const parsed = VerificationResult.safeParse(current);
    const qualified = parsed.success ? entriesQualifiedUnread(parsed.data) : [];
    if (parsed.success && qualified.length === 0) {
      if (unread.size > 0) warnings.push(`result values not in the expected shape were left out and kept in the response's unmapped elements: ${[...unread.keys()].join(', ')}`);
      return { result: parsed.data, unread: [...unread.values()] };
    }
    if (round === MAX_ROUNDS && !parsed.success) throw parsed.error;
    const copy = structuredClone(current) as Record<string, unknown>;
    for (const path of parsed.success ? qualified : parsed.error.issues.map((issue) => issue.path)) {
      // Missing where it may not be, or left out already (null in a list that takes none): its holder goes instead.
      const odd = valueAt(copy, path) == null ? path.slice(0, -1) : path;
      // What an entry of the benefits is of, left out, would widen it: its care (itemSubject), a panoramic x-ray once in
      // 60 months charted as any care once in 60 months; its network, an in-network 80 % as any network's; its period
      // length, once in 60 months as once a month. The entry goes with it, kept whole; a figure goes alone.
      const at = odd[0] === 'data' && typeof odd[2] === 'number' && QUALIFYING_KEYS.has(String(odd[3])) ? odd.slice(0, 3) : odd;
      if (at.length === 0) throw parsed.success ? new Error('result: nothing to leave out') : parsed.error;
      const holder = valueAt(copy, at.slice(0, -1));
      // Gone with a holder left out before it in this round.
      if (holder === null || typeof holder !== 'object') continue;
      const name = `result${at.map((key) => (typeof key === 'number' ? `[${key}]` : `.${String(key)}`)).join('')}`;
      // Kept once, whole: what was kept from inside it goes with it.
      for (const kept of unread.keys()) if (kept.startsWith(name) && /^[.[]/.test(kept.slice(name.length))) unread.delete(kept);
      unread.set(name, { path: name, value: valueAt(body, at) });
      const key = at[at.length - 1] as PropertyKey;
      if (Array.isArray(holder)) holder[key as number] = null;
      else delete (holder as Record<PropertyKey, unknown>)[key];
    }
    current = copy;
  }
}

const MAX_ROUNDS = 50;
/** The keys of a benefit entry (data.frequencies[i], ...) that say what it is of: its care, network, who, term and period, and what it waives. */
const QUALIFYING_KEYS = new Set(['category', 'procedureCodes', 'procedureCode', 'network', 'scope', 'type', 'period', 'periodLength', 'waivedCategories']);

/**
 * Where a benefit entry says what it is of in a key its kind is not read with (a deductible's
 * category, a waiting period's procedure codes, a frequency's network): charted without it, an
 * orthodontic deductible reads as the plan's, a crown's wait as all dental care's, an
 * out-of-network limit as every network's. Each such key's path, its entry to go whole with it.
 */
function entriesQualifiedUnread(result: VerificationResult): PropertyKey[][] {
  const found: PropertyKey[][] = [];
  for (const [list, read] of KEYS_READ) {
    const listed = (result.data as Record<string, ReadonlyArray<object | null> | null | undefined> | null | undefined)?.[list] ?? [];
    listed.forEach((entry, index) => {
      for (const [key, value] of Object.entries(entry ?? {})) {
        if (QUALIFYING_KEYS.has(key) && !read.has(key) && saysSomething(value)) found.push(['data', list, index, key]);
      }
    });
  }
  return found;
}

/**
 * The keys each of BenefitData's lists reads its entries with, taken from its schema once, not at each
 * result. Each list is one of entries or nulls (ListOf); its index signature, what the service adds, is not walked.
 */
const KEYS_READ: ReadonlyArray<[string, ReadonlySet<string>]> = Object.entries(BenefitData.shape).map(([list, schema]) => [list, new Set(Object.keys(schema.unwrap().unwrap().element.unwrap().shape))]);

/** A blank word or an empty list names nothing, as the writer reads them. */
const saysSomething = (value: unknown) => value != null && !(typeof value === 'string' && value.trim() === '') && !(Array.isArray(value) && value.length === 0);

/**
 * v1 wrote coinsurance percentage.final as a string ("80", "80%", "50-80"); v2 as {start, end}.
 * A string that is no percentage ("Not covered") is kept as finalText, never dropped.
 */
function normaliseLegacyResult(result: unknown, warnings: string[]): unknown {
  if (!isRecord(result) || !isRecord(result.data) || !Array.isArray(result.data.coinsurance)) return result;
  let changed = false;
  const coinsurance = result.data.coinsurance.map((entry: unknown) => {
    if (!isRecord(entry) || !isRecord(entry.percentage) || typeof entry.percentage.final !== 'string') return entry;
    const { final, ...percentage } = entry.percentage;
    const range = parsePercentString(final);
    changed = true;
    return { ...entry, percentage: range ? { ...percentage, final: range } : { ...percentage, finalText: final } };
  });
  if (!changed) return result;
  warnings.push('v1 coinsurance percentage.final strings normalised to {start, end}');
  return { ...result, data: { ...result.data, coinsurance } };
}

export function parsePercentString(text: string): { start: number; end: number } | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*%?\s*(?:(?:-|–|to)\s*(\d+(?:\.\d+)?)\s*%?)?\s*$/.exec(text);
  if (!m) return undefined;
  const start = Number(m[1]);
  const end = m[2] === undefined ? start : Number(m[2]);
  return { start: Math.min(start, end), end: Math.max(start, end) };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
