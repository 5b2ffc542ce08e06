import type { FhirIssue } from '../operation-outcome';
import type { Period } from './shapes';

/** FHIR dateTime: YYYY, YYYY-MM, YYYY-MM-DD, or a date and time with offset. */
const DATE_TIME = /^(\d{4})(?:-(0[1-9]|1[0-2])(?:-(0[1-9]|[12]\d|3[01])(?:T[\d:.]+(?:Z|[+-]\d{2}:\d{2}))?)?)?$/;

/**
 * Where a day (YYYY-MM-DD) falls against a Period: before it starts, after it ended, or within it.
 * Bounds compare at the precision written, in their own offset, as Appointment.start does: an end
 * of `2026-06` covers all of June. A bound that is no dateTime is an issue at `path`.start/end,
 * and counts as absent.
 */
export function dayInPeriod(period: Period | undefined, day: string, path: string, issues: FhirIssue[]): 'not-started' | 'ended' | 'within' {
  const start = bound(period?.start, 'start', `${path}.start`, issues);
  const end = bound(period?.end, 'end', `${path}.end`, issues);
  if (start !== undefined && day < start) return 'not-started';
  if (end !== undefined && day > end) return 'ended';
  return 'within';
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
