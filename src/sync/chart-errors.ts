import * as z from 'zod';
import { FhirInputError } from '../adapters/fhir/operation-outcome';
import { withoutQuotes } from './error-text';

/** The start of the lastError of a check whose result the chart refused (needs-attention): `jobs retry` writes it again, not verifying it again. */
export const CHART_REFUSED = 'chart write refused';

/** An issue the chart named: where, and the issue-type code; never the server's diagnostics, which may quote what was sent. */
export interface ChartIssue {
  expression: string;
  code?: string | undefined;
}

/**
 * Writing into the chart failed. `retryable` says whether the same write may succeed later
 * unchanged (the server was unreachable, busy, or raced by another writer): the pipeline keeps
 * the result and writes it when the server is back. Otherwise the write itself is wrong (refused
 * by validation or by the server) and needs a person. The message carries no patient data.
 */
export class ChartWriteError extends Error {
  readonly retryable: boolean;
  /** What failed, without the write it failed for: the reader, and a write's next attempt, say it so. */
  readonly reason: string;
  /** The HTTP status the FHIR server (or token endpoint) answered, when it answered. */
  readonly status: number | undefined;
  readonly issues: readonly ChartIssue[];

  constructor(message: string, options: { retryable: boolean; status?: number | undefined; issues?: readonly ChartIssue[] }) {
    super(`write eligibility: ${message}`);
    this.name = 'ChartWriteError';
    this.reason = message;
    this.retryable = options.retryable;
    this.status = options.status;
    this.issues = options.issues ?? [];
  }
}

/**
 * Statuses worth the same request again: timeouts, throttling, server trouble, and a version
 * conflict (409/412), because the next attempt reads the current version first.
 */
export function retryableStatus(status: number): boolean {
  return status === 408 || status === 409 || status === 412 || status === 425 || status === 429 || status >= 500;
}

const OutcomeIssues = z.looseObject({
  resourceType: z.literal('OperationOutcome'),
  issue: z.array(z.looseObject({ code: z.string().optional(), expression: z.array(z.string()).optional() })),
});

/** The issues of an OperationOutcome body, by element and code only. */
export function outcomeIssues(body: unknown): ChartIssue[] {
  const parsed = OutcomeIssues.safeParse(body);
  if (!parsed.success) return [];
  return parsed.data.issue.map((i) => {
    const first = i.expression?.[0];
    return { expression: first === undefined ? 'request' : elementsOf(first), code: i.code };
  });
}

/**
 * A chart's expression by its elements alone, as it is said in log lines (a write refused, a
 * notification's read refused or failing), which take no patient data: the values it may quote
 * are left out, a FHIRPath's literals (`Patient.name.where(family='Alvarez')`) and the resource a
 * validator names in a comment (HAPI's `Bundle.entry[0].resource/*Patient/pat-marco*\/.birthDate`),
 * whose id may be made of a name.
 */
function elementsOf(expression: string): string {
  return withoutQuotes(expression.replace(/\/\*([\s\S]*?)\*\//g, (_, named: string) => `/*${/^\s*([A-Za-z]+)\//.exec(named)?.[1] ?? ''}*/`));
}

/**
 * Any failure of one step of a write, as a ChartWriteError: our own refusal (FhirInputError,
 * built before anything is sent), an HTTP answer (the chart client's, or fhir-kit-client's for the
 * reader), or a network failure. fhir-kit-client's own message names the URL, which for a search
 * holds identifiers: never kept.
 */
export function toChartWriteError(err: unknown, step: string): ChartWriteError {
  if (err instanceof ChartWriteError) return err;
  if (err instanceof FhirInputError) {
    return new ChartWriteError(err.message, { retryable: false, issues: outcomeIssues(err.outcome) });
  }
  const response = answerOf(err);
  if (response) {
    const { text, ...answer } = chartAnswered(response, step);
    return new ChartWriteError(text, { ...answer, status: response.status });
  }
  const name = (err as { name?: unknown } | undefined)?.name;
  if (name === 'TimeoutError' || name === 'AbortError') {
    return new ChartWriteError(`the FHIR server did not answer the ${step} in time`, { retryable: true });
  }
  const code = networkCode(err);
  // Sent again, it would be as large again: a chart answering so is for a person to look at.
  if (answerTooLarge(err)) return new ChartWriteError(tooLargeToRead(`the FHIR server's answer to the ${step}`), { retryable: false });
  // By name, not instanceof: fetch's TypeError may come from another realm (a test VM, a worker).
  if (code !== undefined || ((err as { name?: unknown }).name === 'TypeError' && (err as { message?: unknown }).message === 'fetch failed')) {
    return new ChartWriteError(`the FHIR server could not be reached for the ${step}${code ? ` (${code})` : ''}`, { retryable: true });
  }
  return new ChartWriteError(`the ${step} failed unexpectedly${err instanceof Error ? ` (${err.name})` : ''}`, { retryable: false });
}

/** The HTTP answer an error carries (the chart client's, or fhir-kit-client's for the reader). */
export function answerOf(err: unknown): { status: number; data: unknown } | undefined {
  const response = (err as { response?: { status?: unknown; data?: unknown } } | undefined)?.response;
  return response && typeof response.status === 'number' ? { status: response.status, data: response.data } : undefined;
}

/**
 * What the chart's failed answer to a step says, by element and code (never its diagnostics nor
 * the URL asked), and whether the same request may be answered otherwise later (retryableStatus):
 * the writer's and the reader's one rule, where a refusal, a redirect or a body not in FHIR JSON is
 * for a person, asked again it would be answered so again.
 */
export function chartAnswered(response: { status: number; data: unknown }, step: string): { text: string; retryable: boolean; issues: ChartIssue[] } {
  const { status } = response;
  const issues = outcomeIssues(response.data);
  const first = issues[0] ? `: ${issues[0].expression}${issues[0].code ? ` (${issues[0].code})` : ''}${issues.length > 1 ? ` (+${issues.length - 1} more)` : ''}` : '';
  const redirect = redirected(status) ? `, ${REDIRECT_NOT_FOLLOWED}` : '';
  // A success is a failure only for what it carried: not JSON (a proxy's sign-in page, say).
  const unread = status >= 200 && status < 300 ? ', not in FHIR JSON' : '';
  return { text: `the FHIR server answered ${status} to the ${step}${first}${redirect}${unread}`, retryable: retryableStatus(status), issues };
}

/** Redirects are not followed, by the writer's requests nor the reader's (CHART_REQUESTS): the chart's URL is where it answers. */
export const redirected = (status: number) => status >= 300 && status < 400;
export const REDIRECT_NOT_FOLLOWED = 'a redirect, not followed: set the FHIR URL to where the chart answers';

/** An answer past the chart's limit (MAX_CHART_ANSWER_BYTES), refused by undici as it arrived. */
export function answerTooLarge(err: unknown): boolean {
  return networkCode(err) === 'UND_ERR_RES_EXCEEDED_MAX_SIZE';
}

/** What a person reads of an answer past the chart's limit, the writer's, the reader's or its authorization's. */
export function tooLargeToRead(answer: string): string {
  return `${answer} is larger than this plugin reads; not read`;
}

/** ECONNREFUSED, undici's UND_ERR_SOCKET and the like, from the error or its cause (fetch wraps them in a TypeError). */
export function networkCode(err: unknown): string | undefined {
  for (let e: unknown = err, depth = 0; e && depth < 4; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^(E[A-Z_]+|UND_ERR_[A-Z_]+)$/.test(code)) return code;
  }
  return undefined;
}
