import { loadClinicRouting } from '../../src/adapters/clinic-routing';
import { schedulePolicy, SyncSettings } from '../../src/service/eligibility-sync';
import { idempotencyKey, type EligibilityCheck } from '../../src/domain';
import type { CheckRow } from '../../src/sync/job-store';
import { scheduleAppointment } from '../../src/sync/schedule';
import { storePerTest } from '../support/sqlite-store';
import { checkRow } from './job-store-contract';

/**
 * A fresh result serves another appointment of the same coverage only in the result's benefit
 * period (scheduleAppointment on a real SQLite file): a period is a year, so one stated by a
 * single bound reaches a year from it, not for good.
 */
describe('a fresh result reused for another visit of the same coverage', () => {
  const NOW = new Date('2026-12-20T12:00:00Z');
  const store = storePerTest('elig-reuse-');

  /** The state a new visit's check starts in after a written result for 2026-12-20 whose plan states `benefitPeriod` (`earlier`: that check otherwise). */
  async function visitAfter(benefitPeriod: Record<string, string>, dateOfService: string, earlier: Partial<CheckRow> = {}): Promise<string | undefined> {
    const written = checkRow('written-visit', {
      state: 'written',
      result: { correlationId: 'ver_reuse', status: 'Completed', result: { plan: { status: 'Active', benefitPeriod } } },
      resultAt: NOW.toISOString(),
      correlationId: 'ver_reuse',
      ...earlier,
    });
    await store().transaction((tx) => tx.putCheck({ ...written, check: { ...written.check, dateOfService: '2026-12-20' } }));
    const { idempotencyKey: _key, source: _source, warnings: _warnings, ...body } = { ...written.check, dateOfService };
    const later: EligibilityCheck = { ...written.check, dateOfService, idempotencyKey: idempotencyKey(body) };
    const policy = schedulePolicy(SyncSettings.parse({}), loadClinicRouting());
    await store().transaction((tx) => scheduleAppointment(tx, { key: `appt-${dateOfService}`, patientKey: written.patientKey, dateOfService, status: 'booked', checks: [later], basis: {} }, { now: NOW, policy }));
    return (await store().transaction((tx) => tx.getCheck(later.idempotencyKey)))?.state;
  }

  it.each([
    ['a year from a period stated by its start alone: within it', { start: '2026-01-01' }, '2026-12-31', 'result-stored'],
    ['a year from a period stated by its start alone: after it', { start: '2026-01-01' }, '2027-01-05', 'received'],
    ['a year before a period stated by its end alone: within it', { end: '2027-06-30' }, '2027-01-05', 'result-stored'],
    ['a period stated by its end alone: after it', { end: '2026-12-31' }, '2027-01-05', 'received'],
    ['a period stated whole: after it', { start: '2026-01-01', end: '2026-12-31' }, '2027-01-05', 'received'],
    ['a year before a period stated by its end alone on February 29: its first day', { end: '2028-02-29' }, '2027-03-01', 'result-stored'],
    ['a year before a period stated by its end alone on February 29: the day before it', { end: '2028-02-29' }, '2027-02-28', 'received'],
    ['a year from a period stated by its start alone on February 29: its last day', { start: '2028-02-29' }, '2029-02-28', 'result-stored'],
    ['a year from a period stated by its start alone on February 29: the day after it', { start: '2028-02-29' }, '2029-03-01', 'received'],
    // Dates a service writes as date-times at midnight (f66065d): the day they name, as the chart's writer reads them.
    ['a year from a period stated by its start alone at midnight UTC: after it', { start: '2026-01-01T00:00:00Z' }, '2027-01-05', 'received'],
    ['a year before a period stated by its end alone at midnight with an offset: before it', { end: '2027-12-31T00:00:00+01:00' }, '2026-12-31', 'received'],
    ['a year from a period stated by its start alone at midnight with no offset, as .NET writes it: within it', { start: '2026-01-01T00:00:00' }, '2026-12-31', 'result-stored'],
    // A bound the result writes as no date (left out as read, kept with the response) settles nothing: not read as no bound, which the same calendar year would stand in for.
    ['a period whose bounds are not written as dates: the visit is verified for itself', { start: '07/01/2026', end: '06/30/2027' }, '2026-12-28', 'received'],
  ])('%s', async (_case, period, dateOfService, state) => {
    expect(await visitAfter(period, dateOfService)).toBe(state);
  });

  it.each([
    // Its visit moved once the result came: the result serves the visit it moved to.
    ['a check cancelled after its result came: it serves', '2026-12-20T11:59:00.000Z', 'result-stored'],
    // Its visit moved while its re-verification was at the service: the result is the last round's, and the verification it
    // names (the round's) is another, whose answer the check still takes.
    ['a re-verification cancelled with its request at the service: its last round\'s result does not', '2026-12-20T12:30:00.000Z', 'received'],
  ])('%s', async (_case, submittedAt, state) => {
    const cancelled = { state: 'cancelled' as const, correlationId: 'ver_round', submittedAt };
    expect(await visitAfter({ start: '2026-01-01' }, '2026-12-31', cancelled)).toBe(state);
  });
});
