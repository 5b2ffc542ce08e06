import type { FhirReader } from '../../src/adapters/fhir/in';
import { deadLetter } from '../../src/sync/dead-letters';
import { appointmentsToPoll } from '../../src/sync/ingest-fhir';
import { storePerTest } from '../support/sqlite-store';

/**
 * The poll's cursor against a FHIR server that keeps meta.lastUpdated to the whole second, as many
 * do: a change made, or made visible, in the second the cursor already holds is still seen, and
 * what was seen is not handed out again.
 */
interface Version {
  id: string;
  versionId?: string;
  lastUpdated: string;
  start?: string;
}

/** A server's Appointment search as the poll uses it: only `_lastUpdated` (ge/gt) narrows it here. */
function serverOf(appointments: Version[]): FhirReader {
  return {
    read: async () => undefined,
    search: async (_type, params) => {
      const bound = typeof params._lastUpdated === 'string' ? params._lastUpdated : undefined;
      return appointments
        .filter((a) => !bound || (bound.startsWith('ge') ? a.lastUpdated >= bound.slice(2) : a.lastUpdated > bound.slice(2)))
        .map((a) => ({ resourceType: 'Appointment', id: a.id, status: 'booked', start: a.start, meta: { ...(a.versionId && { versionId: a.versionId }), lastUpdated: a.lastUpdated } }));
    },
  };
}

describe('the FHIR poll cursor', () => {
  const store = storePerTest('elig-poll-');
  const policy = { freshnessMs: 7 * 86_400_000, reverifyLeadMs: 86_400_000 };

  it('sees a change in the second it already holds, and hands out nothing twice', async () => {
    const server: Version[] = [{ id: 'a', versionId: '1', lastUpdated: '2026-11-24T10:00:05Z' }];
    let cursor: string | undefined;
    const poll = async () => {
      const next = await appointmentsToPoll(store(), serverOf(server), { now: new Date('2026-11-24T12:00:00Z'), policy, days: 14, since: cursor });
      cursor = next.cursor;
      return next.ids.sort();
    };
    expect(await poll()).toEqual(['a']);
    // Made visible after the poll, in the same second.
    server.push({ id: 'b', versionId: '1', lastUpdated: '2026-11-24T10:00:05Z' });
    expect(await poll()).toEqual(['b']);
    expect(await poll()).toEqual([]);
    // Changed again in that second: a new version.
    server[0] = { id: 'a', versionId: '2', lastUpdated: '2026-11-24T10:00:05Z' };
    expect(await poll()).toEqual(['a']);
    server.push({ id: 'c', versionId: '1', lastUpdated: '2026-11-24T10:00:06Z' });
    expect(await poll()).toEqual(['c']);
    expect(await poll()).toEqual([]);
  });

  it('tells a version by what the appointment holds when the server gives no versionId', async () => {
    const server: Version[] = [{ id: 'a', lastUpdated: '2026-11-24T10:00:05Z', start: '2026-12-01T09:00:00-08:00' }];
    const first = await appointmentsToPoll(store(), serverOf(server), { now: new Date('2026-11-24T12:00:00Z'), policy, days: 14, since: undefined });
    expect(first.ids).toEqual(['a']);
    const same = await appointmentsToPoll(store(), serverOf(server), { now: new Date('2026-11-24T12:00:00Z'), policy, days: 14, since: first.cursor });
    expect(same.ids).toEqual([]);
    // Moved in the same second.
    server[0] = { id: 'a', lastUpdated: '2026-11-24T10:00:05Z', start: '2026-12-02T09:00:00-08:00' };
    const moved = await appointmentsToPoll(store(), serverOf(server), { now: new Date('2026-11-24T12:00:00Z'), policy, days: 14, since: same.cursor });
    expect(moved.ids).toEqual(['a']);
  });
});

describe('the poll while a letter names an appointment the chart refused', () => {
  const store = storePerTest('elig-poll-letter-');
  const policy = { freshnessMs: 7 * 86_400_000, reverifyLeadMs: 86_400_000 };
  const now = new Date('2026-11-24T12:00:00Z');

  it("still polls the appointments when the chart fails the search of a changed patient's appointments", async () => {
    await deadLetter(store(), { kind: 'fhir-notification', raw: '{}', reason: 'Appointment/refused-1: Coverage[0].subscriberId: required', receivedAt: now });
    const server: FhirReader = {
      read: async () => undefined,
      search: async (type, params) => {
        if (type === 'Patient') return [{ resourceType: 'Patient', id: 'p-1', meta: { versionId: '2', lastUpdated: '2026-11-24T11:00:00Z' } }];
        if (type !== 'Appointment') return [];
        // The patient's appointments, searched for the letter's: a chart that times such a search out.
        if (params.patient !== undefined) throw new Error('The operation was aborted due to timeout');
        return [{ resourceType: 'Appointment', id: 'a-1', status: 'booked', meta: { versionId: '1', lastUpdated: '2026-11-24T10:00:00Z' } }];
      },
    };
    const polled = await appointmentsToPoll(store(), server, { now, policy, days: 14, since: undefined });
    expect(polled.ids).toEqual(['a-1']);
  });
});
