import { InMemoryPatientInsuranceStore } from '../../../src/adapters/hl7';
import type { PatientInsuranceRecord } from '../../../src/domain';

const record: PatientInsuranceRecord = {
  patient: { firstName: 'JANE', lastName: 'DOE', birthDate: '1980-01-02', identifiers: [{ value: 'P-1', system: 'SC' }] },
  coverages: [
    {
      coverage: { order: 'primary', payer: { id: '62308' } },
      subscriber: { firstName: 'JANE', lastName: 'DOE', memberId: 'M-1', relationship: 'self' },
    },
  ],
  appointments: [{ appointmentId: 'APT-1', dateOfService: '2024-06-10', keys: ['elig_1'] }],
  updatedAt: '2024-05-01T12:00:00Z',
  messageControlId: 'C1',
};
const key = { facility: 'BSD-MAIN', identifier: { system: 'SC', value: 'P-1' } };

describe('InMemoryPatientInsuranceStore', () => {
  it('returns what was put under the same facility and identifier, the facility as written (as the job store keys it)', async () => {
    const store = new InMemoryPatientInsuranceStore();
    await store.put(key, record);
    expect(await store.get({ ...key, facility: ' BSD-MAIN ' })).toEqual(record);
    expect(await store.get({ ...key, facility: 'bsd-main' })).toBeUndefined();
    expect(await store.get({ ...key, identifier: { value: 'P-1' } })).toBeUndefined();
    expect(await store.get({ ...key, facility: 'BSD-NORTH' })).toBeUndefined();
  });

  it('replaces the record on a second put', async () => {
    const store = new InMemoryPatientInsuranceStore();
    await store.put(key, record);
    await store.put(key, { ...record, coverages: [], messageControlId: 'C2' });
    expect(await store.get(key)).toMatchObject({ coverages: [], messageControlId: 'C2' });
    expect(store.size).toBe(1);
  });

  it('hands out copies, so callers cannot change what is stored', async () => {
    const store = new InMemoryPatientInsuranceStore();
    const mine = structuredClone(record);
    await store.put(key, mine);
    mine.coverages.length = 0;
    const got = await store.get(key);
    got?.appointments.pop();
    expect(await store.get(key)).toEqual(record);
  });

  it('copies every level, so no object or array is shared between what was put, what is stored and what comes back', async () => {
    const store = new InMemoryPatientInsuranceStore();
    const mine = structuredClone(record);
    await store.put(key, mine);
    const got = (await store.get(key)) as PatientInsuranceRecord;
    expect(got).toEqual(mine);
    const objects = (value: unknown): object[] =>
      value !== null && typeof value === 'object' ? [value, ...Object.values(value).flatMap(objects)] : [];
    const shared = objects(got).filter((o) => objects(mine).includes(o));
    expect(shared).toEqual([]);
  });
});
