import type { OperationOutcome, OperationOutcomeIssue } from 'fhir/r4';

/** One issue as this project reports it: the element (FHIRPath) and what is wrong with it. */
export interface FhirIssue {
  expression: string;
  diagnostics: string;
  /** FHIR issue-type code; `required` for missing data, `value` for a wrong one, `invariant`, `structure`. */
  code?: OperationOutcomeIssue['code'];
  severity?: OperationOutcomeIssue['severity'];
}

/** One issue as one line: `Patient.birthDate: required`. */
export function describeFhirIssue(issue: Pick<FhirIssue, 'expression' | 'diagnostics'>): string {
  return `${issue.expression}: ${issue.diagnostics}`;
}

/** An issue of an answer: about an element (FHIRPath), several (the resource types a notification named), or none (the request as a whole). */
export type OutcomeIssue = Omit<FhirIssue, 'expression'> & { expression?: string | readonly string[] };

export function operationOutcome(issues: readonly OutcomeIssue[]): OperationOutcome {
  return {
    resourceType: 'OperationOutcome',
    issue: issues.map((i) => ({
      severity: i.severity ?? 'error',
      code: i.code ?? 'invalid',
      diagnostics: i.diagnostics,
      // R4 has no empty lists: an issue about no element has no expression.
      ...(i.expression !== undefined && i.expression.length > 0 && { expression: typeof i.expression === 'string' ? [i.expression] : [...i.expression] }),
    })),
  };
}

/**
 * The FHIR boundary's one error type: carries an OperationOutcome, and its message is the first
 * issue as one line, e.g. `Patient.birthDate: required`.
 */
export class FhirInputError extends Error {
  readonly outcome: OperationOutcome;

  constructor(issues: FhirIssue[]) {
    const first = issues[0];
    super(first ? `${describeFhirIssue(first)}${issues.length > 1 ? ` (+${issues.length - 1} more)` : ''}` : 'invalid FHIR input');
    this.name = 'FhirInputError';
    this.outcome = operationOutcome(issues);
  }
}
