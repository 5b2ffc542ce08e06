/**
 * HL7 dates and times (DT, DTM and the first component of TS) written as
 * YYYY[MM[DD[HHMM[SS[.S...]]]]][+/-ZZZZ]. A date of service or birth needs the day. The date is
 * taken as written: converting an appointment at 20:00-0500 to UTC would move it to the next day.
 */
export type DateReading = { ok: true; date: string } | { ok: false; reason: 'imprecise' | 'invalid' };

const DTM = /^(\d{4})(\d{2})?(\d{2})?(\d{2}(\d{2}(\d{2}(\.\d{1,4})?)?)?)?([+-]\d{4})?$/;

export function readHl7Date(value: string): DateReading {
  const m = DTM.exec(value.trim());
  if (!m) return { ok: false, reason: 'invalid' };
  const [, year = '', month, day, time] = m;
  if (month === undefined || day === undefined) return { ok: false, reason: 'imprecise' };
  const y = Number(year);
  const mo = Number(month);
  const d = Number(day);
  const realDay = mo >= 1 && mo <= 12 && d >= 1 && d <= daysIn(y, mo);
  if (y < 1850 || !realDay || (time !== undefined && !validTime(time))) return { ok: false, reason: 'invalid' };
  return { ok: true, date: `${year}-${month}-${day}` };
}

const DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** Days in a month (1-12) of the Gregorian calendar. */
function daysIn(year: number, month: number): number {
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  return month === 2 && leap ? 29 : (DAYS[month - 1] ?? 0);
}

function validTime(time: string): boolean {
  const hour = Number(time.slice(0, 2));
  const minute = time.length >= 4 ? Number(time.slice(2, 4)) : 0;
  const second = time.length >= 6 ? Number(time.slice(4, 6)) : 0;
  return hour < 24 && minute < 60 && second < 60;
}
