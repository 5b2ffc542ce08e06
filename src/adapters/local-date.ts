/** Formatters by time zone: building one costs far more than using it. */
const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(timeZone: string): Intl.DateTimeFormat {
  let format = formatters.get(timeZone);
  // en-CA writes a date as YYYY-MM-DD.
  if (!format) formatters.set(timeZone, (format = new Intl.DateTimeFormat('en-CA', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit' })));
  return format;
}

/** Offset formatters by time zone ("GMT+10:00"), as costly to build. */
const offsets = new Map<string, Intl.DateTimeFormat>();

/** How far ahead of UTC the zone's clocks are at `at`, in ms (Pago Pago's −11 h a negative). */
function offsetAt(at: number, timeZone: string): number {
  let format = offsets.get(timeZone);
  if (!format) offsets.set(timeZone, (format = new Intl.DateTimeFormat('en-US', { timeZone, timeZoneName: 'longOffset' })));
  const name = format.formatToParts(at).find((part) => part.type === 'timeZoneName')?.value ?? '';
  const [, sign, hours, minutes] = /([+-])(\d{2}):(\d{2})/.exec(name) ?? [];
  // UTC itself is written "GMT", with no offset.
  return sign === undefined ? 0 : (sign === '-' ? -1 : 1) * (Number(hours) * 60 + Number(minutes)) * 60_000;
}

/** The earliest date it is anywhere on Earth at `at` (UTC−12): a visit of that date may be still to come somewhere. */
export function earliestDateAnywhere(at: Date): string {
  return new Date(at.getTime() - 12 * 3_600_000).toISOString().slice(0, 10);
}

/** The date it is in `timeZone` at `at`. */
export function dateAt(at: Date, timeZone: string): string {
  return formatter(timeZone).format(at);
}

/** Minute formatters by time zone, as costly to build. */
const minutes = new Map<string, Intl.DateTimeFormat>();

/**
 * The date and minute it is in `timeZone` at `at`, with the clocks' offset from UTC, as YYYY-MM-DD
 * HH:MM UTC±HH:MM: the hour a fall change repeats (Chicago's 01:00 to 02:00) is told apart. With no
 * zone, UTC's, as YYYY-MM-DD HH:MM UTC.
 */
export function minuteAt(at: Date, timeZone?: string): string {
  if (timeZone === undefined) return `${at.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
  let format = minutes.get(timeZone);
  if (!format) minutes.set(timeZone, (format = new Intl.DateTimeFormat('en-CA', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' })));
  const part = Object.fromEntries(format.formatToParts(at).map((p) => [p.type, p.value]));
  const offset = offsetAt(at.getTime(), timeZone) / 60_000;
  const hhmm = `${String(Math.floor(Math.abs(offset) / 60)).padStart(2, '0')}:${String(Math.abs(offset) % 60).padStart(2, '0')}`;
  return `${part.year}-${part.month}-${part.day} ${part.hour}:${part.minute} UTC${offset < 0 ? '-' : '+'}${hhmm}`;
}

/**
 * The instant a YYYY-MM-DD date begins in `timeZone`: its midnight there, or, where the clocks skip
 * midnight (Santiago's spring change), the first instant the date has. The offset is read twice: on
 * the day the clocks change, the offset at UTC's midnight is not always the one at the zone's.
 */
export function startOfDate(date: string, timeZone: string): Date {
  const midnight = Date.parse(`${date}T00:00:00Z`);
  const guess = midnight - offsetAt(midnight, timeZone);
  const start = midnight - offsetAt(guess, timeZone);
  return new Date(dateAt(new Date(start), timeZone) === date ? start : guess);
}

/**
 * Whether a wall-clock time (its fields read as if at UTC, in ms) names two instants in `timeZone`:
 * it falls in the time the clocks repeat when they go back (New York's 01:00 to 02:00 on the first
 * Sunday of November; half an hour on Lord Howe, two in Troll), once at each offset.
 */
export function wallClockRepeated(wallMs: number, timeZone: string): boolean {
  const before = offsetAt(wallMs - 86_400_000, timeZone);
  const after = offsetAt(wallMs + 86_400_000, timeZone);
  return before > after && offsetAt(wallMs - before, timeZone) === before && offsetAt(wallMs - after, timeZone) === after;
}

/** Whether text names an IANA time zone this runtime knows, such as America/Los_Angeles. */
export function isTimeZone(text: string): boolean {
  try {
    formatter(text);
    return true;
  } catch {
    return false;
  }
}

/**
 * The date of service of an appointment starting at `start` (a FHIR dateTime): in the practice's
 * time zone when it is known and the start is an instant, since many EHRs write appointment times
 * in UTC (a 5 pm visit in California is 01:00Z the next day); else the date as written. None for a
 * day the calendar lacks (2027-02-29), which Date.parse takes for March 1.
 */
export function dateOfStart(start: string, timeZone: string | undefined): string | undefined {
  const written = /^(\d{4}-\d{2}-\d{2})(T|$)/.exec(start)?.[1];
  if (!written || !onCalendar(written)) return undefined;
  if (timeZone === undefined || !/T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(start)) return written;
  const at = Date.parse(start);
  return Number.isNaN(at) ? written : dateAt(new Date(at), timeZone);
}

/** Whether a YYYY-MM-DD date is a day of the calendar: Date.parse rolls 2027-02-29 over to March 1 and refuses only a 13th month. */
function onCalendar(date: string): boolean {
  const at = Date.parse(`${date}T00:00:00Z`);
  return !Number.isNaN(at) && new Date(at).toISOString().startsWith(date);
}
