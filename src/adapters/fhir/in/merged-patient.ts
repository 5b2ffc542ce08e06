import type { FhirIssue } from '../operation-outcome';
import type { AnyResource, BundleIndex } from './bundle-index';
import { Patient, type Reference } from './shapes';

/** How many merges in a row are followed: a longer chain is records replacing each other. */
export const MAX_MERGES = 5;

/** The Patient a merged record names as the one that replaced it (Patient.link of type replaced-by). */
export function replacedBy(resource: unknown): Reference | undefined {
  return Patient.safeParse(resource).data?.link?.find((l) => l.type === 'replaced-by' && l.other)?.other;
}

/**
 * The record a patient is kept under now. An EHR's merge (Epic) or combine (Oracle Health) leaves
 * the old record inactive with a link replaced-by, and moves its coverages to the one that
 * replaced it, so an appointment still naming the old record is verified, and written, as the
 * patient it was merged into. A successor the bundle does not hold is an issue.
 */
export function mergedInto(index: BundleIndex, patient: AnyResource, issues: FhirIssue[]): AnyResource | undefined {
  let current = patient;
  // The last record of a chain of MAX_MERGES is looked at too: it is the patient, unless it was merged again.
  for (let merges = 0; merges <= MAX_MERGES; merges++) {
    const next = replacedBy(current);
    if (!next) return current;
    if (merges === MAX_MERGES) break;
    const resolved = index.resolve(next, ['Patient'], current);
    if (resolved.kind !== 'found') {
      issues.push({ expression: "Patient.link.where(type='replaced-by').other", diagnostics: resolved.problem, code: 'not-found' });
      return undefined;
    }
    current = resolved.resource;
  }
  issues.push({ expression: "Patient.link.where(type='replaced-by')", diagnostics: `more than ${MAX_MERGES} merges in a row: records replacing each other`, code: 'business-rule' });
  return undefined;
}
