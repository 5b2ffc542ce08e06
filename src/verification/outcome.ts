/**
 * What a verification came to. The service names Partial and Failed; pending and success names
 * are not published, so the usual synonyms are accepted, and a status nobody knows is kept and
 * surfaced as `unknown`, never dropped. v1 shapes still met in the wild (errors in details.code /
 * details.message, coinsurance percentage.final as a string) are normalised with a warning.
 */
import { classifyFailure, type FailureClassification } from './failure-kinds';
import { describeIssue } from '../domain/issues';
import { HttpProblemDetails, type ProblemDetails, Verification, VerificationResult } from './wire';

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
  return STATUS_SYNONYMS[status.replace(/[\s_-]/g, '').toLowerCase()] ?? 'unknown';
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
  const word = status.replace(/[\s_-]/g, '').toLowerCase();
  if (word === 'valid' || word === 'validated') return 'valid';
  if (word === 'invalid' || word === 'rejected') return 'invalid';
  const kind = outcomeKindOf(status);
  return kind === 'completed' ? 'valid' : kind === 'failed' ? 'invalid' : kind === 'pending' ? 'pending' : 'unknown';
}

export type VerificationOutcome =
  | { kind: 'completed' | 'partial'; verification: Verification; result: VerificationResult; warnings: string[] }
  | {
      kind: 'failed';
      verification: Verification;
      problem: ProblemDetails;
      failure: FailureClassification;
      warnings: string[];
    }
  | { kind: 'pending'; verification: Verification; warnings: string[] }
  | { kind: 'unknown'; verification: Verification; status: string; warnings: string[] };

/** Parses a verification body (GET, sync answer or webhook) into its outcome. */
export function toOutcome(body: unknown): VerificationOutcome {
  const verification = Verification.parse(body);
  const warnings: string[] = [];
  const kind = outcomeKindOf(verification.status);
  switch (kind) {
    case 'completed':
    case 'partial': {
      const result = VerificationResult.parse(normaliseLegacyResult(verification.result ?? {}, warnings));
      return { kind, verification, result, warnings };
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
