import { loadClinicRouting } from '../../src/adapters/clinic-routing';
import { loadHl7Mappings } from '../../src/adapters/hl7';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import { fhirKitReader } from '../../src/sync/fhir-reader';
import { appointmentsOfChanged, ingestFhirAppointment } from '../../src/sync/ingest-fhir';
import { ingestHl7 } from '../../src/sync/ingest-hl7';
import { firstDateToCome } from '../../src/sync/schedule';
import { segment } from '../adapters/hl7/segment';
import { storePerTest } from '../support/sqlite-store';
import { chartOf } from './harness';

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
  expect(firstDateToCome(EVENING)).toBe('2026-11-30');
  expect(firstDateToCome(new Date('2026-12-01T11:59:59Z'))).toBe('2026-11-30');
  expect(firstDateToCome(new Date('2026-12-01T12:00:00Z'))).toBe('2026-12-01');
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
    expect(await appointmentsOfChanged(store(), reader, { type: 'Patient', id: 'pat-marco' }, EVENING)).toEqual({ patient: 'Patient/pat-marco', appointments: ['appt-4004'] });
    expect((await appointmentsOfChanged(store(), reader, { type: 'Coverage', id: 'cov-marco-aetna' }, EVENING)).appointments).toEqual(['appt-4004']);
    // The next day past noon UTC, that visit is behind every practice.
    expect((await appointmentsOfChanged(store(), reader, { type: 'Patient', id: 'pat-marco' }, new Date('2026-12-01T12:00:00Z'))).appointments).toEqual([]);
  });
});
