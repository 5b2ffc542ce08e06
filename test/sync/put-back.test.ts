import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { Appointment, Coverage, FhirResource, Patient } from 'fhir/r4';
import { loadClinicRouting } from '../../src/adapters/clinic-routing';
import type { FhirReader } from '../../src/adapters/fhir/in';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import { fhirKitReader } from '../../src/sync/fhir-reader';
import { ingestFhirAppointment, ingestFhirChange } from '../../src/sync/ingest-fhir';
import type { JobStore } from '../../src/sync/job-store';
import { openJobStore } from '../../src/sync/open-store';
import { postgresForTests } from '../support/postgres';
import { chartOf } from './harness';
import type { StorePlace } from './job-store-contract';

/**
 * A chart that puts back what it changed, read from a server that keeps no meta (no versionId,
 * no lastUpdated), so that an appointment read as it was before is, to the letter, what an
 * earlier read found: what is stored goes by what the store holds now, and a read of that changes
 * nothing, sent twice or after a restart. On both stores.
 */
const BOOKED_AT = new Date('2026-11-30T15:00:00Z');
const options = { routing: loadClinicRouting(), now: () => BOOKED_AT, policy: { freshnessMs: 7 * 86_400_000, reverifyLeadMs: 86_400_000 } };
const TUESDAY = '2026-12-08';
const WEDNESDAY = '2026-12-09';

/** The chart's reads as a server without meta gives them. */
function withoutMeta(reader: FhirReader): FhirReader {
  return {
    read: async (type, id) => {
      const found = (await reader.read(type, id)) as { meta?: unknown } | undefined;
      if (found === undefined) return undefined;
      const { meta: _, ...resource } = found;
      return resource;
    },
    search: (type, params, searched) => reader.search(type, params, searched),
  };
}

function putBack(newPlace: () => Promise<StorePlace>): void {
  let fhir: FhirServer;
  let reader: FhirReader;
  let place: StorePlace;
  let store: JobStore;
  beforeEach(async () => {
    fhir = await startFhirServer();
    await fhir.seed(chartOf('primary-secondary'));
    reader = withoutMeta(await fhirKitReader(fhir.url));
    place = await newPlace();
    store = await place.open();
  });
  afterEach(async () => {
    await store.close();
    await place.remove();
    await fhir.close();
  });

  const appointment = () => chartOf('primary-secondary').find((r): r is Appointment => r.resourceType === 'Appointment') as Appointment;
  const coverage = (id: string) => chartOf('primary-secondary').find((r): r is Coverage => r.resourceType === 'Coverage' && r.id === id) as Coverage;
  const on = (day: string): Appointment => ({ ...appointment(), start: `${day}T11:00:00-06:00`, end: `${day}T12:00:00-06:00` });
  const ingest = (id = 'appt-4004') => ingestFhirAppointment(store, reader, id, options);
  /** The appointment's day as stored, and the day and state of each check it holds. */
  const held = async (id = 'appt-4004') => {
    const row = await store.transaction((tx) => tx.getAppointment(`fhir|Appointment/${id}`));
    const checks = await store.listChecks();
    return [row?.status, row?.dateOfService, ...(row?.checkKeys ?? []).map((k) => checks.find((c) => c.key === k)).map((c) => `${c?.check.dateOfService} ${c?.state}`)];
  };

  it('verifies for Tuesday again an appointment moved to Wednesday and back, and reads it as a duplicate after, sent again or after a restart', async () => {
    await fhir.seed([on(TUESDAY)]);
    expect((await ingest()).created).toHaveLength(2);
    await fhir.seed([on(WEDNESDAY)]);
    expect(await ingest()).toMatchObject({ status: 'booked', duplicate: false });
    expect(await held()).toEqual(['booked', WEDNESDAY, `${WEDNESDAY} received`, `${WEDNESDAY} received`]);
    await fhir.seed([on(TUESDAY)]);
    const back = await ingest();
    expect(back).toMatchObject({ status: 'booked', duplicate: false });
    expect(back.created).toHaveLength(2);
    expect(await held()).toEqual(['booked', TUESDAY, `${TUESDAY} received`, `${TUESDAY} received`]);
    // Wednesday's checks serve no visit now.
    expect((await store.listChecks()).filter((c) => c.check.dateOfService === WEDNESDAY).map((c) => c.state)).toEqual(['cancelled', 'cancelled']);

    expect(await ingest()).toMatchObject({ created: [], withdrawn: [], duplicate: true });
    await store.close();
    store = await place.open();
    expect(await ingest()).toMatchObject({ created: [], withdrawn: [], duplicate: true });
    // Each read that changed the store is kept, the first Tuesday's and the second apart.
    expect((await store.listMessages({ kind: 'fhir-notification' })).map((m) => m.status)).toEqual(['handled', 'handled', 'handled']);
  });

  it('follows a Coverage whose order the chart changed and put back, and one whose period it ended before the visit and put back', async () => {
    /** Each check's payer and order as stored, the primary first. */
    const orders = async () => {
      const checks = await store.listChecks();
      return checks.filter((c) => c.state !== 'cancelled').map((c) => `${c.check.source.kind === 'fhir' ? c.check.source.coverage : ''} ${c.check.coverage.order}`).sort();
    };
    await fhir.seed([on(TUESDAY)]);
    expect((await ingest()).created).toHaveLength(2);
    expect(await orders()).toEqual(['Coverage/cov-marco-aetna secondary', 'Coverage/cov-marco-delta primary']);
    // Delta's order deleted: it takes the rank Aetna's leaves free, first, then second, in the same list of coverages.
    const { order: _, ...unordered } = coverage('cov-marco-delta');
    const aetnaAt = (order: number) => [{ ...coverage('cov-marco-aetna'), order }, unordered];
    await fhir.seed(aetnaAt(2));
    expect(await ingest()).toMatchObject({ duplicate: false });
    expect(await orders()).toEqual(['Coverage/cov-marco-aetna secondary', 'Coverage/cov-marco-delta primary']);
    await fhir.seed(aetnaAt(1));
    expect(await ingest()).toMatchObject({ status: 'booked', duplicate: false });
    expect(await orders()).toEqual(['Coverage/cov-marco-aetna primary', 'Coverage/cov-marco-delta secondary']);
    expect(await ingest()).toMatchObject({ duplicate: true });
    await fhir.seed(aetnaAt(2));
    expect(await ingest()).toMatchObject({ status: 'booked', duplicate: false });
    expect(await orders()).toEqual(['Coverage/cov-marco-aetna secondary', 'Coverage/cov-marco-delta primary']);
    await fhir.seed([coverage('cov-marco-aetna'), coverage('cov-marco-delta')]);
    await ingest();

    // The primary plan ended before the visit: as a first read of it, it makes no check.
    await fhir.seed([{ ...coverage('cov-marco-delta'), period: { end: '2026-12-01' } }]);
    expect(await ingest()).toMatchObject({ status: 'booked', duplicate: false });
    expect(await orders()).toEqual(['Coverage/cov-marco-aetna primary']);
    await fhir.seed([coverage('cov-marco-delta')]);
    expect(await ingest()).toMatchObject({ status: 'booked', duplicate: false });
    expect(await orders()).toEqual(['Coverage/cov-marco-aetna secondary', 'Coverage/cov-marco-delta primary']);
    expect(await ingest()).toMatchObject({ duplicate: true });
  });

  it('keeps an appointment waiting for insurance under the record its patient was merged into, so that one\'s Coverage added reads it', async () => {
    const nova: Patient = { resourceType: 'Patient', id: 'pat-nova', name: [{ family: 'Reyes', given: ['Nova'] }], gender: 'female', birthDate: '1990-02-03' };
    const survivor = { ...nova, id: 'pat-nova-2' };
    const waiting = { ...on(TUESDAY), id: 'appt-6006', participant: appointment().participant.map((p) => (p.actor?.reference === 'Patient/pat-marco' ? { ...p, actor: { reference: 'Patient/pat-nova' } } : p)) };
    await fhir.seed([nova, survivor, waiting]);
    expect(await ingest('appt-6006')).toMatchObject({ status: 'awaiting-insurance', duplicate: false });
    // The EHR merged Nova's record into another, neither insured yet: the appointment names the first still.
    await fhir.seed([{ ...nova, active: false, link: [{ other: { reference: 'Patient/pat-nova-2' }, type: 'replaced-by' }] }]);
    expect(await ingest('appt-6006')).toMatchObject({ status: 'awaiting-insurance', duplicate: false });
    expect((await store.transaction((tx) => tx.getAppointment('fhir|Appointment/appt-6006')))?.patientKey).toBe('fhir|Patient/pat-nova-2');
    expect(await ingest('appt-6006')).toMatchObject({ duplicate: true });
    await fhir.seed([{ ...coverage('cov-marco-delta'), id: 'cov-nova', beneficiary: { reference: 'Patient/pat-nova-2' } }]);
    expect(await ingestFhirChange(store, reader, { type: 'Coverage', id: 'cov-nova' }, options)).toBe('Coverage/cov-nova: Appointment/appt-6006: booked');
  });

  it('books again an appointment the chart deleted and restored as it was', async () => {
    await fhir.seed([on(TUESDAY)]);
    await ingest();
    await fhir.repo.deleteResource('Appointment', 'appt-4004');
    expect(await ingest()).toMatchObject({ status: 'cancelled', duplicate: false });
    expect(await ingest()).toMatchObject({ status: 'cancelled', created: [], withdrawn: [], duplicate: true });
    await fhir.seed([on(TUESDAY)]);
    expect(await ingest()).toMatchObject({ status: 'booked', duplicate: false });
    expect(await held()).toEqual(['booked', TUESDAY, `${TUESDAY} received`, `${TUESDAY} received`]);
    await fhir.repo.deleteResource('Appointment', 'appt-4004');
    expect(await ingest()).toMatchObject({ status: 'cancelled', duplicate: false });
    expect(await held()).toEqual(['cancelled', TUESDAY]);
  });

  it('stops waiting for insurance each time the chart puts an appointment waiting for it back on the waitlist', async () => {
    const uninsured = [
      { resourceType: 'Patient', id: 'pat-nova', name: [{ family: 'Reyes', given: ['Nova'] }], gender: 'female', birthDate: '1990-02-03' },
      { ...on(TUESDAY), id: 'appt-6006', participant: appointment().participant.map((p) => (p.actor?.reference === 'Patient/pat-marco' ? { ...p, actor: { reference: 'Patient/pat-nova' } } : p)) },
    ] as FhirResource[];
    const withStatus = (status: Appointment['status']) => uninsured.map((r) => (r.resourceType === 'Appointment' ? { ...r, status } : r));
    await fhir.seed(withStatus('booked'));
    expect(await ingest('appt-6006')).toMatchObject({ status: 'awaiting-insurance', duplicate: false });
    await fhir.seed(withStatus('waitlist'));
    expect(await ingest('appt-6006')).toMatchObject({ status: 'not-verified', duplicate: false });
    expect(await held('appt-6006')).toEqual(['cancelled', TUESDAY]);
    await fhir.seed(withStatus('booked'));
    expect(await ingest('appt-6006')).toMatchObject({ status: 'awaiting-insurance', duplicate: false });
    await fhir.seed(withStatus('waitlist'));
    expect(await ingest('appt-6006')).toMatchObject({ status: 'not-verified', duplicate: false });
    expect(await held('appt-6006')).toEqual(['cancelled', TUESDAY]);
    expect(await ingest('appt-6006')).toMatchObject({ status: 'not-verified', duplicate: true });
  });
}

describe('a correction the chart puts back, on SQLite', () => {
  putBack(async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'elig-put-back-'));
    return { open: () => openJobStore(undefined, dir), remove: async () => rmSync(dir, { recursive: true, force: true }) };
  });
});

describe('a correction the chart puts back, on PostgreSQL', () => {
  const postgres = postgresForTests();
  putBack(async () => {
    const url = await postgres.createDatabase();
    return { open: () => openJobStore(url, '/nonexistent'), remove: async () => undefined };
  });
});
