import type { CoverageEligibilityResponseInsuranceItem as Item } from 'fhir/r4';
import type { Deductible, Maximum } from '../../../verification/wire';
import { benefitTypeConcept, categoryConcept, mappedConcept } from './codes';
import { extension, type ExtensionKey } from './extensions';
import { capitalised, defined, dollarsText, money, said } from './values';

/**
 * Maximums: benefit-type `benefit` with the maximum as allowedMoney and what is used as
 * usedMoney; the remainder and carry-over amounts have no FHIR element, so extensions carry them.
 */
export function maximumItem(m: Maximum): Item {
  return {
    category: categoryConcept(m.category),
    name: 'Maximum',
    description: figures([
      ['remaining', m.remainingAmount],
      ['carryover', m.carryoverAmount],
      ['carryover remaining', m.remainingCarryoverAmount],
    ]),
    network: mappedConcept('network', m.network),
    unit: mappedConcept('unit', m.scope),
    term: mappedConcept('term', m.type),
    benefit: [
      {
        type: benefitTypeConcept('maximum'),
        allowedMoney: money(m.amount),
        usedMoney: money(m.usedAmount),
        extension: defined([
          moneyExtension('remaining-amount', m.remainingAmount),
          moneyExtension('carryover-amount', m.carryoverAmount),
          moneyExtension('remaining-carryover-amount', m.remainingCarryoverAmount),
        ]),
      },
    ],
  };
}

/**
 * Deductibles apply to dental care as a whole; the categories they are waived for ride along, in
 * words too: in the waived-category extensions alone, a deductible still owed reads as owed on cleanings.
 */
export function deductibleItem(d: Deductible): Item {
  const waived = said(d.waivedCategories);
  return {
    category: categoryConcept(undefined),
    name: 'Deductible',
    description: sentence([figures([['remaining', d.remainingAmount]]), waived.length > 0 ? `waived for ${waived.join(', ')}` : undefined]),
    network: mappedConcept('network', d.network),
    unit: mappedConcept('unit', d.scope),
    term: mappedConcept('term', d.type),
    benefit: [
      {
        type: benefitTypeConcept('deductible'),
        allowedMoney: money(d.amount),
        usedMoney: money(d.usedAmount),
        extension: defined([
          moneyExtension('remaining-amount', d.remainingAmount),
          ...waived.map((c) => extension('waived-category', { valueCodeableConcept: categoryConcept(c) })),
        ]),
      },
    ],
  };
}

/**
 * The figures R4 has no element for, in words: an EHR shows allowed and used, not extensions, and a
 * deductible a portal gives as amount and remaining alone would read as still owed.
 */
function figures(labelled: Array<[string, number | null | undefined]>): string | undefined {
  return sentence(labelled.map(([label, amount]) => (amount == null ? undefined : `${label} ${dollarsText(amount)}`)));
}

/** The parts that are there, joined by semicolons, the first capitalised: `Remaining $0.00; waived for Preventive`. */
function sentence(parts: Array<string | undefined>): string | undefined {
  return capitalised(defined(parts).join('; '));
}

function moneyExtension(key: ExtensionKey, amount: number | null | undefined) {
  const valueMoney = money(amount);
  return valueMoney && extension(key, { valueMoney });
}
