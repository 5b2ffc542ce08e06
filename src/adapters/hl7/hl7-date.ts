import { dateOfStart, wallClockRepeated } from '../local-date';

/**
 * HL7 dates and times (DT, DTM and the first component of TS) written as
 * YYYY[MM[DD[HHMM[SS[.S...]]]]][+/-ZZZZ]. HL7 allows four digits of a second; many engines write
 * six (microseconds), and those are read too, to the millisecond: the digits after it are dropped,
 * not rounded, so 23:59:59.9999 is still that day. A date of service or birth needs the day. The date is
 * taken as written: converting an appointment at 20:00-0500 to UTC would move it to the next day.
 * (An appointment's start and a plan's dates with an offset are dated where the clinic is, when
 * clinics.json says where: see dayIn.)
 */
export type DateReading = { ok: true; date: string } | { ok: false; reason: 'imprecise' | 'invalid' };

/** Each part only after the one before it: a time after a month without its day is no date, not one without a day. */
const DTM = /^(\d{4})(?:(\d{2})(?:(\d{2})(\d{2}(\d{2}(\d{2}(\.\d+)?)?)?)?)?)?([+-]\d{4})?$/;

/**
 * The day a value names. Given an edge, a value to the month or the year stands for its first or
 * its last day (a plan's dates: `202612` as an expiration date is 2026-12-31, as FHIR's
 * Coverage.period `2026-12` is the whole month); without one, the day must be written.
 */
export function readHl7Date(value: string, edge?: 'first' | 'last'): DateReading {
  const m = DTM.exec(value.trim());
  if (!m) return { ok: false, reason: 'invalid' };
  const [, year = '', writtenMonth, writtenDay, time, , , , offset] = m;
  if (edge === undefined && (writtenMonth === undefined || writtenDay === undefined)) return { ok: false, reason: 'imprecise' };
  const month = writtenMonth ?? (edge === 'first' ? '01' : '12');
  const day = writtenDay ?? (edge === 'first' ? '01' : String(daysIn(Number(year), Number(month))));
  const y = Number(year);
  const mo = Number(month);
  const d = Number(day);
  const realDay = mo >= 1 && mo <= 12 && d >= 1 && d <= daysIn(y, mo);
  if (y < 1850 || !realDay || (time !== undefined && !validTime(time)) || (offset !== undefined && !validOffset(offset))) return { ok: false, reason: 'invalid' };
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

/**
 * An offset some clock keeps: minutes below 60, and no further from UTC than Kiribati's +14:00.
 * +9999 moved a visit dated where its clinic is four days back.
 */
function validOffset(offset: string): boolean {
  const hours = Number(offset.slice(1, 3));
  const minutes = Number(offset.slice(3, 5));
  return minutes < 60 && hours * 60 + minutes <= 14 * 60;
}

/**
 * The instant a time written with an offset names (ISO 8601, UTC), to the hour at least (its
 * start: 2024061100+0000 is a visit of 5 pm in California); undefined for a date, or a time
 * without an offset (the sender's local time).
 */
export function instantWritten(value: string): string | undefined {
  const at = instantOf(value, HOUR_MS);
  return at?.zoned ? new Date(at.ms).toISOString() : undefined;
}

/**
 * The day a time written with an offset (instantWritten) falls on in `timeZone`: an engine that
 * writes times in UTC ends a plan on Los Angeles' 30 November at 20241201075959+0000. Undefined
 * for a date, a local time or no zone known, which are dated as written.
 */
export function dayIn(value: string, timeZone: string | undefined): string | undefined {
  const instant = timeZone === undefined ? undefined : instantWritten(value);
  return instant === undefined ? undefined : dateOfStart(instant, timeZone);
}

/**
 * A time at its day's first or last moment, with an offset (20241231000000+0000, 20241231235959+0000): a
 * date an engine writes with a time, a date column rendered in UTC. Local midnight is that in no zone
 * west of UTC, so the day it names is the day written, as the service's are (dayWritten).
 */
const DAY_EDGE = /^\d{8}(?:00(?:00(?:00(?:\.0+)?)?)?|2359(?:59(?:\.9+)?)?)[+-]\d{4}$/;

/** A plan's effective or expiration date (IN1-12, IN1-13) as dayIn dates it, but one written at a day's edge (DAY_EDGE): undefined, as written. */
export function planDayIn(value: string, timeZone: string | undefined): string | undefined {
  return DAY_EDGE.test(value) ? undefined : dayIn(value, timeZone);
}

/**
 * Whether timestamp `a` (MSH-7) is strictly earlier than `b`. Only two times that can be told
 * apart say so: each to the day at least, both with an offset or both without (two times of one
 * sender without offsets are its own local time), and `a` over before `b` begins, each read at the
 * precision written (09:30 is any second of that minute, not before 09:30:10; a date alone is the
 * whole day, before the next day's messages but not before another of the same day). Nor two
 * local times both in the time the sender's clocks repeat (`timeZone`, where it is known; an hour
 * in most zones, half of one on Lord Howe): 01:50 before the clocks go back is sent before 01:10
 * after. Anything else is not earlier: messages that cannot be ordered by their times are applied
 * in the order they arrived.
 */
export function sentEarlier(a: string, b: string, timeZone?: string): boolean {
  const x = instantOf(a, DAY_MS);
  const y = instantOf(b, DAY_MS);
  if (x === undefined || y === undefined || x.zoned !== y.zoned) return false;
  if (x.ms + x.spanMs > y.ms) return false;
  // Most calls ask of a message arriving whether it is older than the one held, and it is not: the zone's rules are read only when the readings say earlier.
  const repeated = (t: { ms: number; spanMs: number }) => timeZone !== undefined && (wallClockRepeated(t.ms, timeZone) || wallClockRepeated(t.ms + t.spanMs - 1, timeZone));
  return x.zoned || !(repeated(x) && repeated(y));
}

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

/**
 * The instant a timestamp begins at, and how long it spans at the precision written (a minute, a
 * second, 0.1 s …, at least a millisecond); a date or an hour only when `coarsest` spans that
 * much (a day, an hour), undefined otherwise.
 */
function instantOf(value: string, coarsest = 60_000): { ms: number; spanMs: number; zoned: boolean } | undefined {
  const m = DTM.exec(value.trim());
  const [, year, month, day, time = '', , , fraction, offset] = m ?? [];
  if (!m || day === undefined || readHl7Date(value).ok === false) return undefined;
  const digits = Math.min((fraction ?? '.').length - 1, 3);
  const spanMs = time.length === 0 ? DAY_MS : time.length === 2 ? HOUR_MS : time.length === 4 ? 60_000 : 1000 / 10 ** digits;
  if (spanMs > coarsest) return undefined;
  const ms = Number((fraction ?? '').slice(1, 4).padEnd(3, '0'));
  const local = Date.UTC(Number(year), Number(month) - 1, Number(day), Number(time.slice(0, 2)), Number(time.slice(2, 4)), Number(time.slice(4, 6) || '0'), ms);
  if (offset === undefined) return { ms: local, spanMs, zoned: false };
  const minutes = (Number(offset.slice(1, 3)) * 60 + Number(offset.slice(3, 5))) * (offset.startsWith('-') ? -1 : 1);
  return { ms: local - minutes * 60_000, spanMs, zoned: true };
}
