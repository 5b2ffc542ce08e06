import { MAX_CHANGES, subscriptionNotificationIds } from '../../src/service/notifications';

describe('reading what a FHIR notification names', () => {
  const bundleOf = (ids: string[]) => JSON.stringify({ resourceType: 'Bundle', type: 'history', entry: ids.map((id) => ({ fullUrl: `Appointment/${id}` })) });
  const appointments = (n: number) => Array.from({ length: n }, (_, i) => `a${i}`);

  it('reads each id of a Bundle once, in the order sent, up to the most one notification is read for', () => {
    const ids = subscriptionNotificationIds(bundleOf([...appointments(MAX_CHANGES), 'a0']), '/fhir-notifications');
    const read = ids.kind === 'changes' ? ids.changed.Appointment : [];
    expect([read.length, read[0], read[1], read.at(-1)]).toEqual([MAX_CHANGES, 'a0', 'a1', `a${MAX_CHANGES - 1}`]);
  });

  it('refuses a Bundle naming more, counting each resource once, whatever its type', () => {
    const mixed = JSON.parse(bundleOf(appointments(MAX_CHANGES))) as { entry: object[] };
    mixed.entry.push({ fullUrl: 'Patient/p0' });
    expect(subscriptionNotificationIds(JSON.stringify(mixed), '/fhir-notifications')).toEqual({
      kind: 'too-many',
      reason: `names ${MAX_CHANGES + 1} resources, more than the ${MAX_CHANGES} one notification is read for: send them in several, or let the poll (fhirPollIntervalMs) find them`,
    });
    // Each id once: a sender naming one appointment in every event of a batch is not refused for it.
    expect(subscriptionNotificationIds(bundleOf(Array.from({ length: 500 }, () => 'a0')), '/fhir-notifications').kind).toBe('changes');
  });

  it('reads what a Bundle names beside an id R4 does not allow, saying why that one is not read, and refuses one naming nothing else', () => {
    const reason = 'Appointment.id is not an R4 id (1 to 64 of A-Z, a-z, 0-9, - and ., not . or ..)';
    expect(subscriptionNotificationIds(bundleOf(['a 1', 'a2', '..']), '/fhir-notifications')).toEqual({ kind: 'changes', changed: { Appointment: ['a2'], Patient: [], Coverage: [], RelatedPerson: [] }, unfit: [reason] });
    expect(subscriptionNotificationIds(bundleOf(['a 1', '..']), '/fhir-notifications')).toEqual({ kind: 'invalid', reason });
  });

  it('reads the resource the path names when the body is not JSON (an XML payload), and says an XML one naming none is not read', () => {
    const xml = '<Patient xmlns="http://hl7.org/fhir"><id value="pat-1"/></Patient>';
    expect(subscriptionNotificationIds(xml, '/fhir-notifications/Patient/pat-1')).toEqual({ kind: 'changes', changed: { Appointment: [], Patient: ['pat-1'], Coverage: [], RelatedPerson: [] }, unfit: [] });
    expect(subscriptionNotificationIds(xml, '/fhir-notifications')).toEqual({ kind: 'invalid', reason: 'body is XML: a notification is read as JSON (channel.payload application/fhir+json), or id-only' });
  });

  it('reads a RelatedPerson, a subscriber kept so, by its path, as a full resource and in a Bundle', () => {
    const related = (...ids: string[]) => ({ kind: 'changes', changed: { Appointment: [], Patient: [], Coverage: [], RelatedPerson: ids }, unfit: [] });
    expect(subscriptionNotificationIds('', '/fhir-notifications/RelatedPerson/rp-1')).toEqual(related('rp-1'));
    expect(subscriptionNotificationIds(JSON.stringify({ resourceType: 'RelatedPerson', id: 'rp-2' }), '/fhir-notifications')).toEqual(related('rp-2'));
    const bundle = { resourceType: 'Bundle', type: 'history', entry: [{ fullUrl: 'http://chart/fhir/RelatedPerson/rp-3/_history/2' }, { resource: { resourceType: 'RelatedPerson', id: 'rp-4' } }] };
    expect(subscriptionNotificationIds(JSON.stringify(bundle), '/fhir-notifications')).toEqual(related('rp-3', 'rp-4'));
  });

  it('reads a Bundle as large as a notification may be without holding the event loop on each id', () => {
    // Under 1 MiB, the most serve reads: some 32,000 entries. Looking each id up among those before it
    // held the event loop 1.2 s (71c46d9); how long it takes is measured, not asserted: here, what it says.
    const body = bundleOf(appointments(32_000));
    expect(body.length).toBeLessThan(1024 * 1024);
    const ids = subscriptionNotificationIds(body, '/fhir-notifications');
    expect(ids.kind === 'too-many' && ids.reason.startsWith('names 32000 resources')).toBe(true);
  });
});
