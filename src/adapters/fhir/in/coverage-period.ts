import type { FhirIssue } from '../operation-outcome';
import type { BundleIndex } from './bundle-index';
import type { ActiveCoverage } from './coverage';
import { dayInPeriod } from './period';

/**
 * The coverages in force on the date of service, by Coverage.period: one that starts after it or
 * ended before it makes no check, and the conversion says so in a note (information for a plan
 * not started yet, which is normal; a warning for one that ended, whose status the chart should
 * change). Bounds compare at the precision written, an instant dated where the practice is (dayInPeriod).
 */
export function inForceOn(
  index: BundleIndex,
  coverages: readonly ActiveCoverage[],
  dateOfService: string | undefined,
  notes: FhirIssue[],
  issues: FhirIssue[],
  timeZone: string | undefined,
): ActiveCoverage[] {
  if (dateOfService === undefined) return [...coverages];
  return coverages.filter(({ raw, coverage }) => {
    const path = `${index.pathOf(raw)}.period`;
    const place = dayInPeriod(coverage.period, dateOfService, path, issues, timeZone);
    if (place === 'not-started') {
      notes.push({ expression: `${path}.start`, diagnostics: 'starts after the date of service: no check', code: 'informational', severity: 'information' });
    } else if (place === 'ended') {
      notes.push({ expression: `${path}.end`, diagnostics: 'ended before the date of service, though active: not verified', code: 'business-rule', severity: 'warning' });
    }
    return place === 'within';
  });
}
