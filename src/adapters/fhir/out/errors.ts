/**
 * error[] and disposition: what did not come back (a Partial's contexts) and why a verification
 * failed (kind, title, detail, every upstream error and field error), so staff read it in the
 * chart and a program can act on the codes.
 */
import type { CoverageEligibilityResponseError as ResponseError } from 'fhir/r4';
import type { UnreadValue, VerificationOutcome } from '../../../verification/outcome';
import { entries, type Context, type Disclaimer, type PlanAssignment } from '../../../verification/wire';
import { failureActionCoding, failureKindConcept, issueConcept } from './codes';
import { extension } from './extensions';
import { defined, present, uriOf } from './values';

type Failed = Extract<VerificationOutcome, { kind: 'failed' }>;

export function contextErrors(contexts: ReadonlyArray<Context | null> | null | undefined): ResponseError[] {
  return entries(contexts, (c) => ({
    code: issueConcept('context', present(c.detail) ?? `${present(c.dataPoint) ?? present(c.portalId) ?? 'a data point'} was not retrieved`),
    extension: defined([
      c.dataPoint ? extension('data-point', { valueString: c.dataPoint }) : undefined,
      c.portalId ? extension('portal', { valueString: c.portalId }) : undefined,
    ]),
  }));
}

export function failureErrors({ problem, failure }: Failed): ResponseError[] {
  const kind: ResponseError = {
    code: failureKindConcept(failure.kind, problem.title ?? undefined),
    extension: defined([
      problem.detail ? extension('error-detail', { valueString: problem.detail }) : undefined,
      problem.type ? extension('problem-type', { valueUri: uriOf(problem.type) }) : undefined,
      problem.status != null ? extension('problem-status', { valueInteger: problem.status }) : undefined,
      problem.instance ? extension('problem-instance', { valueUri: uriOf(problem.instance) }) : undefined,
      extension('failure-action', { valueCoding: failureActionCoding(failure.action) }),
    ]),
  };
  const upstream = (problem.upstreamErrors ?? []).map((u) => ({
    code: issueConcept('upstream', present(u.detail) ?? `${present(u.portalId) ?? 'an upstream source'} failed`),
    extension: defined([u.portalId ? extension('portal', { valueString: u.portalId }) : undefined]),
  }));
  const fields = (problem.errors ?? []).map((e) => ({
    code: issueConcept('field', `${present(e.message) ?? 'invalid'}${present(e.code) ? ` (${e.code})` : ''}`),
    extension: defined([e.field ? extension('error-field', { valueString: e.field }) : undefined]),
  }));
  return [kind, ...upstream, ...fields];
}

/**
 * One paragraph for people: the status as the service gave it, then what matters most; ofTheVisit, what the
 * result's own dates say of the visit's (why the plan is not in force then, what period its figures are of).
 */
export function disposition(outcome: VerificationOutcome, ofTheVisit: string[] = []): string {
  const status = outcome.verification.status;
  switch (outcome.kind) {
    case 'completed':
    case 'partial': {
      const { plan, contexts, disclaimers } = outcome.result;
      const [name, planStatus] = [present(plan?.name), present(plan?.status)];
      return sentences([
        `${status}.`,
        planStatus || name ? `Plan${name ? ` ${name}` : ''}${planStatus ? `: ${planStatus}` : ''}.` : undefined,
        ...ofTheVisit,
        assignedTo(plan?.assignment),
        ...notRetrieved(entries(contexts, (c) => present(c.detail) ?? present(c.dataPoint) ?? present(c.portalId) ?? 'unnamed'), outcome.kind === 'partial'),
        // Else what was left out would read as not given: an "Unlimited" maximum as none.
        outcome.unread.length > 0 ? `Not read, kept with this response as sent: ${list(outcome.unread.map(unreadText))}` : undefined,
        ...entries(disclaimers, disclaimerText),
      ]);
    }
    case 'failed': {
      const { problem, failure } = outcome;
      return sentences([
        `${status} (${failure.kind})${present(problem.title) ? `: ${problem.title}` : ''}.`,
        present(problem.detail),
        problem.upstreamErrors?.length ? `Upstream: ${list(problem.upstreamErrors.map((u) => present(u.detail) ?? present(u.portalId) ?? 'unnamed'))}` : undefined,
        problem.errors?.length
          ? `Fields: ${list(problem.errors.map((e) => `${present(e.field) ?? '(field)'}: ${present(e.message) ?? present(e.code) ?? 'invalid'}`))}`
          : undefined,
        failure.advice,
      ]);
    }
    case 'pending':
      return `${status}: the verification has not completed yet.`;
    case 'unknown':
      return `${status}.`;
  }
}

/**
 * The office and provider a plan assigns the member to (a DHMO), where a person reads it: a visit
 * to another office is not covered, and in the plan-assignment extension alone an EHR shows nothing of it.
 */
function assignedTo(assignment: PlanAssignment | null | undefined): string | undefined {
  const office = assignment?.office;
  const [officeName, officeId] = [present(office?.name), present(office?.officeId)];
  const npi = present(assignment?.provider?.npi);
  const provider = [present(assignment?.provider?.firstName), present(assignment?.provider?.lastName)].filter(Boolean).join(' ') || (npi && `NPI ${npi}`);
  const parts = [
    officeName || officeId ? `office ${officeName ?? ''}${officeName && officeId ? ` (${officeId})` : (officeId ?? '')}` : undefined,
    provider ? `provider ${provider}` : undefined,
  ];
  return parts.some(Boolean) ? `Assigned to ${defined(parts).join(', ')}.` : undefined;
}

/**
 * Where, and a short value as sent ("Unlimited"); a longer one is in the unmapped element alone, as
 * is a whole number past 2^53, which JSON.parse has already rounded to digits that were not sent.
 */
function unreadText({ path, value }: UnreadValue): string {
  const exact = typeof value === 'string' || typeof value === 'boolean' || (typeof value === 'number' && (!Number.isInteger(value) || Number.isSafeInteger(value)));
  const text = exact ? JSON.stringify(value) : undefined;
  return text && text.length <= 40 ? `${path} ${text}` : path;
}

function disclaimerText(d: Disclaimer): string | undefined {
  const [type, text] = [present(d.type), present(d.text)];
  if (!text) return type ? `${type}.` : undefined;
  return type ? `${type}: ${text}` : text;
}

const sentences = (parts: Array<string | undefined>) => defined(parts).join(' ');
/** Details are sentences of their own; joined, they lose their full stops to one at the end. */
const list = (details: string[]) => `${details.map((d) => d.trim().replace(/\.+$/, '')).join('; ')}.`;
/** What a Partial could not retrieve; one that names nothing is said so, else it would read as complete. */
const notRetrieved = (details: string[], partial: boolean) =>
  details.length > 0 ? [`Not retrieved: ${list(details)}`] : partial ? ['Not retrieved: the service did not say what.'] : [];
