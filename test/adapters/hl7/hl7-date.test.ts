import { instantWritten, readHl7Date, sentEarlier } from '../../../src/adapters/hl7/hl7-date';

describe('readHl7Date', () => {
  it.each([
    ['19800101', '1980-01-01'],
    ['20240615093000', '2024-06-15'],
    ['202406152030-0500', '2024-06-15'],
    ['20240615203000.123+0100', '2024-06-15'],
    ['2024061520', '2024-06-15'],
    ['20240229', '2024-02-29'],
    ['20000229', '2000-02-29'],
    ['20241231', '2024-12-31'],
    // HL7 allows four digits of a second; engines that write microseconds send six.
    ['20240615203000.123456+0100', '2024-06-15'],
    ['20240615235959.99999', '2024-06-15'],
  ])('%s is %s, as written (no time-zone shift)', (value, date) => {
    expect(readHl7Date(value)).toEqual({ ok: true, date });
  });

  it.each(['1980', '198001'])('%s lacks the day', (value) => {
    expect(readHl7Date(value)).toEqual({ ok: false, reason: 'imprecise' });
  });

  it.each([
    ['202607', 'first', '2026-07-01'],
    ['202612', 'last', '2026-12-31'],
    ['202402', 'last', '2024-02-29'],
    ['202302', 'last', '2023-02-28'],
    ['2026', 'first', '2026-01-01'],
    ['2026', 'last', '2026-12-31'],
    ['20261215', 'last', '2026-12-15'],
  ] as const)('%s read to its %s day is %s (a plan\'s dates, the whole month or year)', (value, edge, date) => {
    expect(readHl7Date(value, edge)).toEqual({ ok: true, date });
  });

  it.each(['202613', '202600', '1800', '00000000', '000000'])('%s is not a month or year of a date either', (value) => {
    expect(readHl7Date(value, 'last')).toEqual({ ok: false, reason: 'invalid' });
    expect(readHl7Date(value, 'first')).toEqual({ ok: false, reason: 'invalid' });
  });

  it.each(['19870230', '20231301', '1980-01-01', '20240615256000', '20240615236100', 'tomorrow', '18000101', '19000229', '20230229', '20240431', '20240001', '20240100', '202406100900.1234', '202406100900.12345-0500', '2024061009.5'])('%s is not a valid date', (value) => {
    expect(readHl7Date(value)).toEqual({ ok: false, reason: 'invalid' });
  });

  it.each(['202612012330+9999', '202612012330-2400', '202612012330+0590', '202612012330+1401', '20261201+1500'])('%s has an offset no clock keeps (past ±14:00, or past 59 minutes): not a valid date', (value) => {
    expect(readHl7Date(value)).toEqual({ ok: false, reason: 'invalid' });
    expect(instantWritten(value)).toBeUndefined();
  });

  it.each(['202612012330+1400', '202612012330-1200', '202612012330+0545', '202612012330-0930'])('%s has an offset some clock keeps', (value) => {
    expect(readHl7Date(value)).toEqual({ ok: true, date: '2026-12-01' });
  });
});

describe('sentEarlier (MSH-7 against MSH-7)', () => {
  it.each([
    ['202611240959', '202611241000', true],
    ['20261124095959.5', '20261124100000', true],
    ['20261124100000', '20261124100000', false],
    ['20261124100000', '202611240959', false],
    // The same instant's offsets told apart: 10:00 in New York is 15:00 UTC, after 14:00 UTC.
    ['202611241400+0000', '202611241000-0500', true],
    ['202611241000-0500', '202611241400+0000', false],
    ['20261124093010', '202611240931', true],
    ['202611240929', '20261124093000', true],
    // Microseconds, as many engines stamp MSH-7: read to the millisecond.
    ['20261124095959.999999', '20261124100000', true],
    // Digits past the millisecond are dropped, not rounded: .9999 is not the next second.
    ['20261124095959.9999', '20261124100000', true],
    ['20261124100000.000100-0500', '20261124100000.002-0500', true],
    // A date alone is the whole day: before the next day's messages, not before another of the same day.
    ['20260601', '20260602', true],
    ['20260601', '20260602093000', true],
    ['20260531235959', '20260601', true],
    ['20260601', '20260601', false],
    ['20260601', '20260601093000', false],
    ['20260601093000', '20260601', false],
    ['20260602', '20260601', false],
    // An hour alone is the whole hour.
    ['2026060109', '2026060110', true],
    ['2026060109', '202606010930', false],
    // A month tells no day apart.
    ['202606', '202607', false],
  ])('%s before %s: %s', (a, b, earlier) => {
    expect(sentEarlier(a, b)).toBe(earlier);
  });

  it.each([
    ['20261124', '202611241000', 'a day only, the other within it'],
    ['2026112409', '202611240930', 'to the hour only, the other within it'],
    ['202611240900', '202611241000-0500', 'one with an offset, one without'],
    // A time to the minute is any second of it: 09:30 may be 09:30:45, after 09:30:10.
    ['202611240930', '20261124093010', 'to the minute against to the second, in the same minute'],
    ['20261124093000', '20261124093000.5', 'to the second against a tenth of it, in the same second'],
    ['20261124100000.0001', '20261124100000.0009', 'within one millisecond'],
    ['', '202611241000', 'no time'],
    ['20261324', '202611241000', 'not a date'],
  ])('%s and %s cannot be ordered (%s): not earlier', (a, b) => {
    expect(sentEarlier(a, b)).toBe(false);
  });

  // New York's clocks go back from 02:00 EDT to 01:00 EST on 2026-11-01: 01:00 to 02:00 comes twice.
  it.each([
    // Both in the hour repeated: 01:50 EDT (05:50Z) is before 01:10 EST (06:10Z), so the clock readings order nothing.
    ['202611010110', '202611010150', 'America/New_York', false],
    ['202611010150', '202611010110', 'America/New_York', false],
    // Before the hour, or after it, as read: whichever pass the other is in, the order holds.
    ['202611010030', '202611010110', 'America/New_York', true],
    ['202611010150', '202611010210', 'America/New_York', true],
    // Another night, another zone's night: the hour comes once.
    ['202611020110', '202611020150', 'America/New_York', true],
    ['202611010110', '202611010150', 'Europe/London', true],
    // London's clocks went back on 2026-10-25.
    ['202610250110', '202610250150', 'Europe/London', false],
    // The spring change skips an hour rather than repeating one.
    ['202603080130', '202603080330', 'America/New_York', true],
    // Times with offsets name their instants whatever the zone.
    ['202611010150-0400', '202611010110-0500', 'America/New_York', true],
  ])('%s before %s where the sender keeps %s time: %s', (a, b, zone, earlier) => {
    expect(sentEarlier(a, b, zone)).toBe(earlier);
  });
});

describe('instantWritten', () => {
  it.each([
    ['202406110000+0000', '2024-06-11T00:00:00.000Z'],
    // To the hour, as HL7's DTM allows: its start.
    ['2024061100+0000', '2024-06-11T00:00:00.000Z'],
    ['20240610200000.123456-0500', '2024-06-11T01:00:00.123Z'],
    // Rounded, 23:59:59.9999 would be the next day's midnight, and a visit dated a day late.
    ['20240610235959.9999+0000', '2024-06-10T23:59:59.999Z'],
    ['20240610235959.999999+0000', '2024-06-10T23:59:59.999Z'],
  ])('%s is %s', (value, instant) => {
    expect(instantWritten(value)).toBe(instant);
  });

  it('is undefined without an offset, or for a date', () => {
    expect(instantWritten('20240610235959.123456')).toBeUndefined();
    expect(instantWritten('20240611+0000')).toBeUndefined();
  });
});
