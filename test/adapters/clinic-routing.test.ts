import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { clinicTimeZone, loadClinicRouting, resolveClinic, senderTimeZone, type ClinicRouting } from '../../src/adapters/clinic-routing';
import { dateAt, dateOfStart, minuteAt, startOfDate } from '../../src/adapters/local-date';

/** Two clinics that both call a chair OP1, as most dental clinics do. */
const routing: ClinicRouting = {
  defaultClinicId: 'cln_default',
  routes: [
    { clinicId: 'cln_main', hl7Facilities: ['BSD-MAIN'], hl7Locations: ['MAIN', 'OP1'], fhirLocations: ['Location/main'], fhirLocationIdentifiers: [] },
    {
      clinicId: 'cln_north',
      hl7Facilities: ['BSD-NORTH'],
      hl7Locations: ['OP1', 'N-OP2'],
      fhirLocations: ['Location/north'],
      fhirLocationIdentifiers: [{ system: 'urn:clinics', value: 'NORTH' }],
    },
  ],
};

describe('resolveClinic', () => {
  it('takes first a route whose location and facility both match, the facility from MSH-4 or AIL-3.4', () => {
    expect(resolveClinic(routing, { hl7Facilities: ['BSD-NORTH'], hl7Location: 'OP1' })).toBe('cln_north');
    expect(resolveClinic(routing, { hl7Facilities: ['BSD-MAIN', 'BSD-NORTH'], hl7Location: 'N-OP2' })).toBe('cln_north');
    expect(resolveClinic(routing, { hl7Facilities: ['PMS-HQ', 'bsd-north '], hl7Location: 'op1' })).toBe('cln_north');
  });

  it('then a route whose facility matches, over one whose location alone matches', () => {
    expect(resolveClinic(routing, { hl7Facilities: ['BSD-NORTH'], hl7Location: 'MAIN' })).toBe('cln_north');
    expect(resolveClinic(routing, { hl7Facilities: ['BSD-NORTH'] })).toBe('cln_north');
  });

  it('then a route whose location matches, for senders whose MSH-4 names no clinic', () => {
    expect(resolveClinic(routing, { hl7Facilities: ['PMS-HQ'], hl7Location: 'N-OP2' })).toBe('cln_north');
    expect(resolveClinic(routing, { hl7Location: 'MAIN' })).toBe('cln_main');
  });

  it('but not by a chair name several clinics list: a clinic not in the file is not taken for the first that lists it', () => {
    // OP1 at BSD-SOUTH, a clinic opened since the file was written, is neither cln_main nor cln_north.
    expect(resolveClinic(routing, { hl7Facilities: ['BSD-SOUTH'], hl7Location: 'OP1' })).toBe('cln_default');
    expect(resolveClinic(routing, { hl7Location: 'op1' })).toBe('cln_default');
    const { defaultClinicId: _default, ...withoutDefault } = routing;
    expect(resolveClinic(withoutDefault, { hl7Facilities: ['BSD-SOUTH'], hl7Location: 'OP1' })).toBeUndefined();
    // Two routes of one clinic listing the chair still name it.
    const twice: ClinicRouting = { routes: [routing.routes[0]!, { ...routing.routes[0]!, hl7Facilities: ['BSD-MAIN-2'] }] };
    expect(resolveClinic(twice, { hl7Facilities: ['PMS-HQ'], hl7Location: 'OP1' })).toBe('cln_main');
  });

  it('then the default, or nothing when there is none', () => {
    expect(resolveClinic(routing, { hl7Facilities: ['PMS-HQ'], hl7Location: 'OP9' })).toBe('cln_default');
    expect(resolveClinic(routing, {})).toBe('cln_default');
    const { defaultClinicId: _default, ...withoutDefault } = routing;
    expect(resolveClinic(withoutDefault, { hl7Facilities: ['PMS-HQ'] })).toBeUndefined();
  });

  it('routes FHIR by Location reference or identifier, directly', () => {
    expect(resolveClinic(routing, { fhirLocation: 'Location/north' })).toBe('cln_north');
    expect(resolveClinic(routing, { fhirLocationIdentifiers: [{ system: 'urn:clinics', value: 'NORTH' }] })).toBe('cln_north');
    expect(resolveClinic(routing, { fhirLocationIdentifiers: [{ system: 'urn:other', value: 'NORTH' }] })).toBe('cln_default');
    expect(resolveClinic(routing, { fhirLocation: 'Location/nowhere', fhirLocationIdentifiers: [] })).toBe('cln_default');
  });

  it('routes the shipped mappings/clinics.json: OP1 at BSD-NORTH is the north clinic, whichever field names the facility', () => {
    const shipped = loadClinicRouting();
    expect(resolveClinic(shipped, { hl7Facilities: ['BSD-NORTH'], hl7Location: 'OP1' })).toBe('cln_sandbox_north');
    expect(resolveClinic(shipped, { hl7Facilities: ['BSD-MAIN', 'BSD-NORTH'], hl7Location: 'N-OP1' })).toBe('cln_sandbox_north');
    expect(resolveClinic(shipped, { hl7Facilities: ['BSD-MAIN', 'BSD'], hl7Location: 'OP1' })).toBe('cln_sandbox_main');
    expect(resolveClinic(shipped, { fhirLocation: 'Location/bright-smiles-north' })).toBe('cln_sandbox_north');
  });
});

describe('the practice\'s time zone', () => {
  it('is a clinic\'s own, else the file\'s, and a name no runtime knows is refused naming the key', () => {
    const zoned: ClinicRouting = { ...routing, timeZone: 'America/Chicago', routes: routing.routes.map((r) => (r.clinicId === 'cln_north' ? { ...r, timeZone: 'America/Denver' } : r)) };
    expect([clinicTimeZone(zoned, 'cln_north'), clinicTimeZone(zoned, 'cln_main'), clinicTimeZone(zoned, 'cln_default'), clinicTimeZone(routing, 'cln_main')]).toEqual([
      'America/Denver',
      'America/Chicago',
      'America/Chicago',
      undefined,
    ]);
    // A sender's clock is where the clinic its MSH-4 is routed to is; a facility routed nowhere (or none), the file's.
    expect([senderTimeZone(zoned, 'BSD-NORTH'), senderTimeZone({ ...zoned, defaultClinicId: undefined }, 'ELSEWHERE'), senderTimeZone(zoned, ''), senderTimeZone(routing, 'BSD-NORTH')]).toEqual([
      'America/Denver',
      'America/Chicago',
      'America/Chicago',
      undefined,
    ]);
    const dir = mkdtempSync(path.join(tmpdir(), 'elig-clinics-'));
    try {
      writeFileSync(path.join(dir, 'clinics.json'), JSON.stringify({ timeZone: 'Pacific Time', routes: [] }));
      expect(() => loadClinicRouting(dir)).toThrow(/timeZone: must be an IANA time zone, such as America\/Los_Angeles/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('is the one a clinic\'s routes name, on whichever route: a clinic listed for its HL7 facility, then for its FHIR Location with its zone', () => {
    const hl7 = { clinicId: 'cln_west', hl7Facilities: ['WEST'] };
    const fhir = { clinicId: 'cln_west', fhirLocations: ['Location/west'], timeZone: 'America/Los_Angeles' };
    const dir = mkdtempSync(path.join(tmpdir(), 'elig-clinics-'));
    try {
      writeFileSync(path.join(dir, 'clinics.json'), JSON.stringify({ timeZone: 'America/New_York', routes: [hl7, fhir] }));
      const west = loadClinicRouting(dir);
      expect(clinicTimeZone(west, 'cln_west')).toBe('America/Los_Angeles');
      // 5 pm in California on November 30, written in UTC.
      expect(dateOfStart('2026-12-01T01:00:00Z', clinicTimeZone(west, 'cln_west'))).toBe('2026-11-30');
      // One clinic is in one place: two zones for it are refused, naming the route.
      writeFileSync(path.join(dir, 'clinics.json'), JSON.stringify({ routes: [fhir, { ...hl7, timeZone: 'America/Denver' }] }));
      expect(() => loadClinicRouting(dir)).toThrow(/routes\.1\.timeZone: is not America\/Los_Angeles, which another route of cln_west names/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('dates an instant where the practice is, across the clocks changing, and leaves a date or a time without offset as written', () => {
    const la = 'America/Los_Angeles';
    expect(dateOfStart('2026-12-01T01:00:00Z', la)).toBe('2026-11-30');
    expect(dateOfStart('2026-12-01T07:59:59.999+00:00', la)).toBe('2026-11-30');
    expect(dateOfStart('2026-12-01T08:00:00Z', la)).toBe('2026-12-01');
    // 00:30 PDT on the morning the clocks go back, and 01:30 PST on the morning they go forward.
    expect(dateOfStart('2026-11-01T07:30:00Z', la)).toBe('2026-11-01');
    expect(dateOfStart('2026-03-08T09:30:00Z', la)).toBe('2026-03-08');
    expect(dateOfStart('2026-12-01T01:00:00Z', undefined)).toBe('2026-12-01');
    expect(dateOfStart('2026-12-01', la)).toBe('2026-12-01');
    expect(dateOfStart('2026-12-01T17:00:00', la)).toBe('2026-12-01');
    expect(dateOfStart('Dec 1', la)).toBeUndefined();
    // A day the calendar lacks is none, in a zone or not: Date.parse takes 2027-02-29 for March 1.
    expect(dateOfStart('2027-02-29T17:00:00Z', la)).toBeUndefined();
    expect(dateOfStart('2027-02-29', undefined)).toBeUndefined();
    expect(dateOfStart('2028-02-29T17:00:00Z', la)).toBe('2028-02-29');
  });

  it('starts a date at its midnight where the practice is, or where the clocks skip midnight, at the first instant the date has', () => {
    // Sydney's changes and the date line: test/sync/first-date-to-come.test.ts, by the re-verification they time.
    const start = (date: string, zone: string) => startOfDate(date, zone).toISOString();
    expect(start('2026-12-01', 'UTC')).toBe('2026-12-01T00:00:00.000Z');
    expect(start('2026-12-01', 'Asia/Kolkata')).toBe('2026-11-30T18:30:00.000Z');
    // Santiago's clocks skip from midnight to 01:00 (-03) on 6 September: the day begins at 01:00.
    expect(start('2026-09-06', 'America/Santiago')).toBe('2026-09-06T04:00:00.000Z');
    expect(start('2026-09-07', 'America/Santiago')).toBe('2026-09-07T03:00:00.000Z');
    expect(dateAt(new Date('2026-11-30T13:59:59.999Z'), 'Pacific/Guam')).toBe('2026-11-30');
    expect(dateAt(new Date('2026-11-30T14:00:00Z'), 'Pacific/Guam')).toBe('2026-12-01');
  });

  it('tells the minute on the practice\'s clock with its offset: the hour a fall change repeats is told apart', () => {
    // Chicago's clocks go from 02:00 CDT back to 01:00 CST on 1 November 2026: 01:30 comes twice.
    expect(minuteAt(new Date('2026-11-01T06:30:00Z'), 'America/Chicago')).toBe('2026-11-01 01:30 UTC-05:00');
    expect(minuteAt(new Date('2026-11-01T07:30:00Z'), 'America/Chicago')).toBe('2026-11-01 01:30 UTC-06:00');
    expect(minuteAt(new Date('2026-03-08T08:00:00Z'), 'America/Chicago')).toBe('2026-03-08 03:00 UTC-05:00');
    expect(minuteAt(new Date('2026-11-25T00:00:00Z'), 'Asia/Kolkata')).toBe('2026-11-25 05:30 UTC+05:30');
    expect(minuteAt(new Date('2026-11-25T00:00:00Z'), 'UTC')).toBe('2026-11-25 00:00 UTC+00:00');
  });
});
