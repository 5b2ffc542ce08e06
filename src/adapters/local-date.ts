/** Formatters by time zone: building one costs far more than using it. */
const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(timeZone: string): Intl.DateTimeFormat {
  let format = formatters.get(timeZone);
  // en-CA writes a date as YYYY-MM-DD.
  if (!format) formatters.set(timeZone, (format = new Intl.DateTimeFormat('en-CA', { timeZone, year: 'numeric', month: '2-digit', day: '2-digit' })));
  return format;
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
  return Number.isNaN(at) ? written : formatter(timeZone).format(at);
}

/** Whether a YYYY-MM-DD date is a day of the calendar: Date.parse rolls 2027-02-29 over to March 1 and refuses only a 13th month. */
function onCalendar(date: string): boolean {
  const at = Date.parse(`${date}T00:00:00Z`);
  return !Number.isNaN(at) && new Date(at).toISOString().startsWith(date);
}
