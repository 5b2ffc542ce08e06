import { subscriptionNotificationIds } from '../../src/service/notifications';

describe('reading what a FHIR notification names', () => {
  it('reads a Bundle as large as a notification may be without holding the event loop', () => {
    // Under 1 MiB, the most serve reads: some 32,000 entries, each naming an appointment of its own, and the first again.
    const entry = Array.from({ length: 32_000 }, (_, i) => ({ fullUrl: `Appointment/a${i}` }));
    const body = JSON.stringify({ resourceType: 'Bundle', type: 'history', entry: [...entry, { fullUrl: 'Appointment/a0' }] });
    expect(body.length).toBeLessThan(1024 * 1024);
    const started = performance.now();
    const ids = subscriptionNotificationIds(body, '/fhir-notifications');
    // Each id looked up in those before it, it took over a second, every other message waiting.
    expect(performance.now() - started).toBeLessThan(600);
    expect(ids.kind === 'changes' && ids.changed.Appointment.length).toBe(32_000);
  });
});
