/**
 * Limits FHIR has no element for, as plain benefits first (research A.6): a local benefit.type
 * with the number in allowed/usedUnsignedInt and the period in item.term; dates and period
 * lengths in extensions.
 */
import type { CoverageEligibilityResponseInsuranceItem as Item } from 'fhir/r4';
import type { AgeLimit, Frequency, HistoryEntry, WaitingPeriod } from '../../../verification/wire';
import { benefitTypeConcept, categoryConcept, mappedConcept, periodUnit, procedureConcept } from './codes';
import { complexExtension, extension } from './extensions';
import { itemSubject } from './item-subject';
import type { ResponseParts } from './parts';
import { systemUrl } from '../systems';
import { allowedCount, capitalised, defined, fhirDate, present, usedCount } from './values';

export function frequencyItem(f: Frequency, path: string, parts: ResponseParts): Item {
  const subject = itemSubject(f.category, f.procedureCodes);
  const unit = periodUnit(f.period);
  if (f.periodLength != null && !unit) parts.unmapped.push({ path: `${path}.periodLength`, value: f.periodLength });
  const lastServiceDate = fhirDate(f.lastServiceDate, `${path}.lastServiceDate`);
  return {
    ...subject,
    name: 'Frequency limit',
    // When it was last done, after the payer's words: in the last-service-date extension alone, once every 6 months, used 1,
    // reads as not covered again for a visit that is past the six months.
    description: lastServiceDate ? capitalised(defined([present(f.description)?.trim().replace(/\.+$/, ''), `last done ${lastServiceDate}`]).join('; ')) : f.description ?? undefined,
    // Coded annual, once every three calendar years would read as once a year: the term's code is for one period,
    // and its text says how long, since 'CalendarYear' or 'Months' beside a limit of 1 reads the same way to a person.
    term: f.periodLength != null && f.periodLength !== 1 && unit ? { text: every(f.periodLength, unit.unit, f.period) } : mappedConcept('term', f.period),
    benefit: [
      {
        type: benefitTypeConcept('frequency'),
        ...allowedCount(f.limit),
        ...usedCount(f.used),
        extension: defined([
          f.periodLength != null && unit
            ? extension('frequency-period', { valueDuration: { value: f.periodLength, unit: unit.unit, system: systemUrl('ucum'), code: unit.code } })
            : undefined,
          lastServiceDate ? extension('last-service-date', { valueDate: lastServiceDate }) : undefined,
        ]),
      },
    ],
  };
}

/** 'Every 60 Months', 'Every 3 years (CalendarYear)': the period's own word, beside the unit where that does not say it. */
function every(length: number, unit: string, period: string | null | undefined): string {
  const word = present(period);
  if (!word || word.toLowerCase() === unit) return `Every ${length} ${word ?? unit}`;
  return `Every ${length} ${unit} (${word})`;
}

export function ageLimitItem(a: AgeLimit): Item {
  return {
    ...itemSubject(a.category, a.procedureCodes),
    name: 'Age limit',
    benefit: defined([
      a.minAge != null ? { type: benefitTypeConcept('minimumAge'), ...allowedCount(a.minAge) } : undefined,
      a.maxAge != null ? { type: benefitTypeConcept('maximumAge'), ...allowedCount(a.maxAge) } : undefined,
    ]),
  };
}

export function waitingPeriodItem(w: WaitingPeriod, path: string): Item {
  const endsOn = fhirDate(w.endsOn, `${path}.endsOn`);
  return {
    category: categoryConcept(w.category),
    name: 'Waiting period',
    // Its end in an extension alone, a waiting period long over reads to the front desk as still in effect.
    description: endsOn ? `Ends ${endsOn}` : undefined,
    benefit: [
      {
        type: benefitTypeConcept('waitingPeriod'),
        ...allowedCount(w.months),
        extension: defined([endsOn ? extension('waiting-period-ends', { valueDate: endsOn }) : undefined]),
      },
    ],
  };
}

/** A past service: the procedure as productOrService, when and where in the mouth in service-history. */
export function historyItem(h: HistoryEntry, path: string): Item {
  const date = fhirDate(h.date, `${path}.date`);
  // A blank code names nothing: as productOrService it would be pruned, leaving the item with neither (ces-1).
  // A code padded with a space ('D1110 ') is the code, as itemSubject reads one.
  const code = present(h.procedureCode)?.trim();
  const [tooth, surface] = [present(h.tooth), present(h.surface)];
  return {
    ...(code ? { productOrService: procedureConcept(code) } : { category: categoryConcept(undefined) }),
    name: 'Service history',
    // When and where, in words too: in the service-history extension alone, an EHR shows a procedure code and no more, and
    // whether a crown on tooth 14 may be replaced yet turns on them.
    description: capitalised(defined([date && `done ${date}`, tooth && `tooth ${tooth}`, surface && `surface ${surface}`]).join(', ')),
    extension: defined([
      complexExtension('service-history', {
        date: date ? { valueDate: date } : undefined,
        tooth: h.tooth ? { valueString: h.tooth } : undefined,
        surface: h.surface ? { valueString: h.surface } : undefined,
      }),
    ]),
  };
}
