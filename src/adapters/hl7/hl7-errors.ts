/**
 * The HL7 boundary's one error type. Every problem names where it is (segment, its occurrence,
 * field, component) and what is wrong, never the value: most values in these messages are patient
 * data. The ACK's ERR segment, the CLI's one-line message and the result of handleHl7Message are
 * all made from it.
 */

/** HL7 table 0357, the message error condition codes this adapter uses. */
export const ERROR_CODES = {
  100: 'Segment sequence error',
  101: 'Required field missing',
  102: 'Data type error',
  103: 'Table value not found',
  200: 'Unsupported message type',
  201: 'Unsupported event code',
  202: 'Unsupported processing id',
  203: 'Unsupported version id',
  207: 'Application internal error',
} as const;
export type ErrorCode = keyof typeof ERROR_CODES;

/** AE: readable but unusable (the sender should fix the data); AR: not readable or not supported. */
export type RejectCode = 'AE' | 'AR';

/**
 * What a problem makes of the message: AE or AR reject it (an ERR of severity E); AA is a
 * warning: the message is used without the flawed datum, and the ERR says W.
 */
export type ProblemAckCode = RejectCode | 'AA';

export interface Hl7Problem {
  segment: string;
  /** Which occurrence of the segment, from 1 (the second IN1 is sequence 2). */
  sequence: number;
  field?: number | undefined;
  /** Which repetition of the field, from 1; the first when absent. */
  repetition?: number | undefined;
  component?: number | undefined;
  reason: string;
  code: ErrorCode;
  ackCode: ProblemAckCode;
}

/** `PID-7`, `IN1[2]-36`, `SCH-11.4`: where a problem is, the way the reason text names it. */
export function describeLocation(p: Pick<Hl7Problem, 'segment' | 'sequence' | 'field' | 'component'>): string {
  const segment = p.sequence > 1 ? `${p.segment}[${p.sequence}]` : p.segment;
  if (p.field === undefined) return segment;
  return `${segment}-${p.field}${p.component !== undefined ? `.${p.component}` : ''}`;
}

/** One problem as one line: `PID-7: birth date missing`. */
export function describeProblem(p: Hl7Problem): string {
  return `${describeLocation(p)}: ${p.reason}`;
}

/** One line: `PID-7: birth date missing`, with a count when there are more. */
export function describeProblems(problems: readonly Hl7Problem[]): string {
  const first = problems[0];
  if (!first) return 'message rejected';
  const more = problems.length > 1 ? ` (+${problems.length - 1} more)` : '';
  return `${describeProblem(first)}${more}`;
}

export class Hl7InputError extends Error {
  readonly problems: readonly Hl7Problem[];

  constructor(problems: Hl7Problem[]) {
    super(describeProblems(problems));
    this.name = 'Hl7InputError';
    this.problems = problems;
  }
}

/** A problem that makes the whole message unreadable or unsupported (AR). */
export function rejection(
  location: Pick<Hl7Problem, 'segment' | 'field'> & { sequence?: number },
  code: ErrorCode,
  reason: string,
): Hl7Problem {
  return { segment: location.segment, sequence: location.sequence ?? 1, field: location.field, reason, code, ackCode: 'AR' };
}

/** A readable message whose data cannot be used (AE), at the location a reader found. */
export function problemAt(
  where: Pick<Hl7Problem, 'segment' | 'sequence' | 'field' | 'repetition' | 'component'>,
  code: ErrorCode,
  reason: string,
): Hl7Problem {
  return located(where, code, reason, 'AE');
}

/** A flaw the message is used despite (AA, ERR severity W), at the location a reader found. */
export function warningAt(...args: Parameters<typeof problemAt>): Hl7Problem {
  return located(...args, 'AA');
}

function located(where: Parameters<typeof problemAt>[0], code: ErrorCode, reason: string, ackCode: 'AE' | 'AA'): Hl7Problem {
  // Not { ...where, reason, code, ackCode }: on Node 20 each key added after the spread is a call into V8's runtime.
  return Object.assign({}, where, { reason, code, ackCode });
}
