import type { FhirIssue } from '../operation-outcome';
import type { BundleIndex } from './bundle-index';
import type { ActiveCoverage } from './coverage';

/** FHIR dateTime: YYYY, YYYY-MM, YYYY-MM-DD, or a date and time with offset. */
const DATE_TIME = /^(\d{4})(?:-(0[1-9]|1[0-2])(?:-(0[1-9]|[12]\d|3[01])(?:T[\d:.]+(?:Z|[+-]\d{2}:\d{2}))?)?)?$/;

/**
 * The coverages in force on the date of service, by Coverage.period: one that starts after it or
 * ended before it makes no check, and the conversion says so in a note (information for a plan
 * not started yet, which is normal; a warning for one that ended, whose status the chart should
 * change). Dates compare at the precision written, in their own offset, as Appointment.start does:
 * an end of `2026-06` covers all of June.
 */
export function inForceOn(
  index: BundleIndex,
  coverages: readonly ActiveCoverage[],
  dateOfService: string | undefined,
  notes: FhirIssue[],
  issues: FhirIssue[],
): ActiveCoverage[] {
  if (dateOfService === undefined) return [...coverages];
  return coverages.filter(({ raw, coverage }) => {
    const path = `${index.pathOf(raw)}.period`;
    const start = bound(coverage.period?.start, 'start', `${path}.start`, issues);
    const end = bound(coverage.period?.end, 'end', `${path}.end`, issues);
    if (start !== undefined && dateOfService < start) {
      notes.push({ expression: `${path}.start`, diagnostics: 'starts after the date of service: no check', code: 'informational', severity: 'information' });
      return false;
    }
    if (end !== undefined && dateOfService > end) {
      notes.push({ expression: `${path}.end`, diagnostics: 'ended before the date of service, though active: not verified', code: 'business-rule', severity: 'warning' });
      return false;
    }
    return true;
  });
}

/** The first (start) or last (end) calendar day a period bound written at any precision covers. */
function bound(value: string | undefined, side: 'start' | 'end', path: string, issues: FhirIssue[]): string | undefined {
  if (value === undefined) return undefined;
  const m = DATE_TIME.exec(value.trim());
  if (!m) {
    issues.push({ expression: path, diagnostics: 'must be a FHIR dateTime (YYYY, YYYY-MM, YYYY-MM-DD or with a time and offset)', code: 'value' });
    return undefined;
  }
  const [, year = '', month, day] = m;
  if (day !== undefined) return `${year}-${month}-${day}`;
  if (side === 'start') return `${year}-${month ?? '01'}-01`;
  const lastMonth = month ?? '12';
  // Day 0 of the next month is the last day of this one.
  const lastDay = new Date(Date.UTC(Number(year), Number(lastMonth), 0)).getUTCDate();
  return `${year}-${lastMonth}-${String(lastDay).padStart(2, '0')}`;
}
