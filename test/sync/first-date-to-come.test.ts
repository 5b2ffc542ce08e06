import { ClinicRoutingFile, loadClinicRouting } from '../../src/adapters/clinic-routing';
import { loadHl7Mappings } from '../../src/adapters/hl7';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import { fhirKitReader } from '../../src/sync/fhir-reader';
import { appointmentsOfChanged, ingestFhirAppointment } from '../../src/sync/ingest-fhir';
import { ingestHl7 } from '../../src/sync/ingest-hl7';
import { schedulePolicy, SyncSettings } from '../../src/service/eligibility-sync';
import { firstDateToCome, reverifyAt, visitDayCome } from '../../src/sync/schedule';
import { segment } from '../adapters/hl7/segment';
import { storePerTest } from '../support/sqlite-store';
import { chartOf } from './harness';
import { checkRow } from './job-store-contract';

/**
 * A US practice's evening visit, after midnight UTC the same evening: dates of service are the
 * practice's own, so the visit is still to come, and a change of the patient's insurance then
 * reaches it, by HL7 (an ADT) and by FHIR (a Patient or Coverage change).
 */
const BOOKED_AT = new Date('2026-11-30T15:00:00Z');
// 21:00 in New York on 30 November: UTC has reached 1 December.
const EVENING = new Date('2026-12-01T02:00:00Z');
const policy = { freshnessMs: 7 * 86_400_000, reverifyLeadMs: 86_400_000 };

const store = storePerTest('elig-first-date-');

test('the first date to come is the earliest date anywhere: a day behind UTC until noon UTC', () => {
  expect(firstDateToCome(EVENING, undefined)).toBe('2026-11-30');
  expect(firstDateToCome(new Date('2026-12-01T11:59:59Z'), undefined)).toBe('2026-11-30');
  expect(firstDateToCome(new Date('2026-12-01T12:00:00Z'), undefined)).toBe('2026-12-01');
});

test('a visit\'s day has come on the clinic\'s calendar where its zone is known, on UTC\'s where it is not', () => {
  const visit = { ...checkRow('k').check, dateOfService: '2026-12-01' };
  const inZone = (timeZone: string) => ({ ...policy, timeZoneOf: () => timeZone });
  // 21:00 in New York on 30 November: not yet there, already at UTC.
  expect(visitDayCome(visit, EVENING, inZone('America/New_York'))).toBe(false);
  expect(visitDayCome(visit, EVENING, policy)).toBe(true);
  // 08:00 on 1 December in Sydney (+11) is still 30 November at UTC.
  expect(visitDayCome(visit, new Date('2026-11-30T21:00:00Z'), inZone('Australia/Sydney'))).toBe(true);
  expect(visitDayCome(visit, new Date('2026-11-30T21:00:00Z'), policy)).toBe(false);
  // A visit whose day is over has come too.
  expect(visitDayCome(visit, new Date('2026-12-09T12:00:00Z'), policy)).toBe(true);
});

test('where the clinic\'s zone is known, the first date to come is the date it is there, on both sides of the date line', () => {
  // 09:00 on 2 December in Guam (+10) is still 1 December at UTC−12: 1 December is over in Guam.
  expect(firstDateToCome(new Date('2026-12-01T23:00:00Z'), 'Pacific/Guam')).toBe('2026-12-02');
  expect(firstDateToCome(new Date('2026-12-01T13:59:59Z'), 'Pacific/Guam')).toBe('2026-12-01');
  // Kiritimati (+14) is two dates ahead of UTC−12 from 10:00 to 12:00 UTC.
  expect(firstDateToCome(new Date('2026-11-30T10:00:00Z'), 'Pacific/Kiritimati')).toBe('2026-12-01');
  expect(firstDateToCome(new Date('2026-11-30T10:00:00Z'), undefined)).toBe('2026-11-29');
  // Pago Pago (−11) ends its day an hour before UTC−12 does.
  expect(firstDateToCome(new Date('2026-12-01T11:30:00Z'), 'Pacific/Pago_Pago')).toBe('2026-12-01');
  expect(firstDateToCome(new Date('2026-12-01T11:30:00Z'), undefined)).toBe('2026-11-30');
  expect(firstDateToCome(new Date('2026-12-01T10:59:59Z'), 'Pacific/Pago_Pago')).toBe('2026-11-30');
  // Sydney's day begins at 13:00 UTC under AEDT (+11) and at 14:00 under AEST (+10), either side of its April and October changes.
  expect(firstDateToCome(new Date('2026-04-04T13:00:00Z'), 'Australia/Sydney')).toBe('2026-04-05');
  expect(firstDateToCome(new Date('2026-04-05T13:30:00Z'), 'Australia/Sydney')).toBe('2026-04-05');
  expect(firstDateToCome(new Date('2026-10-03T14:00:00Z'), 'Australia/Sydney')).toBe('2026-10-04');
  expect(firstDateToCome(new Date('2026-10-04T13:00:00Z'), 'Australia/Sydney')).toBe('2026-10-05');
});

describe('the re-verification of a written check', () => {
  const lead = { freshnessMs: 7 * 86_400_000, reverifyLeadMs: 86_400_000 };
  const written = (dateOfService: string, clinicId = 'cln_sandbox_main') => checkRow('reverify', { state: 'written', check: { ...checkRow('reverify').check, dateOfService, clinicId } });
  const dueFor = (dateOfService: string, zone: string | undefined) =>
    reverifyAt(written(dateOfService), new Date('2026-01-01T00:00:00Z'), { ...lead, timeZoneOf: (clinic) => (clinic === 'cln_sandbox_main' ? zone : undefined) });

  it('is the lead time before the visit\'s date begins where the clinic is, across the clocks changing and the date line', () => {
    expect(dueFor('2026-12-01', 'Pacific/Guam')).toBe('2026-11-29T14:00:00.000Z');
    // Sydney's changes: the visit's day begins at its own offset, the lead is 24 hours before it.
    expect(dueFor('2026-04-05', 'Australia/Sydney')).toBe('2026-04-03T13:00:00.000Z');
    expect(dueFor('2026-04-06', 'Australia/Sydney')).toBe('2026-04-04T14:00:00.000Z');
    expect(dueFor('2026-10-04', 'Australia/Sydney')).toBe('2026-10-02T14:00:00.000Z');
    expect(dueFor('2026-10-05', 'Australia/Sydney')).toBe('2026-10-03T13:00:00.000Z');
    expect(dueFor('2026-12-01', 'Pacific/Kiritimati')).toBe('2026-11-29T10:00:00.000Z');
    expect(dueFor('2026-12-01', 'Pacific/Pago_Pago')).toBe('2026-11-30T11:00:00.000Z');
  });

  it('is from UTC\'s midnight where the clinic\'s zone is not known, as before', () => {
    expect(dueFor('2026-12-01', undefined)).toBe('2026-11-30T00:00:00.000Z');
    expect(reverifyAt(written('2026-12-01'), new Date('2026-01-01T00:00:00Z'), lead)).toBe('2026-11-30T00:00:00.000Z');
  });

  it('is none once the visit\'s day has begun where the clinic is', () => {
    // A result of 09:00 on 30 November in Guam: the visit of 1 December begins there 15 hours later, within the lead.
    const row = written('2026-12-01');
    const policy = { ...lead, freshnessMs: 0, timeZoneOf: () => 'Pacific/Guam' };
    expect(reverifyAt(row, new Date('2026-11-29T23:00:00Z'), policy)).toBe('2026-11-29T23:00:00.000Z');
    expect(reverifyAt(row, new Date('2026-11-30T14:00:00Z'), policy)).toBeUndefined();
  });

  describe('of a result whose benefit period ends before the visit', () => {
    /** A completed result of the benefit period given, as a portal answers in December with this year's maximums. */
    const ofPeriod = (dateOfService: string, benefitPeriod: { start?: string; end?: string }) => ({
      ...written(dateOfService),
      result: { correlationId: 'ver_dec', status: 'Completed', result: { plan: { status: 'Active', benefitPeriod } } },
    });
    const year2026 = { start: '2026-01-01', end: '2026-12-31' };
    // Verified on 28 December: still fresh on 4 January by a 7-day window.
    const december = new Date('2026-12-28T18:00:00Z');

    it('is verified again once the visit\'s benefit period has begun, though the result is still fresh', () => {
      expect(reverifyAt(ofPeriod('2027-01-04', year2026), december, lead)).toBe('2027-01-03T00:00:00.000Z');
      // The start alone stated: the period is the year from it.
      expect(reverifyAt(ofPeriod('2027-01-04', { start: '2026-01-01' }), december, lead)).toBe('2027-01-03T00:00:00.000Z');
      // The new year's first day where the clinic is, when the lead would have it verified again in the old year.
      const pacific = { ...lead, reverifyLeadMs: 3 * 86_400_000, timeZoneOf: () => 'America/Los_Angeles' };
      expect(reverifyAt(ofPeriod('2027-01-02', year2026), december, pacific)).toBe('2027-01-01T08:00:00.000Z');
      // A plan year of its own: the anniversary is the day.
      expect(reverifyAt(ofPeriod('2026-07-02', { start: '2025-07-01', end: '2026-06-30' }), new Date('2026-06-29T12:00:00Z'), lead)).toBe('2026-07-01T00:00:00.000Z');
    });

    it('is not, where the period holds the visit, or the result was verified since the visit\'s period began', () => {
      expect(reverifyAt(ofPeriod('2027-01-04', { start: '2027-01-01', end: '2027-12-31' }), december, lead)).toBeUndefined();
      expect(reverifyAt(ofPeriod('2026-12-30', year2026), december, lead)).toBeUndefined();
      // A portal still answering last year's on 1 January is not asked again and again.
      expect(reverifyAt(ofPeriod('2027-01-04', year2026), new Date('2027-01-01T10:00:00Z'), lead)).toBeUndefined();
    });
  });
});

const routing = ClinicRoutingFile.parse({ ...loadClinicRouting(), timeZone: 'Pacific/Guam' });
const guam = schedulePolicy(SyncSettings.parse({ freshnessDays: 7, reverifyLeadDays: 1 }), routing);

describe('a clinic in Guam', () => {
  const msh = (type: string, id: string) => `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20261130090000||${type}|${id}|P|2.5.1`;
  const pid = 'PID|1||PE-1^^^SC^MR||DOE^JANE||19800102|F';
  const in1 = (member: string) => segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL', 36: member });
  const booking = (id: string) => [msh('SIU^S12^SIU_S12', id), 'SCH|APT-G1^SC||||||||||^^^20261201093000', pid, in1('DD1111111')].join('\r');
  const options = (now: Date) => ({ mappings: loadHl7Mappings(), routing, now: () => now, policy: guam });
  const memberIdsHeld = async () => {
    const [appointment] = await store().listAppointments('booked');
    return (await store().listChecks()).filter((c) => appointment?.checkKeys.includes(c.key)).map((c) => c.check.subscriber.memberId);
  };

  test('an ADT the morning after a visit leaves it as verified: it is over in Guam, though 1 December still at UTC−12', async () => {
    await ingestHl7(store(), booking('G1'), options(BOOKED_AT));
    // 09:00 on 2 December in Guam.
    const after = await ingestHl7(store(), [msh('ADT^A08^ADT_A01', 'G2'), pid, in1('DD2222222')].join('\r'), options(new Date('2026-12-01T23:00:00Z')));
    expect(after.created).toEqual([]);
    expect(await memberIdsHeld()).toEqual(['DD1111111']);
  });

  test('an ADT the evening of the visit still verifies the corrected member id for it', async () => {
    await ingestHl7(store(), booking('G1'), options(BOOKED_AT));
    // 20:00 on 1 December in Guam.
    const evening = await ingestHl7(store(), [msh('ADT^A08^ADT_A01', 'G2'), pid, in1('DD2222222')].join('\r'), options(new Date('2026-12-01T10:00:00Z')));
    expect(evening.created).toHaveLength(1);
    expect(await memberIdsHeld()).toEqual(['DD2222222']);
  });

  test('a written check booked again is verified again a day before the visit\'s day begins in Guam', async () => {
    await ingestHl7(store(), booking('G1'), options(BOOKED_AT));
    const [check] = await store().listChecks();
    if (!check) throw new Error('no check');
    // Written on 20 November, its re-verification withdrawn with the visit (cancelled, then booked again).
    const { dueAt: _due, ...row } = check;
    await store().transaction((tx) => tx.putCheck({ ...row, state: 'written', result: { correlationId: 'ver_g1', status: 'Completed' }, resultAt: '2026-11-20T00:00:00.000Z', correlationId: 'ver_g1' }));
    await ingestHl7(store(), booking('G3'), options(new Date('2026-11-21T00:00:00Z')));
    expect((await store().listChecks())[0]?.dueAt).toBe('2026-11-29T14:00:00.000Z');
  });
});

test('an ADT that evening verifies the corrected member id for that evening\'s visit', async () => {
  const msh = (type: string, id: string) => `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20261130090000||${type}|${id}|P|2.5.1`;
  const pid = 'PID|1||PE-1^^^SC^MR||DOE^JANE||19800102|F';
  const in1 = (member: string) => segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL', 36: member });
  const options = (now: Date) => ({ mappings: loadHl7Mappings(), routing: loadClinicRouting(), now: () => now, policy });
  await ingestHl7(store(), [msh('SIU^S12^SIU_S12', 'E1'), 'SCH|APT-E1^SC||||||||||^^^20261130193000', pid, in1('DD1111111')].join('\r'), options(BOOKED_AT));
  await ingestHl7(store(), [msh('ADT^A08^ADT_A01', 'E2'), pid, in1('DD2222222')].join('\r'), options(EVENING));
  const [appointment] = await store().listAppointments('booked');
  const held = (await store().listChecks()).filter((c) => appointment?.checkKeys.includes(c.key));
  expect(held.map((c) => c.check.subscriber.memberId)).toEqual(['DD2222222']);
});

describe('FHIR', () => {
  let fhir: FhirServer;
  beforeEach(async () => {
    fhir = await startFhirServer();
  });
  afterEach(() => fhir.close());

  test('a Patient or Coverage changed that evening reads that evening\'s appointment again', async () => {
    const chart = chartOf('primary-secondary').map((r) => (r.resourceType === 'Appointment' ? { ...r, start: '2026-11-30T19:00:00-05:00', end: '2026-11-30T20:00:00-05:00' } : r));
    await fhir.seed(chart);
    const reader = await fhirKitReader(fhir.url);
    await ingestFhirAppointment(store(), reader, 'appt-4004', { routing: loadClinicRouting(), now: () => BOOKED_AT, policy });
    expect(await appointmentsOfChanged(store(), reader, { type: 'Patient', id: 'pat-marco' }, { now: EVENING, policy })).toEqual({ patient: 'Patient/pat-marco', appointments: ['appt-4004'] });
    expect((await appointmentsOfChanged(store(), reader, { type: 'Coverage', id: 'cov-marco-aetna' }, { now: EVENING, policy })).appointments).toEqual(['appt-4004']);
    // The next day past noon UTC, that visit is behind every practice.
    expect((await appointmentsOfChanged(store(), reader, { type: 'Patient', id: 'pat-marco' }, { now: new Date('2026-12-01T12:00:00Z'), policy })).appointments).toEqual([]);
  });

  test('a Patient changed the morning after a visit in Guam reads it no more', async () => {
    const chart = chartOf('primary-secondary').map((r) => (r.resourceType === 'Appointment' ? { ...r, start: '2026-12-01T09:30:00+10:00', end: '2026-12-01T10:30:00+10:00' } : r));
    await fhir.seed(chart);
    const reader = await fhirKitReader(fhir.url);
    await ingestFhirAppointment(store(), reader, 'appt-4004', { routing, now: () => BOOKED_AT, policy: guam });
    const changed = (now: Date) => appointmentsOfChanged(store(), reader, { type: 'Patient', id: 'pat-marco' }, { now, policy: guam });
    // 20:00 on 1 December in Guam, then 09:00 on the 2nd.
    expect((await changed(new Date('2026-12-01T10:00:00Z'))).appointments).toEqual(['appt-4004']);
    expect((await changed(new Date('2026-12-01T23:00:00Z'))).appointments).toEqual([]);
  });
});
