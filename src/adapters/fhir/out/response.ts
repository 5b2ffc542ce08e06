import type { CoverageEligibilityResponse, CoverageEligibilityResponseInsuranceItem as Item, Reference } from 'fhir/r4';
import type { VerificationOutcome } from '../../../verification/outcome';
import { entries, ProblemDetails, Verification, VerificationResult } from '../../../verification/wire';
import { FhirInputError } from '../operation-outcome';
import { systemUrl } from '../systems';
import { failureInforce } from './codes';
import { coinsuranceItem } from './coinsurance';
import { contextErrors, disposition, failureErrors } from './errors';
import { complexExtension, extension } from './extensions';
import { ageLimitItem, frequencyItem, historyItem, waitingPeriodItem } from './limits';
import { deductibleItem, maximumItem } from './maximums';
import { ResponseParts } from './parts';
import { insuranceFor, notInForceOn, periodMissesVisit } from './plan';
import { providerItem } from './provider';
import { insurerReference, relativeReference, requestReference } from './references';
import { unmappedElements } from './unmapped';
import { defined, fhirDateTime, isFhirDateTime, present, prune, stringValue } from './values';

export interface ResponseRefs {
  /** Patient/<id> in the chart. */
  patient: string;
  /** Coverage/<id> in the chart. */
  coverage: string;
  /** CoverageEligibilityRequest/<id> or a transaction's urn:uuid; absent: a logical reference by the correlationId. */
  request?: string | undefined;
  /** Organization/<id>; absent: a logical reference by the payer the result (or `payer`) names. */
  insurer?: string | undefined;
  /** The payer as the check named it, for a result that names none (Failed, Pending). */
  payer?: { name?: string | undefined; id?: string | undefined } | undefined;
}

export interface ResponseOptions {
  /** CoverageEligibilityResponse.created; defaults to now. */
  created?: string | undefined;
  /**
   * The idempotency key of the check this response is written for, as an identifier: with the
   * correlationId it names the response, since one verification's result may serve several checks.
   */
  checkKey?: string | undefined;
  /** The visit's date the eligibility is for, as the request states it: a reader of the response alone sees it too. */
  servicedDate?: string | undefined;
  /** The correlationId of the verification whose result this check reuses, made for another appointment; said in the disposition. */
  reusedFrom?: string | undefined;
}

const OUTCOME = { completed: 'complete', partial: 'partial', failed: 'error', pending: 'queued' } as const;

/**
 * InsuranceVerificationV3 as a CoverageEligibilityResponse. Every element of the result lands in
 * a standard element or a documented extension (mappings/fhir/extensions.json); elements this
 * version does not know are kept in unmapped-element. The response carries the correlationId
 * (and the check's key, when given) as identifiers, so writing it can be a conditional create.
 */
export function toCoverageEligibilityResponse(outcome: VerificationOutcome, refs: ResponseRefs, options: ResponseOptions = {}): CoverageEligibilityResponse {
  if (outcome.kind === 'unknown') {
    throw new FhirInputError([{ expression: 'status', diagnostics: 'is not Completed, Partial, Failed or Pending (or a known synonym)', code: 'code-invalid' }]);
  }
  const { verification } = outcome;
  const parts = new ResponseParts();
  const coverage = relativeReference('Coverage', refs.coverage, 'coverage');
  const result = outcome.kind === 'completed' || outcome.kind === 'partial' ? outcome.result : undefined;
  const payer = result?.plan?.payer;
  const notInForce = notInForceOn(result?.plan, options.servicedDate);
  const ofTheVisit = defined([notInForce, periodMissesVisit(result?.plan, options.servicedDate)]);
  const insurance = result
    ? { ...insuranceFor(result, coverage, parts, notInForce), item: items(result, parts) }
    : { coverage, inforce: outcome.kind === 'failed' ? failureInforce(outcome.failure.kind) : undefined };

  const unmapped = [
    ...unmappedElements(verification, Verification, ''),
    ...(result ? unmappedElements(result, VerificationResult, '.result') : []),
    ...(outcome.kind === 'failed' ? unmappedElements(outcome.problem, ProblemDetails, '.result') : []),
  ].map((u) => ({ ...u, path: u.path.slice(1) }));
  if (outcome.kind === 'completed' || outcome.kind === 'partial') unmapped.push(...outcome.unread);
  const created = serviceTime(verification.createdAt, 'createdAt', parts);
  const completed = serviceTime(verification.completedAt, 'completedAt', parts);

  const response: CoverageEligibilityResponse = {
    resourceType: 'CoverageEligibilityResponse',
    contained: parts.contained,
    extension: defined([
      created ? extension('verification-created', { valueDateTime: created }) : undefined,
      completed ? extension('verification-completed', { valueDateTime: completed }) : undefined,
      ...entries(result?.disclaimers, (d) => complexExtension('disclaimer', { type: stringValue(d.type), text: stringValue(d.text) })),
      ...[...unmapped, ...parts.unmapped].map((u) =>
        complexExtension('unmapped-element', { path: { valueString: u.path }, value: { valueString: JSON.stringify(u.value) } }),
      ),
    ]),
    identifier: defined([
      { system: systemUrl('correlationId'), value: verification.correlationId },
      options.checkKey ? { system: systemUrl('eligibilityCheck'), value: options.checkKey } : undefined,
      verification.externalId ? { system: systemUrl('verificationExternalId'), value: verification.externalId } : undefined,
    ]),
    status: 'active',
    purpose: ['validation', 'benefits'],
    patient: relativeReference('Patient', refs.patient, 'patient'),
    servicedDate: options.servicedDate,
    created: fhirDateTime(options.created, 'created') ?? new Date().toISOString(),
    request: refs.request ? requestReference(refs.request) : requestByCorrelation(verification.correlationId),
    outcome: OUTCOME[outcome.kind],
    disposition: options.reusedFrom ? `${disposition(outcome, ofTheVisit)} ${reusedNote(options.reusedFrom)}` : disposition(outcome, ofTheVisit),
    insurer: insurerReference(refs.insurer, {
      name: present(payer?.name) ?? refs.payer?.name,
      id: present(payer?.payerId) ?? refs.payer?.id,
      phone: payer?.phone,
    }),
    insurance: [insurance],
    error: outcome.kind === 'failed' ? failureErrors(outcome) : contextErrors(result?.contexts),
  };
  return prune(response);
}

/**
 * A timestamp of the service's as a dateTime. One that is none (wire.ts reads ISO 8601's forms) is
 * kept as sent, as a result's unreadable date is: refused, it kept the whole result out of the chart.
 */
function serviceTime(value: string | null | undefined, path: string, parts: ResponseParts): string | undefined {
  if (value == null || present(value) === undefined) return undefined;
  if (isFhirDateTime(value)) return value;
  parts.unmapped.push({ path, value });
  return undefined;
}

function items(result: VerificationResult, parts: ResponseParts): Item[] {
  const data = result.data ?? {};
  const at = (list: string) => (i: number) => `result.data.${list}[${i}]`;
  return [
    ...entries(data.maximums, (m) => maximumItem(m)),
    ...entries(data.deductibles, (d) => deductibleItem(d)),
    ...entries(data.coinsurance, (c) => coinsuranceItem(c)),
    ...entries(data.frequencies, (f, i) => frequencyItem(f, at('frequencies')(i), parts)),
    ...entries(data.ageLimits, (a) => ageLimitItem(a)),
    ...entries(data.waitingPeriods, (w, i) => waitingPeriodItem(w, at('waitingPeriods')(i))),
    ...entries(data.history, (h, i) => historyItem(h, at('history')(i))),
    ...(result.verificationProvider ? [providerItem(result.verificationProvider, parts)] : []),
  ];
}

function reusedNote(correlationId: string): string {
  return `Reused: the result of verification ${correlationId}, made for another appointment of the same coverage.`;
}

/** Until the request is written, it is found by the correlationId it will carry. */
function requestByCorrelation(correlationId: string): Reference {
  return { type: 'CoverageEligibilityRequest', identifier: { system: systemUrl('correlationId'), value: correlationId } };
}
