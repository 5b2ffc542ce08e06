import { subscriptionNotificationIds } from '../../src/service/notifications';

describe('reading what a FHIR notification names', () => {
  it('reads a Bundle as large as a notification may be, each id once, in the order sent', () => {
    // Under 1 MiB, the most serve reads: some 32,000 entries, each naming an appointment of its own, and the first again.
    // (How long it takes is measured, not asserted here: 71c46d9 took it from 1.2 s to about 0.1 s.)
    const entry = Array.from({ length: 32_000 }, (_, i) => ({ fullUrl: `Appointment/a${i}` }));
    const body = JSON.stringify({ resourceType: 'Bundle', type: 'history', entry: [...entry, { fullUrl: 'Appointment/a0' }] });
    expect(body.length).toBeLessThan(1024 * 1024);
    const ids = subscriptionNotificationIds(body, '/fhir-notifications');
    const read = ids.kind === 'changes' ? ids.changed.Appointment : [];
    expect([read.length, read[0], read[1], read.at(-1)]).toEqual([32_000, 'a0', 'a1', 'a31999']);
  });
});
