import * as z from 'zod';
import { readMappingFile } from '../mapping-files';

export const FailureAction = z.enum(['retry-later', 'needs-a-person']);
export type FailureAction = z.infer<typeof FailureAction>;

const FailureKindsFile = z.looseObject({
  // Two kinds written alike but for case, hyphens or underscores would be one kind as a type URI is read (tableKind).
  // portalAway: a Failed answer of this kind says the payer's portal itself is away (its maintenance), not this check's
  // request: counted in the portal's outage watch as a 5xx of it is (service-outage.ts).
  kinds: z.record(z.string(), z.strictObject({ action: FailureAction, advice: z.string(), portalAway: z.literal(true).optional() })).superRefine((kinds, ctx) => {
    const seen = new Map<string, string>();
    for (const kind of Object.keys(kinds)) {
      const same = seen.get(looseWord(kind));
      if (same !== undefined) ctx.addIssue({ code: 'custom', path: [kind], message: `is ${same} written otherwise: a type URI names them alike` });
      seen.set(looseWord(kind), kind);
    }
  }),
  /** What the front desk reads of a kind the table does not list; a copy of the mappings from before it had one still reads. */
  unknown: z.strictObject({ advice: z.string() }).optional(),
  /** The request's fields filled from the office's setup, not the PMS; a copy without it takes every refusal for the data's. */
  setupFields: z.array(z.string().min(1)).optional(),
});

let file: z.infer<typeof FailureKindsFile> | undefined;
/** The file, read once; the sync reads it as it is created, so a bad edit stops it starting rather than failing a result. */
const failureKindsFile = () => (file ??= readMappingFile('failure-kinds.json', FailureKindsFile));

/** The table of kinds (failure-kinds.json). */
export function failureKinds() {
  return failureKindsFile().kinds;
}

/**
 * Whether a 422 names only fields the plugin fills from the office's setup (its clinic, portal and
 * stored credentials: 'portalId: no credentials are stored for this clinic and portal'): the
 * office's to fix with the setup commands, where the front desk, told to correct the request's
 * data in the practice-management system, found nothing wrong there.
 */
export function refusesSetup(fields: readonly string[]): boolean {
  const setup = failureKindsFile().setupFields ?? [];
  return fields.length > 0 && fields.every((field) => setup.includes(field));
}

export interface FailureClassification {
  /** The kind as the service names it, e.g. InvalidCredentials; kept as given when unknown. */
  kind: string;
  /** unknown: a kind the table does not list; kept and surfaced, treated as needing a person. */
  action: FailureAction | 'unknown';
  advice?: string;
  /** The answer says the payer's portal itself is away, not anything of this check: the portal's outage watch counts it. */
  portalAway?: true;
}

/**
 * The failure kind is the problem type URI's last segment (path, fragment or URN part). about:blank,
 * RFC 9457's type for a problem that says no more than its status, names no kind: its segment would read as a kind 'blank'.
 */
export function failureKindOf(problemType: string | null | undefined): string {
  if (problemType?.trim().toLowerCase() === 'about:blank') return 'Unknown';
  // The kind is a FHIR code in the chart: no space or control character around it, none doubled (a type the service
  // wrote with a tab, a trailing space or a NUL).
  const segment = problemType?.replace(/[/#:\s\p{Cc}]+$/u, '').split(/[/#:]/).pop()?.replace(/[\s\p{Cc}]+/gu, ' ').trim();
  return segment ? tableKind(segment) : 'Unknown';
}

/**
 * The table's name of a kind the type URI writes otherwise (`site-maintenance`, `INVALID_CREDENTIALS`),
 * as the service's statuses are read: read as unknown, a kind to retry would have waited for a person.
 */
function tableKind(segment: string): string {
  const kinds = failureKinds();
  if (Object.hasOwn(kinds, segment)) return segment;
  const word = looseWord(segment);
  return Object.keys(kinds).find((kind) => looseWord(kind) === word) ?? segment;
}

/** A word of the service's, case, spaces, underscores and hyphens aside. */
export function looseWord(text: string): string {
  return text.replace(/[\s_-]/g, '').toLowerCase();
}

export function classifyFailure(problemType: string | null | undefined): FailureClassification {
  const kind = failureKindOf(problemType);
  const known = failureKinds()[kind];
  if (known) return { kind, action: known.action, advice: known.advice, ...(known.portalAway && { portalAway: true as const }) };
  const unknown = failureKindsFile().unknown;
  return { kind, action: 'unknown', ...(unknown && { advice: unknown.advice }) };
}
