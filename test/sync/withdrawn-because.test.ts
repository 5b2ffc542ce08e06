import { loadClinicRouting } from '../../src/adapters/clinic-routing';
import { idempotencyKey, type EligibilityCheck } from '../../src/domain';
import { schedulePolicy, SyncSettings } from '../../src/service/eligibility-sync';
import type { AppointmentStatus } from '../../src/sync/job-store';
import { scheduleAppointment } from '../../src/sync/schedule';
import { storePerTest } from '../support/sqlite-store';
import { checkRow } from './job-store-contract';

/**
 * A check its appointment no longer holds is withdrawn saying why, by what the appointment is now
 * (scheduleAppointment on a real SQLite file): `jobs list` said 'cancelled or moved' of a check a
 * corrected member id replaced, the visit still booked (audit-dso).
 */
describe('a check withdrawn from its appointment', () => {
  const NOW = new Date('2026-11-26T12:00:00Z');
  const store = storePerTest('elig-withdrawn-');
  const policy = schedulePolicy(SyncSettings.parse({}), loadClinicRouting());
  const base = checkRow('base').check;
  const withMemberId = (memberId: string): EligibilityCheck => {
    const { idempotencyKey: _key, source: _source, warnings: _warnings, ...body } = { ...base, subscriber: { ...base.subscriber, memberId } };
    return { ...base, subscriber: { ...base.subscriber, memberId }, idempotencyKey: idempotencyKey(body) };
  };
  const atClinic = (check: EligibilityCheck, clinicId: string): EligibilityCheck => {
    const { idempotencyKey: _key, source: _source, warnings: _warnings, ...body } = { ...check, clinicId };
    return { ...check, clinicId, idempotencyKey: idempotencyKey(body) };
  };
  const schedule = (status: AppointmentStatus, checks: EligibilityCheck[]) =>
    store().transaction((tx) => scheduleAppointment(tx, { key: 'appt-1', patientKey: 'hl7|BSD|P-1', dateOfService: base.dateOfService, status, checks, basis: {} }, { now: NOW, policy }));
  const why = async (check: EligibilityCheck) => {
    const row = await store().transaction((tx) => tx.getCheck(check.idempotencyKey));
    return [row?.state, row?.lastError];
  };

  it('says the appointment verifies another check when a member id is corrected, and that it was cancelled when it is', async () => {
    const [typo, corrected] = [withMemberId('M-1'), withMemberId('M-2')];
    await schedule('booked', [typo]);
    expect((await schedule('booked', [corrected])).withdrawn).toEqual([typo.idempotencyKey]);
    expect(await why(typo)).toEqual(['cancelled', "the appointment verifies another check now (its date or office, the patient's details or a plan changed)"]);
    await schedule('cancelled', []);
    expect(await why(corrected)).toEqual(['cancelled', 'the appointment was cancelled']);
  });

  it('says the office may have changed when the visit moved to another office of the group, the day and plan the same', async () => {
    const main = withMemberId('M-5');
    await schedule('booked', [main]);
    expect((await schedule('booked', [atClinic(main, 'cln_sandbox_north')])).withdrawn).toEqual([main.idempotencyKey]);
    expect(await why(main)).toEqual(['cancelled', expect.stringContaining('its date or office')]);
  });

  it('says the patient pays for the visit, or has no insurance in force, when the appointment turns so', async () => {
    const [first, second] = [withMemberId('M-3'), withMemberId('M-4')];
    await schedule('booked', [first]);
    await schedule('self-pay', []);
    expect(await why(first)).toEqual(['cancelled', 'the patient pays for the visit now (no insurance)']);
    await schedule('booked', [second]);
    await schedule('awaiting-insurance', []);
    expect(await why(second)).toEqual(['cancelled', 'the appointment has no insurance in force now']);
  });
});
