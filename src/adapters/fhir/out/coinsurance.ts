import type { CoverageEligibilityResponseInsuranceItem as Item, CoverageEligibilityResponseInsuranceItemBenefit as Benefit } from 'fhir/r4';
import type { Coinsurance, PercentRange } from '../../../verification/wire';
import { benefitTypeConcept, mappedConcept, notCoveredText } from './codes';
import { extension } from './extensions';
import { itemSubject } from './item-subject';
import { defined, percent, present } from './values';

/**
 * One item per coinsurance entry. percentage.final is the share the PLAN pays, stored as given
 * under the local code plan-pays-percent (never converted to copay-percent, the patient's share).
 * FHIR's allowed[x] has no range, so the range rides in percentage-range, with a plain value
 * beside it: the whole percent when start equals end, else the span as text.
 */
export function coinsuranceItem(c: Coinsurance): Item {
  const subject = itemSubject(c.category, c.procedureCodes);
  const final = c.percentage?.final;
  const text = present(c.percentage?.finalText);
  return {
    ...subject,
    // R4 reads an item without excluded as covered: "Not covered" on the benefit alone would contradict it.
    excluded: !final && text ? notCoveredText(text) : undefined,
    name: 'Coinsurance',
    network: mappedConcept('network', c.network),
    benefit: final ? [percentBenefit(final)] : text ? [textBenefit(text)] : [],
  };
}

/** A v1 percentage that is no number, "Not covered" above all, is what the front desk must read on the item: as given, not in unmapped-element. */
function textBenefit(text: string): Benefit {
  return { type: benefitTypeConcept('coinsurance'), allowedString: text };
}

function percentBenefit(final: PercentRange): Benefit {
  const low = Math.min(final.start, final.end);
  const high = Math.max(final.start, final.end);
  const plain =
    low !== high ? { allowedString: `${low}-${high}%` } : Number.isInteger(low) && low >= 0 ? { allowedUnsignedInt: low } : { allowedString: `${low}%` };
  return {
    type: benefitTypeConcept('coinsurance'),
    ...plain,
    extension: defined([extension('percentage-range', { valueRange: { low: percent(low), high: percent(high) } })]),
  };
}
