import { atDayEdge } from '../../../domain';
import { dateOfStart } from '../../local-date';
import type { FhirIssue } from '../operation-outcome';
import type { Period } from './shapes';

/** FHIR dateTime: YYYY, YYYY-MM, YYYY-MM-DD, or a date and time with offset. */
const DATE_TIME = /^(\d{4})(?:-(0[1-9]|1[0-2])(?:-(0[1-9]|[12]\d|3[01])(?:T[\d:.]+(?:Z|[+-]\d{2}:\d{2}))?)?)?$/;

/**
 * Where a day (YYYY-MM-DD) falls against a Period: before it starts, after it ended, or within it.
 * Bounds compare at the precision written (an end of `2026-06` covers all of June); one written as
 * an instant is dated as Appointment.start is (dateOfStart): where the practice is, given its
 * `timeZone`, since a chart that writes times in UTC ends Chicago's 30 November at 05:59:59Z on
 * the 1st; else in its own offset. One at its day's first or last moment (T00:00:00Z, T23:59:59.999-05:00) is a
 * date the chart keeps with a time, the day written, as the service's and an HL7 plan date's are (atDayEdge,
 * planDayIn): local midnight in UTC is 6 pm the day before in Chicago. A bound that is no dateTime is an issue at `path`.start/end,
 * and counts as absent.
 */
export function dayInPeriod(period: Period | undefined, day: string, path: string, issues: FhirIssue[], timeZone?: string): 'not-started' | 'ended' | 'within' {
  const start = bound(period?.start, 'start', `${path}.start`, issues, timeZone);
  const end = bound(period?.end, 'end', `${path}.end`, issues, timeZone);
  if (start !== undefined && day < start) return 'not-started';
  if (end !== undefined && day > end) return 'ended';
  return 'within';
}

/** The first (start) or last (end) calendar day a period bound written at any precision covers. */
function bound(value: string | undefined, side: 'start' | 'end', path: string, issues: FhirIssue[], timeZone: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const m = DATE_TIME.exec(value.trim());
  if (!m) {
    issues.push({ expression: path, diagnostics: 'must be a FHIR dateTime (YYYY, YYYY-MM, YYYY-MM-DD or with a time and offset)', code: 'value' });
    return undefined;
  }
  const [, year = '', month, day] = m;
  if (day !== undefined) return (timeZone !== undefined && !atDayEdge(value.trim()) && dateOfStart(value.trim(), timeZone)) || `${year}-${month}-${day}`;
  if (side === 'start') return `${year}-${month ?? '01'}-01`;
  const lastMonth = month ?? '12';
  // Day 0 of the next month is the last day of this one.
  const lastDay = new Date(Date.UTC(Number(year), Number(lastMonth), 0)).getUTCDate();
  return `${year}-${lastMonth}-${String(lastDay).padStart(2, '0')}`;
}
