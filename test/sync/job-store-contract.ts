import { checksFromBundle } from '../../src/adapters/fhir/in';
import { loadClinicRouting } from '../../src/adapters/clinic-routing';
import type { PatientInsuranceRecord } from '../../src/domain';
import type { AppointmentRow, CheckRow, CheckState, JobStore, StoreTx } from '../../src/sync/job-store';
import { pruneFinished } from '../../src/sync/prune';
import { endDroppedPlans, fingerprints, scheduleAppointment } from '../../src/sync/schedule';
import { chartOf } from './harness';

/**
 * What every JobStore does, whatever holds it: what commits, what rolls back, who may take a
 * check, what a concurrent transaction sees. Each store's test file runs it on a real store.
 */

export const NOW = '2026-11-23T10:00:00.000Z';
const [check] = checksFromBundle({ resourceType: 'Bundle', type: 'collection', entry: chartOf('self').map((resource) => ({ resource })) }, {
  routing: loadClinicRouting(),
  receivedAt: NOW,
});

export function checkRow(key: string, change: Partial<CheckRow> = {}): CheckRow {
  if (!check) throw new Error('fixture gave no check');
  return {
    key,
    state: 'received',
    check: { ...check, idempotencyKey: key },
    patientKey: 'fhir|Patient/pat-ellen',
    ...fingerprints(check),
    round: 0,
    externalId: `ext-${key}`,
    attempts: 0,
    dueAt: NOW,
    createdAt: NOW,
    updatedAt: NOW,
    ...change,
  };
}

/** Adds an appointment to the patient's record: a read, then a write that depends on it. */
export async function rememberAppointment(tx: StoreTx, patientKey: string, appointmentId: string): Promise<void> {
  if (!check) throw new Error('fixture gave no check');
  const { memberId: _m, ...patient } = check.patient;
  const earlier: PatientInsuranceRecord = (await tx.getPatient(patientKey)) ?? { patient, coverages: [], appointments: [], updatedAt: NOW, messageControlId: 'first' };
  await tx.putPatient(patientKey, { ...earlier, appointments: [...earlier.appointments, { appointmentId, dateOfService: '2026-12-01', keys: [] }], messageControlId: appointmentId });
}

function appointment(key: string, change: Partial<AppointmentRow> = {}): AppointmentRow {
  return { key, patientKey: 'hl7|BSD|MR|1', dateOfService: '2026-12-01', status: 'booked', checkKeys: [], basis: { source: key }, updatedAt: NOW, ...change };
}

/** A place a store lives (a folder, a database): opened again after a close, it has the same data. */
export interface StorePlace {
  open(): Promise<JobStore>;
  remove(): Promise<void>;
}

export function jobStoreContract(name: string, newPlace: () => Promise<StorePlace>): void {
  describe(`${name} keeps the JobStore contract`, () => {
    let place: StorePlace;
    let store: JobStore;
    beforeEach(async () => {
      place = await newPlace();
      store = await place.open();
    });
    afterEach(async () => {
      await store.close();
      await place.remove();
    });

    it('commits a transaction whole, and rolls back a failed one whole, running it once', async () => {
      await store.transaction(async (tx) => {
        await tx.putCheck(checkRow('elig_a'));
        await tx.addMessage({ kind: 'hl7', dedupeKey: 'A|B|1', receivedAt: NOW, raw: 'MSH|...', status: 'handled' });
      });
      let runs = 0;
      await expect(
        store.transaction(async (tx) => {
          runs++;
          await tx.putCheck(checkRow('elig_b'));
          await tx.addMessage({ kind: 'hl7', dedupeKey: 'A|B|2', receivedAt: NOW, raw: 'MSH|...', status: 'handled' });
          throw new Error('disk full');
        }),
      ).rejects.toThrow('disk full');
      expect(runs).toBe(1);
      expect((await store.listChecks()).map((c) => c.key)).toEqual(['elig_a']);
      expect((await store.listMessages()).map((m) => m.dedupeKey)).toEqual(['A|B|1']);
    });

    it('keeps one message per kind and dedupe key, and says when a message is a repeat', async () => {
      const first = await store.transaction((tx) => tx.addMessage({ kind: 'webhook', dedupeKey: 'msg_1', receivedAt: NOW, raw: '{}', status: 'received' }));
      const again = await store.transaction((tx) => tx.addMessage({ kind: 'webhook', dedupeKey: 'msg_1', receivedAt: NOW, raw: '{}', status: 'received' }));
      const other = await store.transaction((tx) => tx.addMessage({ kind: 'hl7', dedupeKey: 'msg_1', receivedAt: NOW, raw: 'x', status: 'received' }));
      expect([first.duplicate, again.duplicate, other.duplicate]).toEqual([false, true, false]);
      expect(again.message.id).toBe(first.message.id);
      // Found by kind and key without adding one: none for a key not kept, or kept under another kind.
      const found = await store.transaction(async (tx) => [await tx.findMessage('hl7', 'msg_1'), await tx.findMessage('webhook', 'msg_2'), await tx.findMessage('fhir-notification', 'msg_1')]);
      expect(found.map((m) => m?.id)).toEqual([other.message.id, undefined, undefined]);
      expect(found[0]).toMatchObject({ kind: 'hl7', dedupeKey: 'msg_1', raw: 'x', status: 'received' });
    });

    it('finds the dead FHIR letters whose detail begins with a resource, not another\'s, a handled one or another kind\'s', async () => {
      const keep = (kind: 'hl7' | 'fhir-notification', dedupeKey: string, status: 'dead' | 'handled', detail: string) =>
        store.transaction(async (tx) => {
          const { message } = await tx.addMessage({ kind, dedupeKey, receivedAt: NOW, raw: '{}', status });
          await tx.updateMessage(message.id, { status, detail });
          return message.id;
        });
      const mine = await keep('fhir-notification', 'a', 'dead', 'Appointment/a-1: Coverage[0].subscriberId: required');
      await keep('fhir-notification', 'b', 'dead', 'Appointment/a-10: Coverage[0].subscriberId: required');
      await keep('fhir-notification', 'c', 'handled', 'Appointment/a-1: Coverage[0].subscriberId: required');
      await keep('hl7', 'd', 'dead', 'Appointment/a-1: not a FHIR letter');
      await keep('fhir-notification', 'e', 'dead', 'not handled (Appointment/a-1: 503); the sender was asked to send it again');
      const found = await store.transaction((tx) => tx.deadLettersNaming('Appointment/a-1: '));
      expect(found.map((m) => m.id)).toEqual([mine]);
      expect(await store.transaction((tx) => tx.deadLettersNaming('Appointment/'))).toHaveLength(2);
    });

    it('keeps a message whose dedupe key holds a NUL (a broken sender\'s MSH-10) and knows its resend', async () => {
      const dedupeKey = 'PMS|BSD|MSG\u00001';
      const add = () => store.transaction((tx) => tx.addMessage({ kind: 'hl7', dedupeKey, receivedAt: NOW, raw: 'MSH|...', status: 'received' }));
      const first = await add();
      const again = await add();
      expect([first.duplicate, again.duplicate, again.message.id]).toEqual([false, true, first.message.id]);
      expect((await store.listMessages()).map((m) => m.dedupeKey)).toEqual([dedupeKey]);
    });

    it('keeps what was received exactly, NUL and all, and changes only the fields an update names', async () => {
      const raw = 'MSH|^~\\&|PMS|BSD\rPID|1||\u0000x||Ünlü^Zoë 😀\r';
      const { message } = await store.transaction((tx) => tx.addMessage({ kind: 'hl7', dedupeKey: 'k1', receivedAt: NOW, raw, status: 'received' }));
      await store.transaction((tx) => tx.updateMessage(message.id, { status: 'dead', detail: 'rejected: PID-3 is empty' }));
      await store.transaction((tx) => tx.updateMessage(message.id, { answer: '[]' }));
      await store.transaction((tx) => tx.addMessage({ kind: 'webhook', dedupeKey: 'w1', receivedAt: NOW, raw: '{}', status: 'handled' }));
      expect(await store.getMessage(message.id)).toEqual({ id: message.id, kind: 'hl7', dedupeKey: 'k1', receivedAt: NOW, raw, status: 'dead', detail: 'rejected: PID-3 is empty', answer: '[]' });
      expect((await store.listMessages({ status: 'dead' })).map((m) => m.dedupeKey)).toEqual(['k1']);
      expect((await store.listMessages({ kind: 'webhook' })).map((m) => m.dedupeKey)).toEqual(['w1']);
      expect((await store.listMessages({ limit: 1 })).map((m) => m.dedupeKey)).toEqual(['w1']);
      expect(await store.getMessage(message.id + 99)).toBeUndefined();
    });

    it('leases due checks to one worker until the lease runs out, then to another', async () => {
      await store.transaction(async (tx) => {
        await tx.putCheck(checkRow('elig_due'));
        await tx.putCheck(checkRow('elig_later', { dueAt: '2026-11-24T00:00:00.000Z' }));
        await tx.putCheck(checkRow('elig_done', { state: 'needs-attention', dueAt: NOW }));
      });
      const a = await store.claimDue({ now: NOW, limit: 10, owner: 'a', leaseMs: 60_000 });
      expect(a.map((c) => c.key)).toEqual(['elig_due']);
      expect(await store.claimDue({ now: NOW, limit: 10, owner: 'b', leaseMs: 60_000 })).toEqual([]);
      const later = '2026-11-23T10:01:00.001Z';
      expect((await store.claimDue({ now: later, limit: 10, owner: 'b', leaseMs: 60_000 })).map((c) => c.key)).toEqual(['elig_due']);
      await store.release('elig_due', 'a'); // not a's any more: changes nothing
      expect(await store.claimDue({ now: later, limit: 10, owner: 'c', leaseMs: 60_000 })).toEqual([]);
      await store.release('elig_due', 'b');
      expect((await store.claimDue({ now: later, limit: 10, owner: 'c', leaseMs: 60_000 })).map((c) => c.key)).toEqual(['elig_due']);
    });

    it('extends a lease its owner holds, so the check is not claimed while its step is in flight', async () => {
      await store.transaction((tx) => tx.putCheck(checkRow('elig_slow')));
      await store.claimDue({ now: NOW, limit: 10, owner: 'a', leaseMs: 60_000 });
      // At 50 s, 'a' is still sending it: its lease now ends at 1 min 50 s, not 1 min.
      expect(await store.extendLease({ key: 'elig_slow', owner: 'a', now: '2026-11-23T10:00:50.000Z', leaseMs: 60_000 })).toBe(true);
      expect(await store.claimDue({ now: '2026-11-23T10:01:30.000Z', limit: 10, owner: 'b', leaseMs: 60_000 })).toEqual([]);
      expect(await store.extendLease({ key: 'elig_slow', owner: 'b', now: '2026-11-23T10:01:30.000Z', leaseMs: 60_000 })).toBe(false);
      const after = await store.claimDue({ now: '2026-11-23T10:01:50.001Z', limit: 10, owner: 'b', leaseMs: 60_000 });
      expect(after.map((c) => c.key)).toEqual(['elig_slow']);
      // Taken by another after it ran out: the first owner's heartbeat no longer holds it.
      expect(await store.extendLease({ key: 'elig_slow', owner: 'a', now: '2026-11-23T10:01:51.000Z', leaseMs: 60_000 })).toBe(false);
    });

    it('hands out the most overdue checks first, up to the limit', async () => {
      await store.transaction(async (tx) => {
        for (const [key, dueAt] of [['k3', '2026-11-23T09:30:00.000Z'], ['k1', '2026-11-23T08:00:00.000Z'], ['k2', '2026-11-23T09:00:00.000Z']] as const) {
          await tx.putCheck(checkRow(key, { dueAt }));
        }
      });
      expect((await store.claimDue({ now: NOW, limit: 2, owner: 'a', leaseMs: 1000 })).map((c) => c.key)).toEqual(['k1', 'k2']);
    });

    it("hands out the chart's work (results to write, Coverages to end) before the service's, or either alone, each the most overdue first", async () => {
      await store.transaction(async (tx) => {
        for (const [key, state, dueAt] of [
          ['send-early', 'received', '2026-11-23T08:00:00.000Z'],
          ['poll-early', 'awaiting-result', '2026-11-23T08:30:00.000Z'],
          ['write-late', 'result-stored', '2026-11-23T09:50:00.000Z'],
          ['write-early', 'result-stored', '2026-11-23T09:40:00.000Z'],
          ['end-coverage', 'ending-coverage', '2026-11-23T09:45:00.000Z'],
          ['write-not-due', 'result-stored', '2026-11-23T10:30:00.000Z'],
          ['send-late', 'received', '2026-11-23T09:00:00.000Z'],
          ['reverify', 'written', '2026-11-23T09:55:00.000Z'],
        ] as const) {
          await tx.putCheck(checkRow(key, { state, dueAt }));
        }
      });
      const claim = async (owner: string, limit: number, caps: { chart?: number; service?: number } = {}, now = NOW) =>
        (await store.claimDue({ now, limit, ...caps, owner, leaseMs: 60_000 })).map((c) => c.key);
      expect(await claim('a', 1)).toEqual(['write-early']);
      expect(await claim('a', 3)).toEqual(['end-coverage', 'write-late', 'send-early']);
      expect(await claim('b', 10, { service: 0 })).toEqual([]);
      expect(await claim('b', 10, { chart: 5, service: 1 })).toEqual(['poll-early']);
      expect(await claim('b', 10)).toEqual(['send-late', 'reverify']);
      const later = '2026-11-23T10:31:00.000Z';
      // Each kind up to its cap, the two up to the limit, the chart's first.
      expect(await claim('c', 3, { chart: 2, service: 3 }, later)).toEqual(['write-early', 'end-coverage', 'send-early']);
      expect(await claim('d', 10, { chart: 0 }, later)).toEqual(['poll-early', 'send-late', 'reverify']);
      expect(await claim('e', 10, { service: 0 }, later)).toEqual(['write-late', 'write-not-due']);
    });

    it('says when the next check falls due, a leased one when its lease ends, and counts what is due', async () => {
      expect(await store.nextDueAt()).toBeUndefined();
      await store.transaction(async (tx) => {
        await tx.putCheck(checkRow('elig_1', { dueAt: '2026-11-23T09:00:00.000Z' }));
        await tx.putCheck(checkRow('elig_2', { dueAt: '2026-11-23T11:00:00.000Z' }));
        await tx.putCheck(checkRow('elig_3', { state: 'dead', dueAt: '2026-11-23T08:00:00.000Z' }));
      });
      expect(await store.nextDueAt()).toBe('2026-11-23T09:00:00.000Z');
      expect(await store.counts(NOW)).toEqual({ checks: { received: 2, dead: 1 }, messages: {}, awaitingInsurance: 0, awaitingCorrection: 0, forAPerson: 1, due: 1, oldestDueAt: '2026-11-23T09:00:00.000Z' });
      await store.claimDue({ now: NOW, limit: 1, owner: 'a', leaseMs: 30 * 60_000 });
      expect(await store.nextDueAt()).toBe('2026-11-23T10:30:00.000Z');
      expect((await store.counts(NOW)).due).toBe(0);
    });

    it('counts the checks left to a person that none has dismissed as they are', async () => {
      const at = '2026-11-23T09:00:00.000Z';
      await store.transaction(async (tx) => {
        await tx.putCheck(checkRow('elig_attention', { state: 'needs-attention', dueAt: undefined }));
        await tx.putCheck(checkRow('elig_dismissed', { state: 'needs-attention', dueAt: undefined, dismissedAt: at, updatedAt: at }));
        await tx.putCheck(checkRow('elig_dead_dismissed', { state: 'dead', dueAt: undefined, dismissedAt: at, updatedAt: at }));
        // Changed since its dismissal (a late result, a new round that failed again): it waits for a person anew.
        await tx.putCheck(checkRow('elig_changed', { state: 'needs-attention', dueAt: undefined, dismissedAt: at, updatedAt: '2026-11-23T09:30:00.000Z' }));
        await tx.putCheck(checkRow('elig_written', { state: 'written', dueAt: undefined, dismissedAt: at, updatedAt: at }));
      });
      expect((await store.counts(NOW)).forAPerson).toBe(2);
    });

    it('lists checks newest first, by state and up to a limit', async () => {
      await store.transaction(async (tx) => {
        await tx.putCheck(checkRow('elig_old', { updatedAt: '2026-11-23T08:00:00.000Z' }));
        await tx.putCheck(checkRow('elig_new', { state: 'written', updatedAt: '2026-11-23T09:00:00.000Z' }));
        await tx.putCheck(checkRow('elig_mid', { state: 'written', updatedAt: '2026-11-23T08:30:00.000Z' }));
      });
      expect((await store.listChecks()).map((c) => c.key)).toEqual(['elig_new', 'elig_mid', 'elig_old']);
      expect((await store.listChecks({ states: ['written'], limit: 1 })).map((c) => c.key)).toEqual(['elig_new']);
      expect((await store.listChecks({ changedAfter: '2026-11-23T08:30:00.000Z' })).map((c) => c.key)).toEqual(['elig_new']);
      expect((await store.listChecks({ states: ['received'], changedAfter: '2026-11-23T07:59:59.999Z' })).map((c) => c.key)).toEqual(['elig_old']);
      expect((await store.transaction((tx) => tx.getCheck('elig_mid')))?.state).toBe('written');
    });

    it('finds the completed results of a coverage taken since a time, newest first, and no failed one', async () => {
      const completed = { correlationId: 'c', status: 'Completed' };
      await store.transaction(async (tx) => {
        await tx.putCheck(checkRow('elig_old', { state: 'written', result: completed, resultAt: '2026-11-20T10:00:00.000Z' }));
        await tx.putCheck(checkRow('elig_new', { state: 'result-stored', result: completed, resultAt: '2026-11-22T10:00:00.000Z' }));
        await tx.putCheck(checkRow('elig_failed', { state: 'written', result: { correlationId: 'f', status: 'Failed' }, resultAt: '2026-11-23T09:00:00.000Z' }));
        // Its visit moved while the verification was under way: the result it took serves the moved visit.
        await tx.putCheck(checkRow('elig_cancelled', { state: 'cancelled', result: completed, resultAt: '2026-11-21T10:00:00.000Z' }));
        await tx.putCheck(checkRow('elig_dead', { state: 'dead', result: completed, resultAt: '2026-11-21T11:00:00.000Z' }));
      });
      const coverage = checkRow('x').coverageFingerprint;
      const keys = async (coverageFingerprint: string, since: string) => (await store.transaction((tx) => tx.freshResults(coverageFingerprint, since))).map((r) => r.key);
      expect(await keys(coverage, '2026-11-19T00:00:00.000Z')).toEqual(['elig_new', 'elig_cancelled', 'elig_old']);
      expect(await keys(coverage, '2026-11-21T00:00:00.000Z')).toEqual(['elig_new', 'elig_cancelled']);
      expect(await keys(coverage, '2026-11-23T00:00:00.000Z')).toEqual([]);
      expect(await keys('another coverage', '2026-11-19T00:00:00.000Z')).toEqual([]);
    });

    it('finds the checks of a coverage whose verification is to be sent or under way, and those cancelled without a result', async () => {
      await store.transaction(async (tx) => {
        for (const state of ['received', 'submitted', 'awaiting-result', 'result-stored', 'written', 'needs-attention', 'cancelled', 'dead'] as const) {
          await tx.putCheck(checkRow(`elig_${state}`, { state }));
        }
        // Cancelled with its result taken: nothing of it is under way any more.
        await tx.putCheck(checkRow('elig_cancelled-answered', { state: 'cancelled', result: { correlationId: 'c', status: 'Completed' }, resultAt: '2026-11-21T10:00:00.000Z' }));
        // A re-verification cancelled with its request at the service: the result it holds is the last round's, older than its send.
        const lastRound = { result: { correlationId: 'r0', status: 'Completed' }, resultAt: '2026-11-21T10:00:00.000Z' };
        await tx.putCheck(checkRow('elig_cancelled-reverifying', { state: 'cancelled', ...lastRound, submittedAt: '2026-11-28T10:00:00.000Z' }));
        await tx.putCheck(checkRow('elig_cancelled-reverified', { state: 'cancelled', ...lastRound, submittedAt: '2026-11-21T09:59:59.000Z' }));
      });
      const keys = async (coverageFingerprint: string) => (await store.transaction((tx) => tx.verifying(coverageFingerprint))).map((r) => r.key).sort();
      // A cancelled one without a result may have its request at the service: the worker tells by its fields.
      expect(await keys(checkRow('x').coverageFingerprint)).toEqual(['elig_awaiting-result', 'elig_cancelled', 'elig_cancelled-reverifying', 'elig_received', 'elig_submitted']);
      expect(await keys('another coverage')).toEqual([]);
    });

    it('knows which booked appointments hold a check, as the appointments change', async () => {
      await store.transaction(async (tx) => {
        await tx.putAppointment(appointment('apt-2', { dateOfService: '2026-12-02', checkKeys: ['elig_x', 'elig_y'] }));
        await tx.putAppointment(appointment('apt-1', { checkKeys: ['elig_x'] }));
        await tx.putAppointment(appointment('apt-3', { patientKey: 'hl7|BSD|MR|2', status: 'awaiting-insurance', checkKeys: ['elig_x'] }));
        await tx.putAppointment(appointment('apt-4', { patientKey: 'hl7|BSD|MR|3', status: 'awaiting-correction', checkKeys: [] }));
        // Their visits over (NOW is the 23rd): waiting for nothing a person can do, not counted.
        await tx.putAppointment(appointment('apt-5', { patientKey: 'hl7|BSD|MR|4', dateOfService: '2026-11-21', status: 'awaiting-correction', checkKeys: [] }));
        await tx.putAppointment(appointment('apt-6', { patientKey: 'hl7|BSD|MR|5', dateOfService: '2026-11-21', status: 'awaiting-insurance', checkKeys: [] }));
      });
      await store.transaction((tx) => tx.putAppointment(appointment('apt-2', { dateOfService: '2026-12-02', checkKeys: ['elig_y'], basis: { moved: true } })));
      const seen = await store.transaction(async (tx) => ({
        holdingX: (await tx.appointmentsHolding('elig_x')).map((a) => a.key),
        holdingY: (await tx.appointmentsHolding('elig_y')).map((a) => a.key),
        ofPatient: (await tx.appointmentsOfPatient('hl7|BSD|MR|1')).map((a) => a.key),
        ofPatientBut2: (await tx.appointmentsOfPatient('hl7|BSD|MR|1', 'apt-2')).map((a) => a.key),
        apt2: await tx.getAppointment('apt-2'),
      }));
      expect(seen).toEqual({ holdingX: ['apt-1'], holdingY: ['apt-2'], ofPatient: ['apt-1', 'apt-2'], ofPatientBut2: ['apt-1'], apt2: appointment('apt-2', { dateOfService: '2026-12-02', checkKeys: ['elig_y'], basis: { moved: true } }) });
      expect((await store.listAppointments('awaiting-insurance')).map((a) => a.key).sort()).toEqual(['apt-3', 'apt-6']);
      expect(await store.counts(NOW)).toMatchObject({ awaitingInsurance: 1, awaitingCorrection: 1 });
    });

    it("withdraws a check cancelled while its result is on its way to the chart as the chart's work, held back while a worker has it in hand", async () => {
      const booked = checkRow('elig_flying');
      const book = (status: 'booked' | 'cancelled') => (tx: StoreTx) =>
        scheduleAppointment(tx, { key: 'apt-f', patientKey: booked.patientKey, dateOfService: booked.check.dateOfService, status, checks: status === 'booked' ? [booked.check] : [], basis: {} }, {
          now: new Date(NOW),
          policy: { freshnessMs: 86_400_000, reverifyLeadMs: 86_400_000 },
        });
      await store.transaction(book('booked'));
      await store.transaction(async (tx) => tx.putCheck({ ...((await tx.getCheck('elig_flying')) as CheckRow), state: 'result-stored', result: { status: 'Completed' }, resultAt: NOW }));
      expect((await store.claimDue({ now: NOW, limit: 1, owner: 'writing', leaseMs: 60_000 })).map((c) => c.key)).toEqual(['elig_flying']);
      await store.transaction(book('cancelled'));
      const withdrawing = { state: 'result-stored', withdrawnBecause: 'the appointment was cancelled', dueAt: NOW };
      expect(await store.transaction((tx) => tx.getCheck('elig_flying'))).toMatchObject(withdrawing);
      // The worker writing it has it until its write is done; the lease gone (its process killed), another looks for its pair.
      expect(await store.claimDue({ now: NOW, limit: 1, owner: 'other', leaseMs: 60_000 })).toEqual([]);
      await store.release('elig_flying', 'writing');
      expect(await store.claimDue({ now: NOW, limit: 1, chart: 1, service: 0, owner: 'other', leaseMs: 60_000 })).toMatchObject([{ key: 'elig_flying', ...withdrawing }]);
    });

    it('knows which booked appointments hold a check of a FHIR Coverage, each once', async () => {
      const source = check?.source;
      if (source?.kind !== 'fhir') throw new Error('fixture gave no FHIR check');
      const of = (key: string, coverage: string) => checkRow(key, { check: { ...checkRow(key).check, source: { ...source, coverage } } });
      await store.transaction(async (tx) => {
        await tx.putCheck(of('elig_a1', 'Coverage/cov-a'));
        await tx.putCheck(of('elig_a2', 'Coverage/cov-a'));
        await tx.putCheck(of('elig_b', 'Coverage/cov-b'));
        await tx.putAppointment(appointment('apt-1', { checkKeys: ['elig_a1', 'elig_a2'] }));
        await tx.putAppointment(appointment('apt-2', { checkKeys: ['elig_b'] }));
        await tx.putAppointment(appointment('apt-3', { status: 'cancelled', checkKeys: ['elig_a1'] }));
        await tx.putAppointment(appointment('apt-4', { dateOfService: '2026-12-02', checkKeys: ['elig_a2', 'elig_b'] }));
      });
      const verifying = (coverage: string) => store.transaction(async (tx) => (await tx.appointmentsVerifying(coverage)).map((a) => a.key).sort());
      expect(await verifying('Coverage/cov-a')).toEqual(['apt-1', 'apt-4']);
      expect(await verifying('Coverage/cov-b')).toEqual(['apt-2', 'apt-4']);
      expect(await verifying('Coverage/cov-c')).toEqual([]);
    });

    it('finds the checks of a patient under the member ids and in the states asked for, and no other patient\'s', async () => {
      if (!check) throw new Error('fixture gave no check');
      const under = (memberId: string) => ({ ...check, subscriber: { ...check.subscriber, memberId } });
      await store.transaction(async (tx) => {
        await tx.putCheck(checkRow('elig_1', { state: 'written' }));
        await tx.putCheck(checkRow('elig_2', { state: 'cancelled' }));
        await tx.putCheck(checkRow('elig_4', { state: 'received' }));
        await tx.putCheck(checkRow('elig_3', { patientKey: 'fhir|Patient/pat-other' }));
        await tx.putCheck(checkRow('elig_5', { state: 'written', check: under('OTHER-PLAN') }));
      });
      const member = check?.subscriber.memberId ?? '';
      const of = (patientKey: string, states: CheckState[] = ['written', 'cancelled', 'received'], memberIds = [member]) =>
        store.transaction(async (tx) => (await tx.checksOfPatient(patientKey, memberIds, states)).map((r) => [r.key, r.state]).sort());
      expect(await of('fhir|Patient/pat-ellen')).toEqual([['elig_1', 'written'], ['elig_2', 'cancelled'], ['elig_4', 'received']]);
      expect(await of('fhir|Patient/pat-ellen', ['written', 'needs-attention'])).toEqual([['elig_1', 'written']]);
      expect(await of('fhir|Patient/pat-ellen', ['written'], ['OTHER-PLAN', 'NONE'])).toEqual([['elig_5', 'written']]);
      expect(await of('fhir|Patient/pat-ellen', ['written'], [])).toEqual([]);
      expect(await of('fhir|Patient/pat-other')).toEqual([['elig_3', 'received']]);
      expect(await of('fhir|Patient/pat-none')).toEqual([]);
    });

    it('reads of a patient\'s check what it says of its plan and its write, without its verification body', async () => {
      if (!check) throw new Error('fixture gave no check');
      const dated = { ...check, coverage: { ...check.coverage, payer: { id: '62308', name: 'Cigna Dental' }, period: { end: '2026-11-30' } } };
      const answered = '2026-11-23T10:05:00.000Z';
      await store.transaction(async (tx) => {
        await tx.putCheck(checkRow('elig_w', { state: 'cancelled', check: dated, written: { requestId: 'req', responseId: 'res' }, planDroppedAt: NOW, result: { status: 'Completed', big: 'x'.repeat(4000) }, resultAt: answered }));
        await tx.putCheck(checkRow('elig_u', { state: 'written', check: { ...check, coverage: { ...check.coverage, period: {} } }, dueAt: undefined }));
      });
      const read = await store.transaction((tx) => tx.checksOfPatient('fhir|Patient/pat-ellen', [check?.subscriber.memberId ?? ''], ['written', 'cancelled']));
      const plan = (payer: { id?: string; name?: string }, period?: { start?: string; end?: string }) => ({
        dateOfService: check?.dateOfService,
        source: { kind: 'fhir' },
        patient: { identifiers: [{ system: check?.patient.identifiers[0]?.system }] },
        coverage: { payer, period },
        subscriber: { memberId: check?.subscriber.memberId },
      });
      expect(read.sort((a, b) => a.key.localeCompare(b.key))).toEqual([
        { key: 'elig_u', state: 'written', written: undefined, planDroppedAt: undefined, dueAt: undefined, resultAt: undefined, check: plan(check.coverage.payer) },
        { key: 'elig_w', state: 'cancelled', written: true, planDroppedAt: NOW, dueAt: NOW, resultAt: answered, check: plan({ id: '62308', name: 'Cigna Dental' }, { start: undefined, end: '2026-11-30' }) },
      ]);
    });

    it("marks the drop of a plan on its cancelled checks whose verification another visit would take, and ends their follow", async () => {
      if (!check) throw new Error('fixture gave no check');
      const patientKey = 'hl7|BSD|MR|9';
      const dropAt = '2026-11-23T11:00:00.000Z';
      const hl7 = (key: string, change: Partial<CheckRow>) =>
        checkRow(key, {
          patientKey,
          state: 'cancelled',
          submittedAt: NOW,
          ...change,
          check: { ...check, idempotencyKey: key, source: { kind: 'hl7', messageControlId: key, messageType: 'SIU^S13', receivedAt: NOW }, patient: { ...check.patient, identifiers: [{ system: 'BSD', value: '9' }] } },
        });
      const result = { status: 'Completed', correlationId: 'corr-held' };
      await store.transaction(async (tx) => {
        // Its visit moved while its verification was at the service: followed for the result, or holding it.
        await tx.putCheck(hl7('c_followed', { correlationId: 'corr-followed' }));
        await tx.putCheck(hl7('c_held', { correlationId: 'corr-held', result, resultAt: NOW, dueAt: undefined }));
        // Cancelled before it was sent: nothing at the service for another visit to take.
        await tx.putCheck(hl7('c_unsent', { submittedAt: undefined, dueAt: undefined }));
      });
      const { memberId: _m, ...person } = check.patient;
      const record: PatientInsuranceRecord = { patient: person, coverages: [], appointments: [], updatedAt: dropAt, messageControlId: 'drop' };
      expect(await store.transaction((tx) => endDroppedPlans(tx, patientKey, record, [check?.subscriber.memberId ?? ''], dropAt))).toEqual([]);
      // One after the other: a transaction's queries share one connection.
      const rows = await store.transaction(async (tx) => [await tx.getCheck('c_followed'), await tx.getCheck('c_held'), await tx.getCheck('c_unsent')]);
      expect(rows.map((r) => [r?.key, r?.state, r?.planDroppedAt, r?.dueAt, r?.resultAt])).toEqual([
        ['c_followed', 'cancelled', dropAt, undefined, undefined],
        ['c_held', 'cancelled', dropAt, undefined, NOW],
        ['c_unsent', 'cancelled', undefined, undefined, undefined],
      ]);
    });

    it('moves an appointment to the patient another was merged into, and keeps the merged one as a tombstone naming it', async () => {
      await store.transaction(async (tx) => {
        await tx.putAppointment(appointment('apt-1', { checkKeys: ['elig_x'] }));
        await rememberAppointment(tx, 'hl7|BSD|MR|1', 'apt-1');
      });
      const survivor = { facility: 'BSD', identifier: { system: 'MR', value: '2' } };
      await store.transaction(async (tx) => {
        const prior = await tx.getPatient('hl7|BSD|MR|1');
        if (!prior) throw new Error('no record');
        await tx.putPatient('hl7|BSD|MR|2', prior);
        await tx.putPatient('hl7|BSD|MR|1', { ...prior, appointments: [], mergedInto: survivor });
        await tx.putAppointment(appointment('apt-1', { patientKey: 'hl7|BSD|MR|2', checkKeys: ['elig_y'] }));
      });
      const seen = await store.transaction(async (tx) => ({
        prior: (await tx.appointmentsOfPatient('hl7|BSD|MR|1')).map((a) => a.key),
        survivor: (await tx.appointmentsOfPatient('hl7|BSD|MR|2')).map((a) => a.key),
        holdingX: (await tx.appointmentsHolding('elig_x')).map((a) => a.key),
        tombstone: (await tx.getPatient('hl7|BSD|MR|1'))?.mergedInto,
        remembered: (await tx.getPatient('hl7|BSD|MR|2'))?.appointments.map((a) => a.appointmentId),
      }));
      expect(seen).toEqual({ prior: [], survivor: ['apt-1'], holdingX: [], tombstone: survivor, remembered: ['apt-1'] });
    });

    describe('prunes the work finished before the retention period', () => {
      /** NOW less 90 days, and a day well before it. */
      const CUTOFF = '2026-08-25T10:00:00.000Z';
      const OLD = '2026-05-01T09:00:00.000Z';
      const OLD_DAY = '2026-05-01';
      const written = { requestId: 'CoverageEligibilityRequest/1', responseId: 'CoverageEligibilityResponse/1' };
      const body = { status: 'Completed', correlationId: 'corr', result: { benefits: 'x'.repeat(4000) } };
      /** A check finished long ago, for a visit long over, nothing scheduled. */
      const old = (key: string, change: Partial<CheckRow> = {}): CheckRow => {
        const row = checkRow(key, { state: 'written', dueAt: undefined, createdAt: OLD, updatedAt: OLD, written, result: body, resultAt: OLD, ...change });
        return { ...row, check: { ...row.check, dateOfService: change.check?.dateOfService ?? OLD_DAY } };
      };
      const keysOf = async () => (await store.listChecks()).map((r) => r.key).sort();

      it('deletes what finished or was left to a person before the cutoff, and keeps what a person or the pipeline still needs', async () => {
        if (!check) throw new Error('fixture gave no check');
        const patient: PatientInsuranceRecord = { patient: check.patient, coverages: [], appointments: [], updatedAt: OLD, messageControlId: 'old' };
        await store.transaction(async (tx) => {
          for (const [dedupeKey, receivedAt, status] of [['old-handled', OLD, 'handled'], ['new-handled', NOW, 'handled'], ['old-dead', OLD, 'dead'], ['old-received', OLD, 'received']] as const) {
            await tx.addMessage({ kind: 'hl7', dedupeKey, receivedAt, raw: `MSH|${dedupeKey}`, status });
          }
          await tx.putPatient('hl7|BSD|MR|1', patient);
          await tx.putCheck(old('c_cancelled', { state: 'cancelled', written: undefined }));
          await tx.putCheck(old('c_written'));
          await tx.putCheck(old('c_linked', { state: 'cancelled' }));
          // Left to a person, for a visit long over: nothing is left to verify.
          await tx.putCheck(old('c_attention', { state: 'needs-attention' }));
          await tx.putCheck(old('c_dead', { state: 'dead', written: undefined, result: undefined, resultAt: undefined }));
          // Kept: scheduled, a person's to act on for a visit to come, or changed since, still to be worked, changed since, held by a visit to come, its own visit to come.
          await tx.putCheck(old('c_scheduled', { dueAt: '2026-11-30T00:00:00.000Z' }));
          await tx.putCheck(old('c_attention_to_come', { state: 'needs-attention', check: { ...check, dateOfService: '2026-12-01' } }));
          await tx.putCheck(old('c_dead_held', { state: 'dead' }));
          await tx.putCheck(old('c_attention_recent', { state: 'needs-attention', updatedAt: NOW }));
          // Dead ending its plan's Coverage: the chart holds it active still, a person's to end (jobs retry) however old the visit.
          await tx.putCheck(old('c_dead_ending', { state: 'dead', planDroppedAt: OLD }));
          // Unless a person has dismissed it: they have dealt with the Coverage.
          await tx.putCheck(old('c_dead_ending_dismissed', { state: 'dead', planDroppedAt: OLD, dismissedAt: OLD }));
          await tx.putCheck(old('c_received', { state: 'received', dueAt: OLD, written: undefined, result: undefined, resultAt: undefined }));
          await tx.putCheck(old('c_recent', { updatedAt: NOW }));
          await tx.putCheck(old('c_held'));
          await tx.putCheck(old('c_to_come', { state: 'cancelled', check: { ...check, dateOfService: '2026-12-01' } }));
          await tx.putAppointment(appointment('apt-old', { dateOfService: OLD_DAY, checkKeys: ['c_linked'] }));
          await tx.putAppointment(appointment('apt-old-empty', { dateOfService: OLD_DAY, status: 'cancelled' }));
          await tx.putAppointment(appointment('apt-old-attention', { dateOfService: OLD_DAY, checkKeys: ['c_attention'] }));
          await tx.putAppointment(appointment('apt-to-come', { dateOfService: '2026-12-01', checkKeys: ['c_held', 'c_dead_held'] }));
          // A cancellation that overtook its booking names no visit: kept the retention period from when it came, for the booking to come.
          await tx.putAppointment(appointment('apt-overtaken', { dateOfService: '', status: 'cancelled', basis: { sentAt: '20261123100000' } }));
          await tx.putAppointment(appointment('apt-overtaken-old', { dateOfService: '', status: 'cancelled', basis: { sentAt: '20260501100000' }, updatedAt: OLD }));
        });

        // Of those kept, the one dead ending its Coverage is past the cutoff: its result loses its benefits (bodies), which ending needs not.
        expect(await pruneFinished(store, CUTOFF)).toEqual({ messages: 1, checks: 6, appointments: 4, bodies: 1 });
        expect(await keysOf()).toEqual(['c_attention_recent', 'c_attention_to_come', 'c_dead_ending', 'c_dead_held', 'c_held', 'c_received', 'c_recent', 'c_scheduled', 'c_to_come']);
        expect((await store.listAppointments()).map((a) => a.key).sort()).toEqual(['apt-overtaken', 'apt-to-come']);
        expect((await store.listMessages()).map((m) => m.dedupeKey).sort()).toEqual(['new-handled', 'old-dead', 'old-received']);
        await store.transaction(async (tx) => {
          expect(await tx.getCheck('c_written')).toBeUndefined();
          expect(await tx.getPatient('hl7|BSD|MR|1')).toEqual(patient);
          expect((await tx.appointmentsHolding('c_held')).map((a) => a.key)).toEqual(['apt-to-come']);
          expect(await tx.getCheck('c_attention')).toBeUndefined();
          expect(await tx.appointmentsHolding('c_attention')).toEqual([]);
          expect(await tx.appointmentsHolding('c_linked')).toEqual([]);
        });
        // A second prune finds nothing.
        expect(await pruneFinished(store, CUTOFF)).toEqual({ messages: 0, checks: 0, appointments: 0, bodies: 0 });
      });

      it('keeps the check through which a plan the PMS drops later ends its Coverage, however old', async () => {
        if (!check) throw new Error('fixture gave no check');
        const patientKey = 'hl7|BSD|MR|1';
        const hl7 = (key: string, dateOfService: string, memberId: string, change: Partial<CheckRow> = {}) =>
          old(key, {
            patientKey,
            ...change,
            check: {
              ...check,
              idempotencyKey: key,
              dateOfService,
              source: { kind: 'hl7', messageControlId: key, messageType: 'SIU^S12', receivedAt: OLD },
              patient: { ...check.patient, identifiers: [{ system: 'BSD', value: '1' }] },
              subscriber: { ...check.subscriber, memberId },
              coverage: { ...check.coverage, payer: { id: '62308' }, ...change.check?.coverage },
            },
          });
        await store.transaction(async (tx) => {
          await tx.putCheck(hl7('p_first', '2025-01-10', 'M1'));
          await tx.putCheck(hl7('p_latest', '2025-06-10', 'M1'));
          // The latest of its plan, written as a failure and withdrawn: its pair made the Coverage all the same.
          await tx.putCheck(hl7('q_only', '2025-02-01', 'M2', { state: 'cancelled' }));
          // Its plan's drop seen already: no Coverage is ended through it again.
          await tx.putCheck(hl7('r_seen', '2025-03-01', 'M3', { planDroppedAt: OLD }));
          // Marked as its plan dated, not dropped: the drop is still to be seen.
          await tx.putCheck(hl7('s_dated', '2025-03-01', 'M4', { state: 'cancelled', planDroppedAt: OLD, check: { ...check, coverage: { ...check.coverage, payer: { id: '62308' }, period: { end: '2025-01-31' } } } }));
          // Two of one day: whichever endDroppedPlans would take.
          await tx.putCheck(hl7('t_one', '2025-04-01', 'M5'));
          await tx.putCheck(hl7('t_two', '2025-04-01', 'M5'));
          // Another payer's plan under the same member id is a plan of its own.
          await tx.putCheck(hl7('u_other_payer', '2025-01-01', 'M1', { check: { ...check, coverage: { ...check.coverage, payer: { id: '99999' } } } }));
          // A failure's body is its problem, small, and what jobs list names its kind by.
          await tx.putCheck(hl7('v_failed', '2025-01-01', 'M6', { result: { status: 'Failed', correlationId: 'corr-v', result: { type: 'PatientNotFound', detail: 'no such member' } } }));
          // Left to a person after its failure was written, the latest of its plan: kept, the older written one of the plan not.
          await tx.putCheck(hl7('x_older', '2025-01-01', 'M8'));
          await tx.putCheck(hl7('x_attention', '2025-05-01', 'M8', { state: 'needs-attention' }));
          // A status the client reads as Completed under another name is one all the same.
          await tx.putCheck(hl7('w_success', '2025-01-01', 'M7', { result: { status: 'Partially_Completed', correlationId: 'corr-w', result: { benefits: 'x'.repeat(4000) } } }));
        });
        // The checks kept lose their results' benefits (each plan's would be 10 to 30 KB for good), not their status and ids.
        expect(await pruneFinished(store, CUTOFF)).toEqual({ messages: 0, checks: 3, appointments: 0, bodies: 8 });
        expect(await keysOf()).toEqual(['p_latest', 'q_only', 's_dated', 't_one', 't_two', 'u_other_payer', 'v_failed', 'w_success', 'x_attention']);
        const kept = await store.transaction(async (tx) => {
          const results: unknown[] = [];
          for (const key of ['p_latest', 'v_failed', 'w_success']) results.push((await tx.getCheck(key))?.result);
          return results;
        });
        expect(kept).toEqual([
          { status: 'Completed', correlationId: 'corr' },
          { status: 'Failed', correlationId: 'corr-v', result: { type: 'PatientNotFound', detail: 'no such member' } },
          { status: 'Partially_Completed', correlationId: 'corr-w' },
        ]);
        expect((await pruneFinished(store, CUTOFF)).bodies).toBe(0);

        // The PMS drops plan M1: its Coverage is ended through the check kept.
        const { memberId: _m, ...person } = check.patient;
        const record: PatientInsuranceRecord = { patient: person, coverages: [], appointments: [], updatedAt: NOW, messageControlId: 'drop' };
        expect(await store.transaction((tx) => endDroppedPlans(tx, patientKey, record, ['M1'], NOW))).toEqual(['p_latest', 'u_other_payer']);
        expect((await store.listChecks({ states: ['ending-coverage'] })).map((r) => r.key).sort()).toEqual(['p_latest', 'u_other_payer']);
      });

      it('deletes in batches of at most the limit, going on past the rows it keeps', async () => {
        await store.transaction(async (tx) => {
          for (let i = 0; i < 7; i++) await tx.addMessage({ kind: 'hl7', dedupeKey: `m${i}`, receivedAt: OLD, raw: 'MSH|...', status: 'handled' });
          // The oldest changed are kept (a visit to come holds them): a batch looks past them.
          for (let i = 0; i < 5; i++) await tx.putCheck(old(`k_held${i}`, { updatedAt: `2026-04-0${i + 1}T00:00:00.000Z` }));
          await tx.putAppointment(appointment('apt-to-come', { dateOfService: '2026-12-01', checkKeys: [0, 1, 2, 3, 4].map((i) => `k_held${i}`) }));
          for (let i = 0; i < 5; i++) await tx.putCheck(old(`k_gone${i}`, { state: 'cancelled' }));
        });
        const batches: number[] = [];
        const counted: JobStore = Object.create(store) as JobStore;
        counted.prune = async (options) => {
          const done = await store.prune(options);
          batches.push(done.pruned);
          return done;
        };
        expect(await pruneFinished(counted, CUTOFF, { limit: 2 })).toEqual({ messages: 7, checks: 5, appointments: 0, bodies: 0 });
        expect(Math.max(...batches)).toBe(2);
        expect(batches.length).toBeGreaterThanOrEqual(4 + 5 + 1);
        expect((await keysOf()).filter((key) => key.startsWith('k_gone'))).toEqual([]);
      });

      it('handles a message sent again after its first was pruned as a new one', async () => {
        const message = { kind: 'hl7' as const, dedupeKey: 'BSD|MSG-9', receivedAt: OLD, raw: 'MSH|...', status: 'handled' as const };
        await store.transaction((tx) => tx.addMessage(message));
        await pruneFinished(store, CUTOFF);
        const again = await store.transaction((tx) => tx.addMessage({ ...message, receivedAt: NOW, status: 'received' }));
        expect(again.duplicate).toBe(false);
      });
    });

    it('refuses a second check with the same correlation id', async () => {
      await store.transaction((tx) => tx.putCheck(checkRow('elig_1', { correlationId: 'corr-1' })));
      // Matched by message: better-sqlite3's native part keeps the error class of the first test file that loaded it.
      await expect(store.transaction((tx) => tx.putCheck(checkRow('elig_2', { correlationId: 'corr-1' })))).rejects.toMatchObject({ message: expect.stringMatching(/unique/i) });
      expect((await store.transaction((tx) => tx.checkByCorrelationId('corr-1')))?.key).toBe('elig_1');
      expect(await store.transaction((tx) => tx.checkByCorrelationId('corr-2'))).toBeUndefined();
    });

    it('finds a check by the externalId of its send under way, and no other', async () => {
      await store.transaction(async (tx) => {
        await tx.putCheck(checkRow('elig_1', { state: 'submitted', externalId: 'elig_ext_1' }));
        await tx.putCheck(checkRow('elig_2', { state: 'awaiting-result', externalId: 'elig_ext_2', correlationId: 'corr-2' }));
      });
      expect((await store.transaction((tx) => tx.sentUnder('elig_ext_1')))?.key).toBe('elig_1');
      // Answered already: found by its correlation id, not this way.
      expect(await store.transaction((tx) => tx.sentUnder('elig_ext_2'))).toBeUndefined();
      expect(await store.transaction((tx) => tx.sentUnder('elig_ext_3'))).toBeUndefined();
    });

    it('keeps meta values, the last one set', async () => {
      await store.transaction((tx) => tx.setMeta('poll-cursor', 'a'));
      await store.transaction((tx) => tx.setMeta('poll-cursor', 'b'));
      expect(await store.transaction((tx) => tx.getMeta('poll-cursor'))).toBe('b');
      expect(await store.transaction((tx) => tx.getMeta('other'))).toBeUndefined();
    });

    it('loses no update when transactions on one patient run concurrently', async () => {
      const ids = Array.from({ length: 20 }, (_, i) => `APT-${i}`);
      await Promise.all(ids.map((id) => store.transaction((tx) => rememberAppointment(tx, 'hl7|BSD|MR|1', id))));
      const record = await store.transaction((tx) => tx.getPatient('hl7|BSD|MR|1'));
      expect(record?.appointments.map((a) => a.appointmentId).sort()).toEqual([...ids].sort());
    });

    it('stores a message delivered twice at once as one row', async () => {
      const results = await Promise.all(
        Array.from({ length: 10 }, () => store.transaction((tx) => tx.addMessage({ kind: 'webhook', dedupeKey: 'msg_twice', receivedAt: NOW, raw: '{}', status: 'received' }))),
      );
      expect(results.filter((r) => !r.duplicate)).toHaveLength(1);
      expect(new Set(results.map((r) => r.message.id)).size).toBe(1);
      expect(await store.listMessages()).toHaveLength(1);
    });

    it('hands out rate tokens from a shared bucket: a burst, then one every 1/perSecond seconds', async () => {
      if (!store.takeRateToken) throw new Error('the store has no rate buckets');
      const waits: number[] = [];
      for (let i = 0; i < 4; i++) waits.push(await store.takeRateToken('portal:A', 2, NOW));
      expect(waits).toEqual([0, 0, 500, 1000]);
      // 1.5 s later the bucket has refilled three tokens, two of them already promised.
      expect(await store.takeRateToken('portal:A', 2, '2026-11-23T10:00:01.500Z')).toBe(0);
      expect(await store.takeRateToken('portal:A', 2, '2026-11-23T10:00:01.500Z')).toBe(500);
      expect(await store.takeRateToken('portal:B', 2, NOW)).toBe(0);
      await expect(store.takeRateToken('portal:A', 2, 'yesterday')).rejects.toThrow('now is not an ISO 8601 instant');
    });

    it('goes on refilling a rate bucket after the clock that dated it is stepped back an hour', async () => {
      if (!store.takeRateToken) throw new Error('the store has no rate buckets');
      // Taken while the clock ran an hour ahead, then NTP stepped it back.
      expect(await store.takeRateToken('portal:A', 2, '2026-11-23T11:00:00.000Z')).toBe(0);
      const waits: number[] = [];
      // One every half second, the bucket's rate: none waits, as at any other time (the bucket stuck an hour ahead, each waited half a second longer than the last).
      for (let i = 0, at = Date.parse(NOW); i < 6; i++, at += 500) waits.push(await store.takeRateToken('portal:A', 2, new Date(at).toISOString()));
      expect(waits).toEqual([0, 0, 0, 0, 0, 0]);
    });

    it('survives being reopened: what was committed is there', async () => {
      await store.transaction((tx) => tx.putCheck(checkRow('elig_kept', { state: 'awaiting-result', correlationId: 'corr-9' })));
      await store.close();
      store = await place.open();
      expect((await store.listChecks()).map((c) => [c.key, c.state, c.correlationId])).toEqual([['elig_kept', 'awaiting-result', 'corr-9']]);
    });
  });
}
