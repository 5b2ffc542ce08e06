import * as z from 'zod';
import { describeIssue, type EligibilityCheck } from '../domain';
import { requestFromCheck } from '../verification/request-from-check';
import type { VerificationRequest } from '../verification/wire';
import { CliError } from './io';

/** Where a check's payer came from, as its source names it: the message and IN1 fields, or the chart's Coverage. */
function origin(check: EligibilityCheck): { label: string; payerField: string } {
  return check.source.kind === 'hl7'
    ? { label: check.source.messageControlId, payerField: 'IN1-3/IN1-4' }
    : { label: check.source.coverage, payerField: 'Coverage.payor' };
}

/**
 * `convert … --as request`: a check as the v2 verification request body `verify` sends. The
 * portal comes from --portal or from the catalog's resolution of the payer; a payer the
 * catalog does not settle is an error naming the field the payer was read from.
 */
export function asRequest(check: EligibilityCheck, portal: string | undefined): VerificationRequest {
  const { label, payerField } = origin(check);
  const resolution = check.coverage.resolution;
  if (!portal) {
    const problem =
      resolution === undefined
        ? 'payer not resolved to a portal; pass --catalog or --portal'
        : resolution.status === 'unknown'
          ? 'payer not in the catalog; pass --portal'
          : resolution.status === 'ambiguous'
            ? 'payer matches several catalog payers; pass --portal'
            : resolution.syncPortals.length === 0
              ? 'payer has no portal for synchronous verification; pass --portal'
              : undefined;
    if (problem) throw new CliError(`${label}: ${payerField}: ${check.coverage.order} ${problem}`);
  }
  try {
    return requestFromCheck(check, portal ? { portalId: portal } : {});
  } catch (err) {
    if (!(err instanceof z.ZodError)) throw err;
    throw new CliError(`${label}: request ${describeIssue(err, '(body)')}`);
  }
}

/** The --as option both conversions take. */
export function shapeOf(value: string): 'check' | 'request' {
  if (value !== 'check' && value !== 'request') throw new CliError('--as: must be check or request', 2);
  return value;
}
