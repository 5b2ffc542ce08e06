import type { Appointment } from 'fhir/r4';
import { frame } from '../../src/service/mllp-framing';
import { MllpListener } from '../../src/service/mllp-listener';
import { segment } from '../adapters/hl7/segment';
import { client } from '../service/mllp-client';
import { chartOf, searchFhir, startHarness, until, type Harness } from './harness';

/** Freshness and re-verification on an injected clock: the days pass in milliseconds. */
describe('fresh results and re-verification before the visit', () => {
  let h: Harness;
  let clock: Date;
  afterEach(async () => h.close());

  const checkOf = async (key: string) => (await h.store.listChecks()).find((r) => r.key === key);
  const verificationPosts = () => h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification')).length;

  it('verifies again the day before the visit once the last result is older than the window, as a new verification', async () => {
    clock = new Date('2026-11-01T12:00:00Z');
    h = await startHarness({ now: () => clock, settings: { freshnessDays: 7, reverifyLeadDays: 1 } });
    await h.fhir.seed(chartOf('self')); // the visit: 2026-12-01
    await fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-1001`, { method: 'POST' });
    const first = await until('first result written', async () => (await h.store.listChecks({ states: ['written'] }))[0]);
    expect(first.dueAt).toBe('2026-11-30T00:00:00.000Z');
    expect(verificationPosts()).toBe(1);

    clock = new Date('2026-11-29T23:00:00Z');
    await new Promise((r) => setTimeout(r, 300));
    expect(verificationPosts()).toBe(1);

    clock = new Date('2026-11-30T06:00:00Z');
    const again = await until('re-verified', async () => {
      const [row] = await h.store.listChecks({ states: ['written'] });
      return row?.round === 1 && row;
    });
    expect(verificationPosts()).toBe(2);
    expect(again.externalId).not.toBe(first.externalId);
    // The visit is tomorrow: nothing more is scheduled.
    expect(again.dueAt).toBeUndefined();
    expect(await searchFhir(h.fhir, 'CoverageEligibilityResponse')).toHaveLength(2);
  });

  it('does not verify again for a visit that was cancelled, and does once it is booked again', async () => {
    clock = new Date('2026-11-01T12:00:00Z');
    h = await startHarness({ now: () => clock, settings: { freshnessDays: 7, reverifyLeadDays: 1 } });
    const chart = chartOf('self'); // the visit: 2026-12-01
    await h.fhir.seed(chart);
    const notify = () => fetch(`${h.httpUrl}/fhir-notifications/Appointment/appt-1001`, { method: 'POST' });
    await notify();
    const first = await until('first result written', async () => (await h.store.listChecks({ states: ['written'] }))[0]);
    expect(first.dueAt).toBe('2026-11-30T00:00:00.000Z');

    const appointment = chart.find((r) => r.resourceType === 'Appointment') as Appointment;
    await h.fhir.seed([{ ...appointment, status: 'cancelled' }]);
    await notify();
    await until('re-verification withdrawn', async () => (await checkOf(first.key))?.dueAt === undefined);
    clock = new Date('2026-11-30T06:00:00Z');
    await new Promise((r) => setTimeout(r, 300));
    expect(verificationPosts()).toBe(1);
    expect((await checkOf(first.key))?.state).toBe('written');

    clock = new Date('2026-11-20T12:00:00Z');
    await h.fhir.seed([appointment]);
    await notify();
    await until('re-verification scheduled again', async () => (await checkOf(first.key))?.dueAt === '2026-11-30T00:00:00.000Z');
    expect(verificationPosts()).toBe(1);
  });

  it('reuses a completed result younger than the window for another appointment of the same coverage', async () => {
    clock = new Date('2026-11-23T12:00:00Z');
    h = await startHarness({ now: () => clock });
    const listener = new MllpListener({ handler: (m) => h.sync.receiveHl7(m) });
    const { port } = await listener.start();
    const booking = (id: string, appointment: string, start: string) =>
      [
        `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20261123090000||SIU^S12^SIU_S12|${id}|P|2.5.1`,
        `SCH|${appointment}^SC||||||||||^^^${start}`,
        'PID|1||P-7^^^SC^MR||DOE^JANE||19800102|F',
        segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL', 36: 'SBX-COMPLETE' }),
      ].join('\r');
    const c = await client(port);
    c.socket.write(frame(booking('F1', 'APT-F1', '20261210093000')));
    await c.waitFor(1);
    await until('first written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
    c.socket.write(frame(booking('F2', 'APT-F2', '20261214093000')));
    await c.waitFor(2);
    await until('second written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    c.socket.end();
    await listener.stop();
    expect(verificationPosts()).toBe(1);
    const rows = await h.store.listChecks();
    const first = rows.find((r) => r.check.dateOfService === '2026-12-10');
    const reused = rows.find((r) => r.check.dateOfService === '2026-12-14');
    expect(reused?.reusedFrom).toBe(first?.correlationId);
    expect(reused?.correlationId).toBeUndefined();
  });
});
