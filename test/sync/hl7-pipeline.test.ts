import type { Coverage, CoverageEligibilityResponse, Patient } from 'fhir/r4';
import { loadClinicRouting, type ClinicRouting } from '../../src/adapters/clinic-routing';
import { loadHl7Mappings } from '../../src/adapters/hl7';
import { frame } from '../../src/service/mllp-framing';
import { schedulePolicy, SyncSettings } from '../../src/service/eligibility-sync';
import { WEBHOOK_PATH } from '../../src/verification/webhook';
import { createLogger } from '../../src/service/logger';
import { MllpListener } from '../../src/service/mllp-listener';
import { dismissCheck, replayMessage, retryCheck } from '../../src/sync/operations';
import { pruneFinished } from '../../src/sync/prune';
import { dismissed, type CheckState } from '../../src/sync/job-store';
import { segment } from '../adapters/hl7/segment';
import { client } from '../service/mllp-client';
import { switchableProxy } from '../support/switchable-proxy';
import { searchFhir, startHarness, startSyncInstance, until, type Harness } from './harness';

/**
 * HL7 v2 over a real MLLP socket into the sync, through the sandbox service, into the chart on a
 * real FHIR server: the seams issue 7 names, each reproduced as a user meets it.
 */
/** A visit `days` from today at 09:30 (an HL7 timestamp): an ADT updates future bookings only, so the dates move with the day the test runs. */
const visitIn = (days: number) => `${new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10).replace(/-/g, '')}093000`;
const VISIT = visitIn(17);

function msh(type: string, id: string): string {
  return `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20261123090000||${type}|${id}|P|2.5.1`;
}
const pid = (patient: string, name = 'DOE^JANE', birth = '19800102') => `PID|1||${patient}^^^SC^MR||${name}||${birth}|F`;
const sch = (appointment: string, start = VISIT) => `SCH|${appointment}^SC||||||||||^^^${start}`;
const in1 = (payerId: string, payerName: string, memberId: string) => segment('IN1', { 1: '1', 3: payerId, 4: payerName, 17: 'SEL', 36: memberId });
/** The patient's plans, each as payer id, name and member id, in IN1 order. */
const insurance = (...plans: Array<[string, string, string]>) => plans.map(([id, name, member], i) => segment('IN1', { 1: String(i + 1), 3: id, 4: name, 17: 'SEL', 36: member }));

const siu = (id: string, patient: string, appointment: string, ...rest: string[]) => [msh('SIU^S12^SIU_S12', id), sch(appointment), pid(patient), ...rest].join('\r');
const adt = (id: string, patient: string, ...rest: string[]) => [msh('ADT^A08^ADT_A01', id), pid(patient), ...rest].join('\r');

describe('HL7 v2 into the chart', () => {
  let h: Harness;
  let listener: MllpListener;
  let port: number;

  const start = async (options: Parameters<typeof startHarness>[0] = {}) => {
    h = await startHarness(options);
    listener = new MllpListener({ handler: (m) => h.sync.receiveHl7(m), onDeadLetter: (l) => h.sync.deadLetterHl7(l) });
    ({ port } = await listener.start());
  };
  afterEach(async () => {
    await listener.stop();
    await h.close();
  });

  const send = async (...messages: string[]) => {
    const c = await client(port);
    for (const m of messages) c.socket.write(frame(m));
    const acks = await c.waitFor(messages.length, 10_000);
    c.socket.end();
    return acks.map((a) => /MSA\|(\w\w)/.exec(a)?.[1]);
  };
  const responses = async () => (await searchFhir(h.fhir, 'CoverageEligibilityResponse')) as CoverageEligibilityResponse[];
  const verificationsSent = () => h.sandbox.requestLog.filter((r) => r.method === 'POST' && r.path.includes('insurance-verification')).length;
  /** The chart's Coverages by their payer's name (or `key`), each as `pick` reads it. */
  const coveragesBy = async <T>(pick: (c: Coverage) => T, key = (c: Coverage) => c.payor[0]?.display) =>
    Object.fromEntries(((await searchFhir(h.fhir, 'Coverage')) as Coverage[]).map((c) => [key(c), pick(c)]));

  it('verifies a synchronous and an asynchronous payer and writes each response once, linked to patient and coverage', async () => {
    await start();
    expect(await send(siu('M1', 'P-1', 'APT-1', in1('64246', 'Guardian', 'SBX-COMPLETE')), siu('M2', 'P-2', 'APT-2', in1('62308', 'Cigna Dental', 'SBX-COMPLETE')))).toEqual(['AA', 'AA']);
    await until('two written checks', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    const checks = await h.store.listChecks();
    expect(checks.map((c) => c.mode).sort()).toEqual(['async', 'sync']);
    const written = await responses();
    expect(written).toHaveLength(2);
    expect(written.every((r) => r.outcome === 'complete' && r.patient.reference?.startsWith('Patient/') && r.insurance?.[0]?.coverage.reference?.startsWith('Coverage/'))).toBe(true);
    // The patient and coverage were found or created by identifier, once each.
    expect(await searchFhir(h.fhir, 'Patient')).toHaveLength(2);
    expect(await searchFhir(h.fhir, 'Coverage')).toHaveLength(2);

    // The same message resent: the same ACK, no new verification.
    expect(await send(siu('M1', 'P-1', 'APT-1', in1('64246', 'Guardian', 'SBX-COMPLETE')))).toEqual(['AA']);
    await new Promise((r) => setTimeout(r, 300));
    expect(await responses()).toHaveLength(2);
    expect(verificationsSent()).toBe(2);
  });

  it('keeps a booking with no insurance known waiting, and verifies it once the ADT brings the insurance', async () => {
    await start();
    expect(await send(siu('W1', 'P-9', 'APT-9'))).toEqual(['AA']);
    const waiting = await h.store.listAppointments('awaiting-insurance');
    expect(waiting).toHaveLength(1);
    expect(await h.store.listChecks()).toEqual([]);

    expect(await send(adt('W2', 'P-9', in1('64246', 'Guardian', 'SBX-COMPLETE')))).toEqual(['AA']);
    await until('the waiting booking written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
    expect(await h.store.listAppointments('awaiting-insurance')).toEqual([]);
    expect(await responses()).toHaveLength(1);
  });

  describe('a booking refused for what it says of the patient (AE)', () => {
    const guardian = in1('64246', 'Guardian', 'SBX-COMPLETE');
    const noMemberId = segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL' });
    const letters = async () => (await h.store.listMessages()).filter((m) => m.kind === 'hl7' && m.status === 'dead');
    const letterOf = async (controlId: string) => (await h.store.listMessages()).find((m) => m.kind === 'hl7' && m.raw.includes(`|${controlId}|`));
    const checksOf = async (appointment: string) => (await h.store.listChecks()).filter((c) => c.check.source.kind === 'hl7' && c.check.source.appointmentId === appointment);
    /** The visit verified with the member id the correction gave, `written` checks written in all, no letter left dead. */
    const verifiedAsCorrected = async (appointment: string, written = 1) => {
      await until(`${appointment} written`, async () => (await h.store.listChecks({ states: ['written'] })).length === written);
      expect((await checksOf(appointment)).map((c) => c.check.subscriber.memberId)).toEqual(['SBX-COMPLETE']);
      expect(await letters()).toEqual([]);
    };

    it('is held, and verified once an ADT corrects the patient: the PMS sends the correction, not the booking again; its letter handled', async () => {
      await start();
      expect(await send(siu('R1', 'P-R1', 'APT-R1', noMemberId))).toEqual(['AE']);
      expect(await letterOf('R1')).toMatchObject({ status: 'dead', detail: expect.stringMatching(/^rejected: IN1-36: member id missing; its visit is held: booked from the patient's record once an ADT corrects it/) });
      expect((await h.store.listAppointments('awaiting-correction')).map((a) => a.key)).toEqual(['hl7|BSD-MAIN|APT-R1']);
      expect(await h.store.listChecks()).toEqual([]);
      const held = async () => /^dental_elig_awaiting_correction (\d+)$/m.exec(await (await fetch(`${h.httpUrl}/metrics`)).text())?.[1];
      expect(await held()).toBe('1');

      expect(await send(adt('R2', 'P-R1', guardian))).toEqual(['AA']);
      await until('the held booking written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
      expect((await checksOf('APT-R1')).map((c) => c.check.subscriber.memberId)).toEqual(['SBX-COMPLETE']);
      expect(await letterOf('R1')).toMatchObject({ status: 'handled', detail: expect.stringMatching(/; handled: booked from the patient's record, corrected at \d{4}-/) });
      expect(await held()).toBe('0');
      expect(await letters()).toEqual([]);
      expect(await h.store.listAppointments('awaiting-correction')).toEqual([]);
      expect(await responses()).toHaveLength(1);
    });

    it('is held for a birth date after the visit, and verified with the date the ADT corrects', async () => {
      await start();
      const typo = [msh('SIU^S12^SIU_S12', 'R3'), sch('APT-R3'), pid('P-R3', 'DOE^JANE', '20800102'), guardian].join('\r');
      expect(await send(typo)).toEqual(['AE']);
      expect(await send([msh('ADT^A08^ADT_A01', 'R4'), pid('P-R3', 'DOE^JANE', '19800102'), guardian].join('\r'))).toEqual(['AA']);
      await until('the held booking written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
      expect((await checksOf('APT-R3')).map((c) => c.check.patient.birthDate)).toEqual(['1980-01-02']);
      expect(await letters()).toEqual([]);
    });

    it("is verified when an ADT restates the patient's record as it was, the booking's own IN1 having been the one wrong", async () => {
      await start();
      expect(await send([msh('SIU^S12^SIU_S12', 'R5'), sch('APT-R5', visitIn(10)), pid('P-R5'), guardian].join('\r'))).toEqual(['AA']);
      expect(await send([msh('SIU^S12^SIU_S12', 'R6'), sch('APT-R6', visitIn(20)), pid('P-R5'), noMemberId].join('\r'))).toEqual(['AE']);
      expect(await send(adt('R7', 'P-R5', guardian))).toEqual(['AA']);
      await verifiedAsCorrected('APT-R6', 2);
    });

    it('is not booked by an ADT sent before it (MSH-7) and delivered after it, though that ADT changes the record', async () => {
      await start();
      expect(await send(siu('R18', 'P-R18', 'APT-R18', noMemberId))).toEqual(['AE']);
      // Made the day before the booking on the ADT feed, delivered late: the patient's first record, with what the PMS said then.
      const earlier = adt('R19', 'P-R18', in1('64246', 'Guardian', 'SBX-EARLIER')).replace('20261123090000', '20261122090000');
      expect(await send(earlier)).toEqual(['AA']);
      expect(await h.store.listChecks()).toEqual([]);
      expect((await h.store.listAppointments('awaiting-correction')).map((a) => a.key)).toEqual(['hl7|BSD-MAIN|APT-R18']);
      expect(await letterOf('R18')).toMatchObject({ status: 'dead' });

      expect(await send(adt('R20', 'P-R18', guardian))).toEqual(['AA']);
      await verifiedAsCorrected('APT-R18');
    });

    it('is booked from the record, not refused, when the ADT that corrects it (by MSH-7) came first', async () => {
      await start();
      const sentAt = (time: string, m: string) => m.replace('|20261123090000|', `|20261123${time}|`);
      // The A08 made at 10:00 is delivered before the booking made at 09:00, whose IN1 has no member id: what it says would not be used.
      expect(await send(sentAt('100000', adt('R30', 'P-R30', guardian)))).toEqual(['AA']);
      expect(await send(sentAt('090000', siu('R31', 'P-R30', 'APT-R30', noMemberId)))).toEqual(['AA']);
      await verifiedAsCorrected('APT-R30');
    });

    it('kept as a dead letter by a version that held no booking, is booked when replayed after the ADT that corrected it', async () => {
      await start();
      const refused = siu('R32', 'P-R32', 'APT-R32', noMemberId);
      // What an earlier version left: the refused booking a dead letter, its visit not held, so the ADT after it books nothing.
      await h.sync.deadLetterHl7({ message: refused, reason: 'rejected: IN1-36: member id missing' });
      expect(await send(adt('R33', 'P-R32', guardian).replace('|20261123090000|', '|20261123100000|'))).toEqual(['AA']);
      expect(await h.store.listChecks()).toEqual([]);
      const [letter] = await letters();
      expect(await h.sync.replay(letter?.id ?? -1)).toEqual({ kind: 'hl7', ackCodes: ['AA'] });
      await verifiedAsCorrected('APT-R32');
    });

    it("keeps its letter while an ADT correcting the patient's details brings no insurance, the one the refused booking carried lost with it", async () => {
      await start();
      // A first booking, its birth date mistyped: the patient has no record yet.
      expect(await send([msh('SIU^S12^SIU_S12', 'R20'), sch('APT-R20'), pid('P-R20', 'DOE^JANE', '20800102'), guardian].join('\r'))).toEqual(['AE']);
      // The PMS corrects the birth date with an A08 of the patient alone (no IN1): no insurance is on file.
      expect(await send(adt('R21', 'P-R20'))).toEqual(['AA']);
      expect((await h.store.listAppointments('awaiting-insurance')).map((a) => a.key)).toEqual(['hl7|BSD-MAIN|APT-R20']);
      expect(await letterOf('R20')).toMatchObject({ status: 'dead' });
      expect(await send(adt('R22', 'P-R20', guardian))).toEqual(['AA']);
      await until('the visit written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
      expect(await letterOf('R20')).toMatchObject({ status: 'handled', detail: expect.stringContaining("; handled: booked from the patient's record, corrected at ") });
    });

    it('lets its letter go when the visit is cancelled, and a later ADT books nothing for it', async () => {
      await start();
      expect(await send(siu('R8', 'P-R8', 'APT-R8', noMemberId))).toEqual(['AE']);
      expect(await send([msh('SIU^S15^SIU_S12', 'R9'), sch('APT-R8'), pid('P-R8')].join('\r'))).toEqual(['AA']);
      expect(await letterOf('R8')).toMatchObject({ status: 'handled', detail: expect.stringContaining("; handled: the visit's next message came at ") });
      expect(await send(adt('R10', 'P-R8', guardian))).toEqual(['AA']);
      expect(await h.store.listChecks()).toEqual([]);
      expect((await h.store.listAppointments()).map((a) => a.status)).toEqual(['cancelled']);
    });

    it('booked again after its cancellation, and refused, is held by that booking and verified once an ADT corrects it', async () => {
      await start();
      expect(await send(siu('R40', 'P-R40', 'APT-R40', noMemberId))).toEqual(['AE']);
      expect(await send([msh('SIU^S15^SIU_S12', 'R41'), sch('APT-R40'), pid('P-R40')].join('\r'))).toEqual(['AA']);
      // The patient books the visit again an hour later, the PMS still without the member id: a cancelled visit has no checks to keep.
      expect(await send(siu('R42', 'P-R40', 'APT-R40', noMemberId).replace('|20261123090000|', '|20261123100000|'))).toEqual(['AE']);
      expect((await h.store.listAppointments('awaiting-correction')).map((a) => a.key)).toEqual(['hl7|BSD-MAIN|APT-R40']);
      expect(await send(adt('R43', 'P-R40', guardian).replace('|20261123090000|', '|20261123110000|'))).toEqual(['AA']);
      await verifiedAsCorrected('APT-R40');
    });

    it('refused again by a later message, is held by that one, whose letter alone stays dead', async () => {
      await start();
      expect(await send(siu('R11', 'P-R11', 'APT-R11', noMemberId))).toEqual(['AE']);
      expect(await send([msh('SIU^S14^SIU_S12', 'R12'), sch('APT-R11'), pid('P-R11', 'DOE^JANE', ''), guardian].join('\r'))).toEqual(['AE']);
      expect((await letters()).map((m) => /\|(R1[12])\|/.exec(m.raw)?.[1])).toEqual(['R12']);
      expect(await send(adt('R13', 'P-R11', guardian))).toEqual(['AA']);
      await until('the held booking written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
      expect(await letters()).toEqual([]);
    });

    it('is not held when the appointment itself is unreadable, nor when its visit was booked already, whose checks stay', async () => {
      await start();
      // No start (SCH-11.4): no visit to hold.
      expect(await send([msh('SIU^S12^SIU_S12', 'R14'), 'SCH|APT-R14^SC', pid('P-R14'), noMemberId].join('\r'))).toEqual(['AE']);
      // Booked, then a modification refused: the booking's check is kept.
      expect(await send(siu('R15', 'P-R15', 'APT-R15', guardian))).toEqual(['AA']);
      expect(await send([msh('SIU^S14^SIU_S12', 'R16'), sch('APT-R15'), pid('P-R15'), noMemberId].join('\r'))).toEqual(['AE']);
      expect(await send(adt('R17', 'P-R14', guardian))).toEqual(['AA']);
      await until('the booked visit written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
      expect((await h.store.listChecks()).map((c) => c.check.source.kind === 'hl7' && c.check.source.appointmentId)).toEqual(['APT-R15']);
      expect(await h.store.listAppointments('awaiting-correction')).toEqual([]);
      expect((await letters()).map((m) => m.detail)).toEqual([expect.not.stringContaining('held'), expect.not.stringContaining('held')]);
    });
  });

  it('sends a corrected name as a new verification, and the same event twice as one', async () => {
    await start();
    const booking = (id: string, name: string) => [msh('SIU^S12^SIU_S12', id), sch('APT-3'), pid('P-3', name), in1('64246', 'Guardian', 'SBX-COMPLETE')].join('\r');
    await send(booking('C1', 'DOE^JANE'));
    await until('first written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
    await send(booking('C1', 'DOE^JANE'), booking('C2', 'DOE^JANE'));
    await new Promise((r) => setTimeout(r, 300));
    const [first] = await h.store.listChecks();
    expect(first?.round).toBe(0);

    await send(booking('C3', 'DOE-SMITH^JANE'));
    await until('the correction written', async () => {
      const [row] = await h.store.listChecks();
      return row?.round === 1 && row.state === 'written';
    });
    expect(verificationsSent()).toBe(2);
    const [row] = await h.store.listChecks();
    expect(row?.externalId).not.toBe(first?.externalId);
  });

  it('verifies the patient\'s other appointments with what a later booking corrects, as after an ADT', async () => {
    await start();
    const booking = (id: string, appointment: string, start: string, name: string, member: string) =>
      [msh('SIU^S12^SIU_S12', id), sch(appointment, start), pid('P-4', name), in1('64246', 'Guardian', member)].join('\r');
    expect(await send(booking('B1', 'APT-4A', visitIn(10), 'DOE^JANE', 'SBX-COMPLETE'))).toEqual(['AA']);
    await until('the first visit written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);

    // A second visit, booked with the name corrected and a new member id: the first visit's check is verified again with them.
    expect(await send(booking('B2', 'APT-4B', visitIn(20), 'DOE-SMITH^JANE', 'SBX-COMPLETE-2'))).toEqual(['AA']);
    await until('both visits written with the corrected details', async () => {
      const rows = await h.store.listChecks({ states: ['written'] });
      const current = rows.filter((r) => r.check.patient.lastName === 'DOE-SMITH' && r.check.subscriber.memberId === 'SBX-COMPLETE-2');
      return current.length === 2 && new Set(current.map((r) => r.check.dateOfService)).size === 2;
    });
    // The first visit now holds the corrected check alone; the earlier one is withdrawn, its pair left in the chart as the result it was.
    const first = (await h.store.listAppointments('booked')).find((a) => a.key === 'hl7|BSD-MAIN|APT-4A');
    const earlier = async () => (await h.store.listChecks()).filter((r) => r.check.subscriber.memberId === 'SBX-COMPLETE').map((r) => [r.state, r.written !== undefined]);
    await until('the earlier check withdrawn', async () => JSON.stringify(await earlier()) === JSON.stringify([['cancelled', true]]));
    const rows = await h.store.listChecks();
    const held = (first?.checkKeys ?? []).map((k) => rows.find((r) => r.key === k));
    expect(held.map((r) => [r?.check.patient.lastName, r?.check.subscriber.memberId, r?.state])).toEqual([['DOE-SMITH', 'SBX-COMPLETE-2', 'written']]);

    // A booking that states nothing new leaves the other visits' checks as they are: nothing verified again.
    const settled = (r: (typeof rows)[number]) => [r.key, r.round, r.externalId, r.state, r.resultAt];
    const before = held.flatMap((r) => (r ? [settled(r)] : []));
    expect(await send(booking('B3', 'APT-4C', visitIn(30), 'DOE-SMITH^JANE', 'SBX-COMPLETE-2'))).toEqual(['AA']);
    await until('the third visit written', async () => (await h.store.listChecks({ states: ['written'] })).length >= 3);
    await new Promise((r) => setTimeout(r, 300));
    const after = (await h.store.listChecks()).filter((r) => before.some(([key]) => key === r.key)).map(settled);
    expect(after).toEqual(before);
  });

  it('leaves a check two visits that day share as it is when a later booking states nothing new of the patient', async () => {
    await start();
    const booking = (id: string, appointment: string, start: string, npi: string) =>
      [msh('SIU^S12^SIU_S12', id), sch(appointment, start), pid('P-5'), in1('64246', 'Guardian', 'SBX-COMPLETE'), `AIP|1||${npi}^CHEN^LAURA|D`].join('\r');
    // A hygiene visit and an exam the same day, with two providers: one check serves both.
    expect(await send(booking('D1', 'APT-5A', visitIn(12), '1234567893'), booking('D2', 'APT-5B', visitIn(12), '1245319599'))).toEqual(['AA', 'AA']);
    await until('the day\'s check written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
    const settled = async () => (await h.store.listChecks()).map((r) => [r.key, r.round, r.externalId, r.state]);
    const before = await settled();

    // A visit on another day, the patient as they were: the day's shared check is not verified again.
    expect(await send(booking('D3', 'APT-5C', visitIn(25), '1234567893'))).toEqual(['AA']);
    await until('the other day\'s check written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    await new Promise((r) => setTimeout(r, 300));
    const after = await settled();
    expect(after.filter(([key]) => before.some(([k]) => k === key))).toEqual(before);

    // Nor by an ADT that restates the patient and plan (an A08 sent for a new phone number, say).
    expect(await send(adt('D4', 'P-5', in1('64246', 'Guardian', 'SBX-COMPLETE')))).toEqual(['AA']);
    await new Promise((r) => setTimeout(r, 300));
    expect(await settled()).toEqual(after);
  });

  it('follows a change of coordination of benefits into the chart\'s Coverages without verifying again', async () => {
    await start();
    const guardian: [string, string, string] = ['64246', 'Guardian', 'SBX-COMPLETE'];
    const cigna: [string, string, string] = ['62308', 'Cigna Dental', 'SBX-COMPLETE'];
    const orders = () => coveragesBy((c) => c.order);
    expect(await send(siu('B1', 'P-8', 'APT-8', ...insurance(guardian, cigna)))).toEqual(['AA']);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    expect(await orders()).toEqual({ Guardian: 1, 'Cigna Dental': 2 });

    // The front desk swaps the plans on the booked appointment.
    expect(await send([msh('SIU^S14^SIU_S12', 'B2'), sch('APT-8'), pid('P-8'), ...insurance(cigna, guardian)].join('\r'))).toEqual(['AA']);
    await until('the Coverages reordered', async () => {
      const now = await orders();
      return now['Guardian'] === 2 && now['Cigna Dental'] === 1 && (await h.store.listChecks({ states: ['written'] })).length === 2;
    });
    expect(verificationsSent()).toBe(2);
    expect(await responses()).toHaveLength(2);
    expect((await h.store.listChecks()).map((c) => c.round)).toEqual([0, 0]);
  });

  it('follows a change of coordination of benefits on a visit long over into the Coverages, the benefits the chart holds for it kept', async () => {
    await start();
    const guardian: [string, string, string] = ['64246', 'Guardian', 'SBX-COMPLETE'];
    const cigna: [string, string, string] = ['62308', 'Cigna Dental', 'SBX-COMPLETE'];
    const orders = () => coveragesBy((c) => c.order);
    const benefits = async () => (await responses()).map((r) => r.insurance?.[0]?.item?.length ?? 0);
    // A visit tomorrow: its result still fresh then, nothing is verified again before it.
    const visit = (type: string, id: string, ...plans: string[]) => [msh(type, id), sch('APT-9', visitIn(1)), pid('P-9'), ...plans].join('\r');
    expect(await send(visit('SIU^S12^SIU_S12', 'H1', ...insurance(guardian, cigna)))).toEqual(['AA']);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    const written = await benefits();
    expect(written.every((items) => items > 0)).toBe(true);
    // The retention period over the visit: each plan's latest check is kept, its result's benefits cut.
    expect((await pruneFinished(h.store, new Date(Date.now() + 30 * 86_400_000).toISOString())).bodies).toBe(2);

    // The front desk swaps the plans on that visit (a billing correction): the Coverages follow, the responses keep their benefits.
    expect(await send(visit('SIU^S14^SIU_S12', 'H2', ...insurance(cigna, guardian)))).toEqual(['AA']);
    await until('the Coverages reordered', async () => {
      const now = await orders();
      return now['Guardian'] === 2 && now['Cigna Dental'] === 1 && (await h.store.listChecks({ states: ['written'] })).length === 2;
    });
    expect(await benefits()).toEqual(written);
    expect(verificationsSent()).toBe(2);
  });

  it("writes each plan's dates into its Coverage, this year's and next year's apart, and follows a corrected date without verifying again", async () => {
    await start();
    const [first, second] = [visitIn(17), visitIn(18)].map((t) => t.slice(0, 8));
    const iso = (day: string) => `${day.slice(0, 4)}-${day.slice(4, 6)}-${day.slice(6, 8)}`;
    // This year's plan ends on the first visit's day; next year's begins the day after, and the PMS sends both.
    const plans = (guardianFrom: string) => [
      segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 12: guardianFrom, 13: first as string, 17: 'SEL', 36: 'SBX-COMPLETE' }),
      segment('IN1', { 1: '2', 3: '62308', 4: 'Cigna Dental', 12: second as string, 17: 'SEL', 36: 'SBX-COMPLETE' }),
    ];
    const booking = (id: string, appointment: string, day: string) => [msh('SIU^S12^SIU_S12', id), sch(appointment, `${day}0930`), pid('P-20'), ...plans('20200101')].join('\r');
    expect(await send(booking('Y1', 'APT-20', first as string), booking('Y2', 'APT-21', second as string))).toEqual(['AA', 'AA']);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    const coverages = () => coveragesBy((c) => ({ status: c.status, order: c.order, period: c.period }));
    expect(await coverages()).toEqual({
      Guardian: { status: 'active', order: 1, period: { start: '2020-01-01', end: iso(first as string) } },
      'Cigna Dental': { status: 'active', order: 1, period: { start: iso(second as string) } },
    });

    // The registration corrects when this year's plan began: its Coverage follows, nothing is verified again.
    expect(await send(adt('Y3', 'P-20', ...plans('20210101')))).toEqual(['AA']);
    await until('the Coverage takes the corrected date', async () => (await coverages())['Guardian']?.period?.start === '2021-01-01');
    expect((await coverages())['Cigna Dental']).toEqual({ status: 'active', order: 1, period: { start: iso(second as string) } });
    expect(verificationsSent()).toBe(2);
    expect((await h.store.listChecks()).map((c) => c.round)).toEqual([0, 0]);
    expect(await responses()).toHaveLength(2);
  });

  it('writes plan dates given to the month into the Coverage as the whole month, the visit in it verified', async () => {
    await start();
    const month = VISIT.slice(0, 6);
    const [year, monthOf] = [month.slice(0, 4), month.slice(4, 6)];
    const lastDay = new Date(Date.UTC(Number(year), Number(monthOf), 0)).getUTCDate();
    const plan = segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 12: month, 13: month, 17: 'SEL', 36: 'SBX-COMPLETE' });
    expect(await send(siu('M1', 'P-22', 'APT-22', plan))).toEqual(['AA']);
    await until('written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
    expect(((await searchFhir(h.fhir, 'Coverage')) as Coverage[]).map((c) => c.period)).toEqual([{ start: `${year}-${monthOf}-01`, end: `${year}-${monthOf}-${lastDay}` }]);
  });

  it('keeps the plan\'s dates through a message that leaves IN1-12 and IN1-13 empty, and clears from the Coverage those it sends as "" (HL7\'s null)', async () => {
    await start();
    const periods = async () => ((await searchFhir(h.fhir, 'Coverage')) as Coverage[]).map((c) => c.period);
    const guardian = (from: string, to: string) => segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 12: from, 13: to, 17: 'SEL', 36: 'SBX-COMPLETE' });
    const carried = async () => (await h.store.listChecks()).map((r) => r.check.coverage.period);
    const year = VISIT.slice(0, 4);
    expect(await send(siu('N1', 'P-23', 'APT-23', guardian('20200101', `${year}1231`)))).toEqual(['AA']);
    await until('written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
    const dated = { start: '2020-01-01', end: `${year}-12-31` };
    expect(await periods()).toEqual([dated]);

    // An A08 that leaves the dates empty says nothing of them: the record, the check and the Coverage keep them.
    expect(await send(adt('N2', 'P-23', guardian('', '')))).toEqual(['AA']);
    expect(await carried()).toEqual([dated]);
    expect((await h.store.transaction((tx) => tx.getPatient('hl7|BSD-MAIN|SC|P-23')))?.coverages.map((c) => c.period)).toEqual([dated]);

    // The effective date deleted, the expiration left empty: the Coverage keeps the end alone.
    expect(await send(adt('N3', 'P-23', guardian('""', '')))).toEqual(['AA']);
    await until('the start cleared', async () => (await periods())[0]?.start === undefined);
    expect(await periods()).toEqual([{ end: `${year}-12-31` }]);

    // Both deleted: the Coverage has no period any more, and the check says why.
    expect(await send(adt('N4', 'P-23', guardian('', '""')))).toEqual(['AA']);
    await until('the period cleared', async () => (await periods())[0] === undefined);
    expect(await carried()).toEqual([{}]);
    // The chart answers the write before the worker records it: the check is written once the store has that.
    await until('written again', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
    expect(verificationsSent()).toBe(1);
    expect((await h.store.listChecks()).map((c) => [c.state, c.round])).toEqual([['written', 0]]);
  });

  it('follows a swap of plans into the Coverage of a failure waiting for a person, without telling the person again', async () => {
    await start();
    const guardian: [string, string, string] = ['64246', 'Guardian', 'SBX-COMPLETE'];
    // Not active for the date of service: written to the chart as a failure a person acts on.
    const cigna: [string, string, string] = ['62308', 'Cigna Dental', 'SBX-FAIL-InactivePatient'];
    const told: string[] = [];
    h.sync.on('needs-attention', (e) => told.push(e.key));
    const orders = () => coveragesBy((c) => c.order);
    expect(await send(siu('F1', 'P-11', 'APT-11', ...insurance(guardian, cigna)))).toEqual(['AA']);
    await until('one written, one waiting for a person', async () => (await h.store.listChecks({ states: ['written', 'needs-attention'] })).length === 2);
    expect(await orders()).toEqual({ Guardian: 1, 'Cigna Dental': 2 });
    // Told once the step that wrote it has returned, a moment after the store says so.
    await until('the person told', async () => told.length === 1);

    expect(await send([msh('SIU^S14^SIU_S12', 'F2'), sch('APT-11'), pid('P-11'), ...insurance(cigna, guardian)].join('\r'))).toEqual(['AA']);
    await until('the Coverages reordered', async () => {
      const now = await orders();
      return now['Guardian'] === 2 && now['Cigna Dental'] === 1 && (await h.store.listChecks({ states: ['written', 'needs-attention'] })).length === 2;
    });
    // Long enough for an event the write again would raise to have been raised.
    await new Promise((r) => setTimeout(r, 300));
    const failed = (await h.store.listChecks({ states: ['needs-attention'] }))[0];
    expect(failed?.check.coverage.order).toBe('primary');
    expect(failed?.lastError).toMatch(/Coverage is not active/);
    expect(told).toEqual([failed?.key]);
    expect(verificationsSent()).toBe(2);
    expect(await responses()).toHaveLength(2);
  });

  it('names the clinic and the portal of a failure left to a person, in its event and its log line: whose credentials, where offices share one serve', async () => {
    await start();
    const told: Array<{ clinicId: string; portalId?: string | undefined }> = [];
    h.sync.on('needs-attention', ({ clinicId, portalId }) => told.push({ clinicId, portalId }));
    const refused: [string, string, string] = ['64246', 'Guardian', 'SBX-FAIL-InvalidCredentials'];
    expect(await send(siu('F9', 'P-19', 'APT-19', ...insurance(refused)))).toEqual(['AA']);
    await until('the person told', async () => told.length === 1);
    expect(told).toEqual([{ clinicId: 'cln_sandbox_main', portalId: 'guardiananytime' }]);
    const lines = h.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'check needs-attention' || l.msg === 'check failed');
    expect(lines.map(({ msg, clinicId, portalId, failureKind }) => ({ msg, clinicId, portalId, failureKind }))).toEqual([
      { msg: 'check failed', clinicId: 'cln_sandbox_main', portalId: 'guardiananytime', failureKind: 'InvalidCredentials' },
      { msg: 'check needs-attention', clinicId: 'cln_sandbox_main', portalId: 'guardiananytime', failureKind: 'InvalidCredentials' },
    ]);
  });

  it('keeps a person\'s dismissal of a failure through its write again after a swap of plans', async () => {
    await start();
    const guardian: [string, string, string] = ['64246', 'Guardian', 'SBX-COMPLETE'];
    const cigna: [string, string, string] = ['62308', 'Cigna Dental', 'SBX-FAIL-InactivePatient'];
    expect(await send(siu('F3', 'P-12', 'APT-12', ...insurance(guardian, cigna)))).toEqual(['AA']);
    await until('one written, one waiting for a person', async () => (await h.store.listChecks({ states: ['written', 'needs-attention'] })).length === 2);
    const [failure] = await h.store.listChecks({ states: ['needs-attention'] });
    await dismissCheck(h.store, failure?.key ?? '', new Date());
    const forAPerson = async () => (await h.store.counts(new Date().toISOString())).forAPerson;
    expect(await forAPerson()).toBe(0);

    expect(await send([msh('SIU^S14^SIU_S12', 'F4'), sch('APT-12'), pid('P-12'), ...insurance(cigna, guardian)].join('\r'))).toEqual(['AA']);
    await until('the failure written again as primary', async () => {
      const [again] = await h.store.listChecks({ states: ['needs-attention'] });
      return again?.check.coverage.order === 'primary';
    });
    const [again] = await h.store.listChecks({ states: ['needs-attention'] });
    expect(again && dismissed(again)).toBe(true);
    expect(await forAPerson()).toBe(0);
  });

  it('follows a swap of the patient\'s plans sent by an ADT into the Coverages of a booked appointment', async () => {
    await start();
    const guardian: [string, string, string] = ['64246', 'Guardian', 'SBX-COMPLETE'];
    const cigna: [string, string, string] = ['62308', 'Cigna Dental', 'SBX-COMPLETE'];
    const orders = () => coveragesBy((c) => c.order);
    expect(await send(siu('D1', 'P-10', 'APT-10', ...insurance(guardian, cigna)))).toEqual(['AA']);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    expect(await orders()).toEqual({ Guardian: 1, 'Cigna Dental': 2 });

    // The patient's registration swaps the plans: the booked appointment's checks follow.
    expect(await send(adt('D2', 'P-10', ...insurance(cigna, guardian)))).toEqual(['AA']);
    await until('the checks take the new order and are written again', async () => {
      const rows = await h.store.listChecks({ states: ['written'] });
      return rows.length === 2 && rows.every((r) => r.check.coverage.order === (r.check.coverage.payer.name === 'Cigna Dental' ? 'primary' : 'secondary'));
    });
    expect(await orders()).toEqual({ Guardian: 2, 'Cigna Dental': 1 });
  });

  it('ends the chart Coverage of a member id the PMS corrected once the check under the new one is written, keeping the other plan', async () => {
    await start();
    const cigna: [string, string, string] = ['62308', 'Cigna Dental', 'SBX-COMPLETE'];
    const coverages = () => coveragesBy((c) => c.status, (c) => `${c.payor[0]?.display} ${c.subscriberId}`);
    expect(await send(siu('E1', 'P-13', 'APT-13', ...insurance(['64246', 'Guardian', 'SBX-COMPLETE-1'], cigna)))).toEqual(['AA']);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    expect(await coverages()).toEqual({ 'Guardian SBX-COMPLETE-1': 'active', 'Cigna Dental SBX-COMPLETE': 'active' });

    // The front desk corrects the Guardian member id: verified again, and the chart's Coverage under the old one ends.
    expect(await send(adt('E2', 'P-13', ...insurance(['64246', 'Guardian', 'SBX-COMPLETE-2'], cigna)))).toEqual(['AA']);
    await until('the corrected check written', async () => (await h.store.listChecks({ states: ['written'] })).some((r) => r.check.subscriber.memberId === 'SBX-COMPLETE-2'));
    expect(await coverages()).toEqual({ 'Guardian SBX-COMPLETE-1': 'cancelled', 'Cigna Dental SBX-COMPLETE': 'active', 'Guardian SBX-COMPLETE-2': 'active' });
  });

  it('ends the chart Coverage of a plan the PMS drops with none in its place, and makes it active again when the plan is back', async () => {
    await start();
    const guardian: [string, string, string] = ['64246', 'Guardian', 'SBX-COMPLETE'];
    const cigna: [string, string, string] = ['62308', 'Cigna Dental', 'SBX-COMPLETE-2'];
    const coverages = () => coveragesBy((c) => c.status);
    expect(await send(siu('S1', 'P-30', 'APT-30', ...insurance(guardian, cigna)))).toEqual(['AA']);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'active' });

    // The registration drops the secondary: no new Coverage is written, yet the chart's ends.
    expect(await send(adt('S2', 'P-30', ...insurance(guardian)))).toEqual(['AA']);
    await until('the dropped plan withdrawn', async () => (await h.store.listChecks({ states: ['cancelled'] })).length === 1);
    const [dropped] = await h.store.listChecks({ states: ['cancelled'] });
    expect(dropped?.check.coverage.payer.name).toBe('Cigna Dental');
    expect(dropped?.lastError).toBe('the PMS no longer sends this plan: its Coverage ended in the chart');
    expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'cancelled' });
    expect(verificationsSent()).toBe(2);

    // Stated again, the plan is verified again and its Coverage is active again.
    expect(await send(adt('S3', 'P-30', ...insurance(guardian, cigna)))).toEqual(['AA']);
    await until('verified and written again', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
    expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'active' });
    expect(verificationsSent()).toBe(3);
  });

  it('ends the chart Coverage of a dropped plan whose member id the plan kept is under too', async () => {
    await start();
    // One member id under both payers, as a PMS that keys plans by the patient's own number sends them.
    const guardian: [string, string, string] = ['64246', 'Guardian', 'SBX-COMPLETE'];
    const cigna: [string, string, string] = ['62308', 'Cigna Dental', 'SBX-COMPLETE'];
    const coverages = () => coveragesBy((c) => c.status);
    expect(await send(siu('D1', 'P-31', 'APT-31', ...insurance(guardian, cigna)))).toEqual(['AA']);
    await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);

    expect(await send(adt('D2', 'P-31', ...insurance(guardian)))).toEqual(['AA']);
    await until('the dropped plan withdrawn', async () => (await h.store.listChecks({ states: ['cancelled'] })).length === 1);
    const [dropped] = await h.store.listChecks({ states: ['cancelled'] });
    expect(dropped?.check.coverage.payer.name).toBe('Cigna Dental');
    expect(dropped?.lastError).toBe('the PMS no longer sends this plan: its Coverage ended in the chart');
    expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'cancelled' });
  });

  describe('ends the chart Coverage of a plan the PMS drops for a patient with no visit to come', () => {
    const guardian: [string, string, string] = ['64246', 'Guardian', 'SBX-COMPLETE'];
    const cigna: [string, string, string] = ['62308', 'Cigna Dental', 'SBX-COMPLETE-2'];
    const coverages = () => coveragesBy((c) => c.status);
    const cignaCheck = async () => (await h.store.listChecks()).find((r) => r.check.coverage.payer.name === 'Cigna Dental');
    const bookBoth = async (start: string) => {
      expect(await send([msh('SIU^S12^SIU_S12', 'V1'), sch('APT-40', start), pid('P-40'), ...insurance(guardian, cigna)].join('\r'))).toEqual(['AA']);
      await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
      expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'active' });
    };

    it('its visit cancelled once its check was written: the Coverage ends, the check cancelled', async () => {
      await start();
      await bookBoth(VISIT);
      expect(await send([msh('SIU^S15^SIU_S12', 'V2'), sch('APT-40'), pid('P-40')].join('\r'))).toEqual(['AA']);
      expect(await send(adt('V3', 'P-40', ...insurance(guardian)))).toEqual(['AA']);
      await until('the dropped plan ended', async () => (await coverages())['Cigna Dental'] === 'cancelled');
      await until('its check done', async () => (await cignaCheck())?.state === 'cancelled');
      expect((await cignaCheck())?.lastError).toBe('the PMS no longer sends this plan: its Coverage ended in the chart');
      expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'cancelled' });

      // A later change of the patient's record, the plan still not sent: it was ended once, and is left so.
      const ended = await cignaCheck();
      expect(await send([msh('ADT^A08^ADT_A01', 'V4'), pid('P-40', 'DOE^JANET'), ...insurance(guardian)].join('\r'))).toEqual(['AA']);
      await new Promise((r) => setTimeout(r, 300));
      expect(await cignaCheck()).toEqual(ended);
      expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'cancelled' });
      expect(verificationsSent()).toBe(2);
    });

    it.each([
      ['an A08', () => adt('V3', 'P-40', ...insurance(guardian))],
      ['its visit sent again without the plan (an S14 at checkout)', (visit: string) => [msh('SIU^S14^SIU_S12', 'V3'), sch('APT-40', visit), pid('P-40'), ...insurance(guardian)].join('\r')],
    ])('its visit over, the plan dropped by %s: the Coverage ends, the check that served the visit stays written', async (_by, drop) => {
      let offset = 0;
      await start({ now: () => new Date(Date.now() + offset) });
      const visit = visitIn(2);
      await bookBoth(visit);
      // Over where it is any day now: the clinic's zone unknown, a visit is over once its date has ended at UTC−12.
      offset = 4 * 86_400_000;
      expect(await send(drop(visit))).toEqual(['AA']);
      await until('the dropped plan ended', async () => (await coverages())['Cigna Dental'] === 'cancelled');
      await until('its check done', async () => (await cignaCheck())?.state === 'written');
      expect((await cignaCheck())?.lastError).toBe('the PMS no longer sends this plan: its Coverage ended in the chart');
      expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'cancelled' });
      expect(verificationsSent()).toBe(2);
    });

    // The plan's checks by visit, earliest first.
    const cignaChecks = async () => (await h.store.listChecks()).filter((r) => r.check.coverage.payer.name === 'Cigna Dental').sort((a, b) => a.check.dateOfService.localeCompare(b.check.dateOfService));
    /** Two visits booked with both plans and written, the first over by the time Cigna is dropped, the second over too or still to come; then another change of the record. */
    const dropAfterTwoVisits = async (secondIn: number, secondDone: CheckState) => {
      let offset = 0;
      await start({ now: () => new Date(Date.now() + offset) });
      const booking = (id: string, appointment: string, start: string) => [msh('SIU^S12^SIU_S12', id), sch(appointment, start), pid('P-41'), ...insurance(guardian, cigna)].join('\r');
      expect(await send(booking('W1', 'APT-41A', visitIn(2)), booking('W2', 'APT-41B', visitIn(secondIn)))).toEqual(['AA', 'AA']);
      await until('four written', async () => (await h.store.listChecks({ states: ['written'] })).length === 4);
      // Both over at UTC−12 (a third day's visit, whatever the hour), or the second still to come.
      offset = 5 * 86_400_000;
      expect(await send(adt('W3', 'P-41', ...insurance(guardian)))).toEqual(['AA']);
      await until('the dropped plan ended', async () => (await coverages())['Cigna Dental'] === 'cancelled');
      await until('its check done', async () => (await cignaChecks())[1]?.state === secondDone);
      expect((await cignaChecks()).map((r) => r.lastError)).toEqual([undefined, 'the PMS no longer sends this plan: its Coverage ended in the chart']);
      const settled = await cignaChecks();

      // Another change of the record, the plan still not sent: the Coverage was ended once, and is not ended again by the earlier visit's check.
      expect(await send([msh('ADT^A08^ADT_A01', 'W4'), pid('P-41', 'DOE^JANET'), ...insurance(guardian)].join('\r'))).toEqual(['AA']);
      await new Promise((r) => setTimeout(r, 300));
      expect(await cignaChecks()).toEqual(settled);
      expect(settled[0]?.state).toBe('written');
    };

    it('two visits over: the Coverage is ended once, by the later visit\'s check, not again by the earlier one at the next change', async () => {
      await dropAfterTwoVisits(3, 'written');
    });

    it('one visit over and one to come: the Coverage is ended once, by the check of the visit to come', async () => {
      await dropAfterTwoVisits(17, 'cancelled');
    });

    /** Cigna's result gone stale: verified again, its send held at the service a while, then answered (or refused with `status`). */
    const reverifyCignaHeld = async (status?: number) => {
      h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, delayMs: 2500, times: 1, ...(status !== undefined && { status }) });
      await h.store.transaction(async (tx) => {
        const row = await tx.getCheck((await cignaCheck())?.key ?? '');
        if (row) await tx.putCheck({ ...row, dueAt: new Date().toISOString() });
      });
      await until('its re-verification sent', async () => (await cignaCheck())?.state === 'submitted');
    };

    it('its check being verified again when its visit was cancelled: the Coverage its earlier result made ends, the check cancelled', async () => {
      let offset = 0;
      await start({ now: () => new Date(Date.now() + offset) });
      await bookBoth(visitIn(2));
      // The result gone stale before the visit: Cigna is verified again, its send held at the service while the visit is cancelled.
      await reverifyCignaHeld();
      expect(await send([msh('SIU^S15^SIU_S12', 'R2'), sch('APT-40', visitIn(2)), pid('P-40')].join('\r'))).toEqual(['AA']);
      expect((await cignaCheck())?.state).toBe('cancelled');

      // Dropped once the cancelled visit's date is over: the check comes back to no visit, so neither written nor verified again.
      offset = 4 * 86_400_000;
      expect(await send(adt('R3', 'P-40', ...insurance(guardian)))).toEqual(['AA']);
      await until('the dropped plan ended', async () => (await coverages())['Cigna Dental'] === 'cancelled', 5000);
      await until('its check done', async () => (await cignaCheck())?.planDroppedAt !== undefined && (await cignaCheck())?.dueAt === undefined);
      expect((await cignaCheck())?.state).toBe('cancelled');
      expect((await cignaCheck())?.lastError).toBe('the PMS no longer sends this plan: its Coverage ended in the chart');
      expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'cancelled' });
    });

    it('its check given up, its error response written, its visit cancelled: the Coverage that write made ends', async () => {
      await start({ settings: { maxAttempts: 1 } });
      h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 503, times: Infinity });
      expect(await send([msh('SIU^S12^SIU_S12', 'Z1'), sch('APT-44'), pid('P-44'), ...insurance(guardian, cigna)].join('\r'))).toEqual(['AA']);
      await until('both given up and answered in the chart', async () => (await h.store.listChecks({ states: ['needs-attention'] })).filter((r) => r.written).length === 2);
      expect(await send([msh('SIU^S15^SIU_S12', 'Z2'), sch('APT-44'), pid('P-44')].join('\r'))).toEqual(['AA']);
      expect(await send(adt('Z3', 'P-44', ...insurance(guardian)))).toEqual(['AA']);
      await until('the dropped plan ended', async () => (await coverages())['Cigna Dental'] === 'cancelled', 5000);
      await until('its check done', async () => (await cignaCheck())?.state === 'cancelled' && (await cignaCheck())?.planDroppedAt !== undefined);
      expect((await cignaCheck())?.lastError).toBe('the PMS no longer sends this plan: its Coverage ended in the chart');
      expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'cancelled' });
    });

    /** Cigna's Coverage ended, once its check was done with, which stays written: its visit over, its result served it. */
    const cignaEndedItsVisitServed = async () => {
      await until('the dropped plan ended', async () => (await coverages())['Cigna Dental'] === 'cancelled', 10_000);
      await until('its check done', async () => (await cignaCheck())?.state === 'written');
      expect((await cignaCheck())?.lastError).toBe('the PMS no longer sends this plan: its Coverage ended in the chart');
      expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'cancelled' });
    };

    it('its check still under way when the PMS drops the plan after the visit: the Coverage its write makes is ended once written', async () => {
      let offset = 0;
      await start({ now: () => new Date(Date.now() + offset) });
      // Both verifications held at the service while the visit passes and the PMS drops Cigna.
      h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, delayMs: 2500, times: 2 });
      expect(await send([msh('SIU^S12^SIU_S12', 'U1'), sch('APT-46', visitIn(2)), pid('P-46'), ...insurance(guardian, cigna)].join('\r'))).toEqual(['AA']);
      await until('both sent', async () => (await h.store.listChecks({ states: ['submitted'] })).length === 2);
      offset = 5 * 86_400_000;
      expect(await send(adt('U2', 'P-46', ...insurance(guardian)))).toEqual(['AA']);
      expect((await cignaCheck())?.state).toBe('submitted');
      await cignaEndedItsVisitServed();
      expect(verificationsSent()).toBe(2);
    });

    it('its check being verified again past its visit when the PMS drops the plan, then left to a person unwritten: the Coverage its earlier result made ends', async () => {
      let offset = 0;
      await start({ now: () => new Date(Date.now() + offset) });
      await bookBoth(visitIn(2));
      // Cigna verified again before the visit, its send held at the service past it and then refused (a portal's key revoked).
      await reverifyCignaHeld(403);
      offset = 4 * 86_400_000;
      expect(await send(adt('Y2', 'P-40', ...insurance(guardian)))).toEqual(['AA']);
      expect((await cignaCheck())?.state).toBe('submitted');
      // No later message looks at Cigna again: the Coverage its first result made is ended as the refusal lands.
      await cignaEndedItsVisitServed();
    });

    it('its check given up, its error response written, its visit over: the Coverage that write made ends, the check cancelled', async () => {
      let offset = 0;
      await start({ settings: { maxAttempts: 1 }, now: () => new Date(Date.now() + offset) });
      h.sandbox.injectFault({ path: /^\/v2\/insurance-verification/, status: 503, times: Infinity });
      expect(await send([msh('SIU^S12^SIU_S12', 'W1'), sch('APT-41', visitIn(2)), pid('P-41'), ...insurance(guardian, cigna)].join('\r'))).toEqual(['AA']);
      await until('both given up and answered in the chart', async () => (await h.store.listChecks({ states: ['needs-attention'] })).filter((r) => r.written).length === 2);
      expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'active' });

      offset = 4 * 86_400_000;
      expect(await send(adt('W2', 'P-41', ...insurance(guardian)))).toEqual(['AA']);
      await until('the dropped plan ended', async () => (await coverages())['Cigna Dental'] === 'cancelled', 5000);
      // Nothing left for a person to do: a retry of every check given up once the service is back does not send it.
      await until('its check done', async () => (await cignaCheck())?.state === 'cancelled');
      expect((await cignaCheck())?.lastError).toBe('the PMS no longer sends this plan: its Coverage ended in the chart');
      expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'cancelled' });
    });

    it('two visits given up, their error responses written, both over: no check of the plan is left to a person, nor sent again by a retry of those given up', async () => {
      let offset = 0;
      await start({ settings: { maxAttempts: 1 }, now: () => new Date(Date.now() + offset) });
      // The service away until the checks are given up, back for a retry of them.
      let serviceDown = true;
      const sends = /^\/v2\/insurance-verification/;
      h.sandbox.injectFault({ path: Object.assign(new RegExp(sends), { test: (path: string) => serviceDown && sends.test(path) }), status: 503, times: Infinity });
      const booking = (id: string, appointment: string, start: string) => [msh('SIU^S12^SIU_S12', id), sch(appointment, start), pid('P-45'), ...insurance(guardian, cigna)].join('\r');
      expect(await send(booking('X1', 'APT-45A', visitIn(2)), booking('X2', 'APT-45B', visitIn(3)))).toEqual(['AA', 'AA']);
      await until('four given up and answered in the chart', async () => (await h.store.listChecks({ states: ['needs-attention'] })).filter((r) => r.written).length === 4);

      offset = 5 * 86_400_000;
      expect(await send(adt('X3', 'P-45', ...insurance(guardian)))).toEqual(['AA']);
      await until('the dropped plan ended', async () => (await coverages())['Cigna Dental'] === 'cancelled', 5000);
      await until('its checks done', async () => (await cignaChecks()).every((r) => r.state === 'cancelled'));

      // The service back, every check given up sent again (jobs retry --state needs-attention): Guardian's alone.
      serviceDown = false;
      const sent = verificationsSent();
      for (const row of await h.store.listChecks({ states: ['needs-attention'] })) await retryCheck(h.store, row.key, new Date());
      await until('Guardian verified again', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
      await new Promise((r) => setTimeout(r, 300));
      expect(verificationsSent() - sent).toBe(1);
      expect((await cignaChecks()).map((r) => [r.state, r.lastError])).toEqual([
        ['cancelled', 'the PMS no longer sends this plan'],
        ['cancelled', 'the PMS no longer sends this plan: its Coverage ended in the chart'],
      ]);
      expect(await coverages()).toEqual({ Guardian: 'active', 'Cigna Dental': 'cancelled' });
    });
  });

  describe('a plan the PMS ends before the visit', () => {
    const guardian: [string, string, string] = ['64246', 'Guardian', 'SBX-COMPLETE'];
    const cigna: [string, string, string] = ['62308', 'Cigna Dental', 'SBX-COMPLETE-2'];
    const coverages = () => coveragesBy((c) => ({ status: c.status, order: c.order, period: c.period }));
    const guardianCheck = async () => (await h.store.listChecks()).find((r) => r.check.coverage.payer.name === 'Guardian');
    // Guardian ended a week before the visit.
    const ended = visitIn(10).slice(0, 8);
    const iso = `${ended.slice(0, 4)}-${ended.slice(4, 6)}-${ended.slice(6, 8)}`;
    /** Both plans booked and written, then the registration saying Guardian ended before the visit; `between` (the chart taken down) before that. */
    const bookThenEndGuardian = async (between = () => {}) => {
      expect(await send(siu('T1', 'P-32', 'APT-32', ...insurance(guardian, cigna)))).toEqual(['AA']);
      await until('both written', async () => (await h.store.listChecks({ states: ['written'] })).length === 2);
      between();
      const endedEarly = segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 13: ended, 17: 'SEL', 36: 'SBX-COMPLETE' });
      expect(await send(adt('T2', 'P-32', endedEarly, segment('IN1', { 1: '2', 3: '62308', 4: 'Cigna Dental', 17: 'SEL', 36: 'SBX-COMPLETE-2' })))).toEqual(['AA']);
    };
    /** The registration then dropping Guardian: its Coverage is cancelled (the dates it was given kept, `period`), once, and Cigna's left as it is. */
    const dropGuardian = async (period: Coverage['period'], sent = async () => {}) => {
      expect(await send(adt('T3', 'P-32', ...insurance(cigna)))).toEqual(['AA']);
      await sent();
      await until('the dropped plan ended', async () => (await coverages()).Guardian?.status === 'cancelled', 5000);
      const settled = await until('its check done', async () => {
        const row = await guardianCheck();
        return row?.state === 'cancelled' && row.lastError === 'the PMS no longer sends this plan: its Coverage ended in the chart' && row;
      });
      await until('Cigna moved up', async () => (await coverages())['Cigna Dental']?.order === 1);
      expect(await coverages()).toEqual({
        Guardian: { status: 'cancelled', order: 1, period },
        'Cigna Dental': { status: 'active', order: 1, period: undefined },
      });

      expect(verificationsSent()).toBe(2);

      // The registration then dropping Cigna too (a patient now paying for themselves): Guardian's, ended once, is left so.
      expect(await send(adt('T4', 'P-32', 'IN1|1'))).toEqual(['AA']);
      await until('Cigna ended', async () => (await coverages())['Cigna Dental']?.status === 'cancelled', 5000);
      await new Promise((r) => setTimeout(r, 300));
      expect(await guardianCheck()).toEqual(settled);
      expect((await coverages()).Guardian).toEqual({ status: 'cancelled', order: 1, period });
    };

    it('dates its chart Coverage, and moves the other plan up, verifying nothing again', async () => {
      await start();
      await bookThenEndGuardian();
      await until('the ended plan withdrawn', async () => (await h.store.listChecks({ states: ['cancelled'] })).length === 1);
      const [withdrawn] = await h.store.listChecks({ states: ['cancelled'] });
      expect(withdrawn?.lastError).toBe("the plan's dates no longer hold the visit: its Coverage given them in the chart");
      await until('Cigna moved up', async () => (await coverages())['Cigna Dental']?.order === 1);
      expect(await coverages()).toEqual({
        Guardian: { status: 'active', order: 1, period: { end: iso } },
        'Cigna Dental': { status: 'active', order: 1, period: undefined },
      });
      expect(verificationsSent()).toBe(2);
    });

    it('dropped once its Coverage was dated: the Coverage is cancelled, its dates kept', async () => {
      await start();
      await bookThenEndGuardian();
      await until('the ended plan dated', async () => (await coverages()).Guardian?.period?.end === iso && (await guardianCheck())?.state === 'cancelled');
      await dropGuardian({ end: iso });
    });

    it('dropped while its Coverage was still to be dated, the chart down: the Coverage is cancelled', async () => {
      let proxy: Awaited<ReturnType<typeof switchableProxy>> | undefined;
      await start({
        fhirVia: async (url) => {
          proxy = await switchableProxy(Number(new URL(url).port));
          return url.replace(`:${new URL(url).port}/`, `:${proxy.port}/`);
        },
      });
      if (!proxy) throw new Error('no proxy');
      const chart = proxy;
      try {
        await bookThenEndGuardian(() => (chart.down = true));
        await until('its dating failing', async () => (await guardianCheck())?.state === 'ending-coverage' && /ending its Coverage failed/.test((await guardianCheck())?.lastError ?? ''), 5000);
        await dropGuardian(undefined, async () => {
          // The chart back only once an attempt made after the drop failed: a dating under way at the drop, reaching
          // the chart back, would date the Coverage before it is cancelled (the dates the PMS gave kept, as above).
          await until('its ending failing', async () => {
            const row = await guardianCheck();
            return row?.check.coverage.period === undefined && /ending its Coverage failed/.test(row?.lastError ?? '');
          }, 5000);
          chart.down = false;
        });
      } finally {
        await chart.close();
      }
    });
  });

  it('withdraws a check the appointment no longer needs when it is cancelled before it is sent', async () => {
    await start({ settings: { idleMs: 60_000 } });
    // The worker is idle for a minute: the cancel lands while the check still waits.
    await h.sync.stop();
    await send(siu('X1', 'P-4', 'APT-4', in1('64246', 'Guardian', 'SBX-COMPLETE')));
    expect(await send([msh('SIU^S15^SIU_S12', 'X2'), sch('APT-4'), pid('P-4')].join('\r'))).toEqual(['AA']);
    expect((await h.store.listChecks()).map((c) => c.state)).toEqual(['cancelled']);
    // A resent reschedule of a cancelled appointment withdraws nothing more and changes nothing.
    expect(await send([msh('SIU^S15^SIU_S12', 'X2'), sch('APT-4'), pid('P-4')].join('\r'))).toEqual(['AA']);
    expect((await h.store.listChecks()).map((c) => c.state)).toEqual(['cancelled']);
  });

  it('moves the bookings of a duplicate patient to the one the PMS merges it into (A40): verified, cancelled and written under the survivor', async () => {
    await start({ settings: { idleMs: 60_000 } });
    // No worker yet: the merge lands while the checks under the duplicate's number still wait to be sent.
    await h.sync.stop();
    const guardian = in1('64246', 'Guardian', 'SBX-COMPLETE');
    const booking = (id: string, appointment: string, start: string) => [msh('SIU^S12^SIU_S12', id), sch(appointment, start), pid('P-DUP'), guardian].join('\r');
    const [first, second] = [VISIT, visitIn(24)].map((v) => `${v.slice(0, 4)}-${v.slice(4, 6)}-${v.slice(6, 8)}`);
    const under = async (patient: string) =>
      (await h.store.listChecks())
        .filter((c) => c.check.patient.identifiers[0]?.value === patient)
        .map((c) => `${c.check.dateOfService} ${c.state}`)
        .sort();
    expect(await send(booking('G1', 'APT-G1', VISIT), booking('G2', 'APT-G2', visitIn(24)))).toEqual(['AA', 'AA']);
    expect(await under('P-DUP')).toEqual([`${first} received`, `${second} received`]);

    // The front desk merges the duplicate (MRG-1) into the patient it keeps (PID-3), who has no insurance on file here.
    expect(await send([msh('ADT^A40^ADT_A39', 'G3'), 'EVN|A40|20261123090000', pid('P-KEEP'), 'MRG|P-DUP^^^SC^MR'].join('\r'))).toEqual(['AA']);
    expect(await under('P-DUP')).toEqual([`${first} cancelled`, `${second} cancelled`]);
    expect(await under('P-KEEP')).toEqual([`${first} received`, `${second} received`]);
    const appointments = (await h.store.listAppointments()).filter((a) => a.key.includes('|APT-G'));
    expect(appointments.map((a) => [a.key, a.patientKey]).sort()).toEqual([
      ['hl7|BSD-MAIN|APT-G1', 'hl7|BSD-MAIN|SC|P-KEEP'],
      ['hl7|BSD-MAIN|APT-G2', 'hl7|BSD-MAIN|SC|P-KEEP'],
    ]);
    expect((await h.store.listMessages()).find((m) => m.raw.includes('|G3|'))?.detail).toBe('merge: 1 patients, 2 appointments moved');

    // The second visit cancelled under the survivor: its check is withdrawn.
    expect(await send([msh('SIU^S15^SIU_S12', 'G4'), sch('APT-G2'), pid('P-KEEP')].join('\r'))).toEqual(['AA']);
    expect(await under('P-KEEP')).toEqual([`${first} received`, `${second} cancelled`]);

    // A worker comes: the first visit is written into the chart under the survivor, and no Patient under the duplicate's number.
    const logger = createLogger({ level: 'debug', destination: { write: (line: string) => h.logs.push(line) } as unknown as NodeJS.WritableStream });
    const worker = await startSyncInstance({ store: h.store, dataDir: h.dataDir, sandbox: h.sandbox, fhir: h.fhir, secret: h.secret, logger });
    try {
      h.sandbox.configureWebhook({ url: `${worker.httpUrl}${WEBHOOK_PATH}`, secret: h.secret });
      await until('the first visit written', async () => (await under('P-KEEP')).includes(`${first} written`));
      const patients = (await searchFhir(h.fhir, 'Patient')) as Patient[];
      expect(patients.map((p) => p.identifier?.map((i) => i.value))).toEqual([['P-KEEP']]);
      expect(await responses()).toHaveLength(1);
    } finally {
      await worker.close();
    }
  });

  it('keeps, for a merged patient, the time the insurance it took was stated: an older message of the survivor, delivered after, does not replace it', async () => {
    await start({ settings: { idleMs: 60_000 } });
    await h.sync.stop();
    const sentAt = (time: string, m: string) => m.replace('|20261123090000|', `|20261123${time}|`);
    const guardian = (member: string) => in1('64246', 'Guardian', member);
    // The duplicate's plan stated at 11:00; the survivor, who had none here, merged into at 12:00.
    expect(await send(sentAt('110000', adt('T1', 'P-DUP2', guardian('SBX-COMPLETE-2'))))).toEqual(['AA']);
    expect(await send(sentAt('120000', [msh('ADT^A40^ADT_A39', 'T2'), pid('P-KEEP2'), 'MRG|P-DUP2^^^SC^MR'].join('\r')))).toEqual(['AA']);
    // An A08 of the survivor's made at 10:00 is delivered now: older than the plan the record holds.
    expect(await send(sentAt('100000', adt('T3', 'P-KEEP2', guardian('SBX-COMPLETE-1'))))).toEqual(['AA']);
    expect((await h.store.listMessages()).find((m) => m.raw.includes('|T3|'))?.detail).toMatch(/not applied: sent \(MSH-7\) before the message that last changed them$/);
    expect(await send(siu('T4', 'P-KEEP2', 'APT-T4'))).toEqual(['AA']);
    const [check] = await h.store.listChecks();
    expect([check?.check.patient.identifiers[0]?.value, check?.check.subscriber.memberId]).toEqual(['P-KEEP2', 'SBX-COMPLETE-2']);
  });

  it("keeps the survivor's own insurance and name against a message under the duplicate's number made before the merge and delivered after it", async () => {
    await start({ settings: { idleMs: 60_000 } });
    await h.sync.stop();
    const sentAt = (time: string, m: string) => m.replace('|20261123090000|', `|20261123${time}|`);
    const guardian = (member: string) => in1('64246', 'Guardian', member);
    const checked = async () => {
      const rows = await h.store.listChecks();
      return (await h.store.listAppointments())
        .filter((a) => a.key.includes('|APT-L'))
        .map((a) => [a.key.split('|').pop(), a.patientKey, ...a.checkKeys.map((k) => rows.find((r) => r.key === k)).map((r) => `${r?.check.patient.firstName} ${r?.check.subscriber.memberId}`)])
        .sort();
    };
    // The duplicate's plan stated at 09:00, the kept patient's own at 10:00 and booked; merged at 12:00, the kept patient's plan wins.
    expect(await send(sentAt('090000', adt('L1', 'P-DUP3', guardian('SBX-COMPLETE-DUP'))), sentAt('100000', adt('L2', 'P-KEEP3', guardian('SBX-COMPLETE-KEEP'))))).toEqual(['AA', 'AA']);
    expect(await send(sentAt('100500', siu('L3', 'P-KEEP3', 'APT-L1')), sentAt('120000', [msh('ADT^A40^ADT_A39', 'L4'), pid('P-KEEP3'), 'MRG|P-DUP3^^^SC^MR'].join('\r')))).toEqual(['AA', 'AA']);
    // A booking made at 11:00 under the duplicate's number, with its plan, and an A08 of its misspelt name made at 11:30, delivered now.
    expect(await send(sentAt('110000', siu('L5', 'P-DUP3', 'APT-L2', guardian('SBX-COMPLETE-DUP'))))).toEqual(['AA']);
    expect(await send(sentAt('113000', [msh('ADT^A08^ADT_A01', 'L6'), pid('P-DUP3', 'DOE^JAYNE')].join('\r')))).toEqual(['AA']);
    expect(await checked()).toEqual([
      ['APT-L1', 'hl7|BSD-MAIN|SC|P-KEEP3', 'JANE SBX-COMPLETE-KEEP'],
      ['APT-L2', 'hl7|BSD-MAIN|SC|P-KEEP3', 'JANE SBX-COMPLETE-KEEP'],
    ]);
    // One made after the merge under the old number is the kept patient's news.
    expect(await send(sentAt('130000', adt('L7', 'P-DUP3', guardian('SBX-COMPLETE-NEW'))))).toEqual(['AA']);
    expect((await checked()).map((row) => row[2])).toEqual(['JANE SBX-COMPLETE-NEW', 'JANE SBX-COMPLETE-NEW']);
  });

  it('refuses a training message with AR and keeps it; replayed once the mappings take training messages, it is verified', async () => {
    await start();
    const training = siu('T1', 'P-5', 'APT-5', in1('64246', 'Guardian', 'SBX-COMPLETE')).replace('|T1|P|', '|T1|T|');
    expect(await send(training)).toEqual(['AR']);
    const [kept] = (await h.store.listMessages()).filter((m) => m.kind === 'hl7');
    expect(kept).toMatchObject({ status: 'dead', raw: training, detail: expect.stringContaining('MSH-11: processing id T is not accepted here') });
    expect(await h.store.listChecks()).toEqual([]);

    const mappings = loadHl7Mappings();
    const takesTraining = { ...mappings, defaultProfile: { ...mappings.defaultProfile, processingIds: ['P', 'T'] } };
    expect(await replayMessage(h.store, kept?.id ?? -1, { mappings: takesTraining, routing: loadClinicRouting(), now: () => new Date(), policy: schedulePolicy(SyncSettings.parse({}), loadClinicRouting()) })).toEqual({ kind: 'hl7', ackCodes: ['AA'] });
    await until('the replayed booking written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
  });

  it('replays a dead letter through the sync itself, with its own mappings, routing and schedule, and verifies it', async () => {
    await start();
    const booking = siu('DL1', 'P-DL1', 'APT-DL1', in1('64246', 'Guardian', 'SBX-COMPLETE'));
    // What a listener could not hand over (its handler failed): kept whole, not yet handled.
    await h.sync.deadLetterHl7({ message: booking, reason: 'the handler failed' });
    const [kept] = (await h.store.listMessages({ status: 'dead' })).filter((m) => m.kind === 'hl7');
    expect(await h.sync.replay(kept?.id ?? -1)).toEqual({ kind: 'hl7', ackCodes: ['AA'] });
    await until('the replayed booking written', async () => (await h.store.listChecks({ states: ['written'] })).length === 1);
    expect((await h.store.listMessages({ status: 'dead' })).filter((m) => m.kind === 'hl7')).toEqual([]);
  });

  it('changes nothing on a resend of a message whose control id the sender had already used for another', async () => {
    await start({ settings: { idleMs: 60_000 } });
    await h.sync.stop();
    // A sender whose counter restarted: R1 names two messages, each kept and applied once.
    await send(siu('R1', 'P-6', 'APT-6', in1('64246', 'Guardian', 'SBX-COMPLETE')));
    const second = siu('R1', 'P-7', 'APT-7', in1('62308', 'Cigna Dental', 'SBX-COMPLETE'));
    expect(await send(second)).toEqual(['AA']);
    expect(await send([msh('SIU^S15^SIU_S12', 'R2'), sch('APT-7'), pid('P-7')].join('\r'))).toEqual(['AA']);
    const before = await h.store.listChecks();
    // The second one resent (its ACK was lost): the same answer, the cancelled booking stays cancelled.
    expect(await send(second)).toEqual(['AA']);
    expect((await h.store.listAppointments()).find((a) => a.key.endsWith('|APT-7'))?.status).toBe('cancelled');
    expect(await h.store.listChecks()).toEqual(before);
    expect((await h.store.listMessages()).filter((m) => m.kind === 'hl7')).toHaveLength(3);
  });

  it('answers a resend with other line endings or a new MSH-7 as before, with or without a control id, and applies it no more', async () => {
    await start({ settings: { idleMs: 60_000 } });
    await h.sync.stop();
    const booking = (id: string) => siu(id, 'P-8', 'APT-8', in1('64246', 'Guardian', 'SBX-COMPLETE'));
    const cancel = (id: string) => [msh('SIU^S15^SIU_S12', id), sch('APT-8'), pid('P-8')].join('\r');
    for (const [id, cancelId] of [['Q1', 'Q2'], ['', 'Q3']] as const) {
      const first = await h.sync.receiveHl7(booking(id));
      await h.sync.receiveHl7(cancel(cancelId));
      const again = await h.sync.receiveHl7(`${booking(id).replace(/\r/g, '\r\n')}\r\n`);
      expect(again).toEqual(first);
      // The sender's engine stamped the resend with the time it went again.
      const restamped = await h.sync.receiveHl7(booking(id).replace('|20261123090000|', '|20261123091500|'));
      expect(restamped).toEqual(first);
      expect((await h.store.listAppointments()).find((a) => a.key.endsWith('|APT-8'))?.status).toBe('cancelled');
    }
  });

  it("applies an appointment's messages in the order they were sent (MSH-7), whatever order they arrive in", async () => {
    await start({ settings: { idleMs: 60_000 } });
    await h.sync.stop();
    const sentAt = (time: string, m: string) => m.replace('|20261123090000|', `|20261123${time}|`);
    const guardian = in1('64246', 'Guardian', 'SBX-COMPLETE');
    const siuFor = (event: string, id: string, appointment: string, start = VISIT) => [msh(`SIU^${event}^SIU_S12`, id), sch(appointment, start), pid('P-9'), guardian].join('\r');
    const cancel = (id: string, appointment: string) => [msh('SIU^S15^SIU_S12', id), sch(appointment), pid('P-9')].join('\r');
    const appointment = async (id: string) => (await h.store.listAppointments()).find((a) => a.key.endsWith(`|${id}`));
    const checksOn = async () => (await h.store.listChecks()).map((c) => `${c.check.dateOfService} ${c.state}`).sort();
    const day = (visit: string) => `${visit.slice(0, 4)}-${visit.slice(4, 6)}-${visit.slice(6, 8)}`;

    // A cancellation that overtook its booking: the booking, sent before it, books nothing when it comes.
    expect(await send(sentAt('100000', cancel('O2', 'APT-9')), sentAt('090000', siuFor('S12', 'O1', 'APT-9')))).toEqual(['AA', 'AA']);
    expect((await appointment('APT-9'))?.status).toBe('cancelled');
    expect(await h.store.listChecks()).toEqual([]);
    const kept = (await h.store.listMessages()).find((m) => m.raw.includes('|O1|'));
    expect(kept).toMatchObject({ status: 'handled', detail: expect.stringContaining('not applied: sent (MSH-7) before') });

    // A move sent before the move that followed it, arriving last: the appointment stays where the later one put it.
    const [later, earlier] = [visitIn(19), visitIn(18)];
    await send(sentAt('080000', siuFor('S12', 'O3', 'APT-10')), sentAt('110000', siuFor('S14', 'O5', 'APT-10', later)), sentAt('100000', siuFor('S14', 'O4', 'APT-10', earlier)));
    expect((await appointment('APT-10'))?.dateOfService).toBe(day(later));
    expect(await checksOn()).toEqual([`${day(VISIT)} cancelled`, `${day(later)} received`]);

    // The same without PID, as a cancellation may be sent: the appointment's id is enough.
    expect(await send(sentAt('100000', [msh('SIU^S15^SIU_S12', 'O8'), sch('APT-11')].join('\r')), sentAt('090000', siuFor('S12', 'O7', 'APT-11')))).toEqual(['AA', 'AA']);
    expect((await appointment('APT-11'))?.status).toBe('cancelled');
    expect(await checksOn()).not.toContain(`${day(VISIT)} received`);

    // Booked again after its cancellation, and sent after it: it is booked.
    expect(await send(sentAt('120000', siuFor('S12', 'O6', 'APT-9', visitIn(20))))).toEqual(['AA']);
    expect((await appointment('APT-9'))?.status).toBe('booked');
    expect(await checksOn()).toContain(`${day(visitIn(20))} received`);
  });

  /**
   * A sync whose worker is stopped (so the checks stay as the messages leave them), and a booking
   * (B<n>) and a cancellation (C<n>) of appointment APT-<n>, each made with its MSH-7 at a time of `date`.
   */
  const bookingAndCancellation = async (n: string, date: string, routing?: ClinicRouting) => {
    await start({ settings: { idleMs: 60_000 }, ...(routing && { routing }) });
    await h.sync.stop();
    const at = (m: string) => (time: string) => m.replace('|20261123090000|', `|${date}${time}|`);
    return {
      booking: at([msh('SIU^S12^SIU_S12', `B${n}`), sch(`APT-${n}`), pid(`P-${n}`), in1('64246', 'Guardian', 'SBX-COMPLETE')].join('\r')),
      cancellation: at([msh('SIU^S15^SIU_S12', `C${n}`), sch(`APT-${n}`), pid(`P-${n}`)].join('\r')),
    };
  };

  it('orders by an MSH-7 written to the microsecond, as many engines stamp it: the booking that a cancellation overtook books nothing', async () => {
    const { booking, cancellation } = await bookingAndCancellation('17', '20261123');
    expect(await send(cancellation('100000.000001'), booking('095959.999999'))).toEqual(['AA', 'AA']);
    expect((await h.store.listAppointments()).find((a) => a.key.endsWith('|APT-17'))?.status).toBe('cancelled');
    expect(await h.store.listChecks()).toEqual([]);
    expect((await h.store.listMessages()).find((m) => m.raw.includes('|B17|'))?.detail).toMatch(/not applied: sent \(MSH-7\) before the appointment's last message$/);
  });

  it('applies a cancellation sent in the hour the clocks go back over again after the booking, though its MSH-7 reads earlier, where clinics.json says the sender\'s zone', async () => {
    const { booking, cancellation } = await bookingAndCancellation('21', '20261101', { ...loadClinicRouting(), timeZone: 'America/New_York' });
    // Booked at 01:50 EDT, cancelled 20 minutes later at 01:10 EST: neither time says which came first, so they apply as they arrived.
    expect(await send(booking('015000'), cancellation('011000'))).toEqual(['AA', 'AA']);
    expect((await h.store.listAppointments()).find((a) => a.key.endsWith('|APT-21'))?.status).toBe('cancelled');
    expect((await h.store.listChecks()).map((c) => c.state)).toEqual(['cancelled']);
  });

  it("orders nothing of the patient's by two MSH-7s in the hour the clocks go back over again, in the zone of the clinic the MSH-4 is routed to: a booking refused for a typo, an A08 the record", async () => {
    // The file's zone is London's, whose clocks went back a week before: the sender's is its clinic's.
    const file = loadClinicRouting();
    const routes = file.routes.map((r) => (r.hl7Facilities.includes('BSD-MAIN') ? { ...r, timeZone: 'America/New_York' } : r));
    await start({ settings: { idleMs: 60_000 }, routing: { ...file, timeZone: 'Europe/London', routes } });
    await h.sync.stop();
    const sentAt = (time: string, m: string) => m.replace('|20261123090000|', `|20261101${time}|`);
    const guardian = (member: string) => in1('64246', 'Guardian', member);
    // The member id stated at 01:50 EDT; a booking at 01:05 EST with the birth year mistyped, no older than the record: refused for the typo, not built from the record.
    expect(await send(sentAt('015000', adt('DST1', 'P-DST', guardian('SBX-COMPLETE-1'))))).toEqual(['AA']);
    const typo = [msh('SIU^S12^SIU_S12', 'DST2'), sch('APT-DST'), pid('P-DST', 'DOE^JANE', '20800102'), guardian('SBX-COMPLETE-1')].join('\r');
    expect(await send(sentAt('010500', typo))).toEqual(['AE']);
    expect(await h.store.listChecks()).toEqual([]);
    // The member id corrected at 01:10 EST: the correction is the record.
    expect(await send(sentAt('011000', adt('DST3', 'P-DST', guardian('SBX-COMPLETE-2'))))).toEqual(['AA']);
    expect((await h.store.listMessages()).find((m) => m.raw.includes('|DST3|'))?.detail).toBe('record: 1 coverages');
  });

  it('keeps a booking refused for the patient, which a cancellation sent after it overtook, as handled, not a dead letter for a person', async () => {
    await start({ settings: { idleMs: 60_000 } });
    await h.sync.stop();
    const sentAt = (time: string, m: string) => m.replace('|20261123090000|', `|20261123${time}|`);
    const refused = [msh('SIU^S12^SIU_S12', 'U5'), sch('APT-19'), pid('P-19'), segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL' })].join('\r');
    const cancellation = [msh('SIU^S15^SIU_S12', 'U6'), sch('APT-19'), pid('P-19')].join('\r');
    // The sender is answered as the booking deserves; the visit is the cancellation's, which nothing is left to correct.
    expect(await send(sentAt('100000', cancellation), sentAt('090000', refused))).toEqual(['AA', 'AE']);
    expect((await h.store.listMessages()).find((m) => m.raw.includes('|U5|'))).toMatchObject({
      status: 'handled',
      detail: expect.stringMatching(/^rejected: IN1-36: member id missing; not applied: sent \(MSH-7\) before the appointment's last message$/),
    });
    expect(await h.store.listAppointments('awaiting-correction')).toEqual([]);
  });

  it('applies an A08 insurance made before a booking without IN1 that overtook it: the booking stated no insurance', async () => {
    await start({ settings: { idleMs: 60_000 } });
    await h.sync.stop();
    const sentAt = (time: string, m: string) => m.replace('|20261123090000|', `|20261123${time}|`);
    const guardian = (member: string) => in1('64246', 'Guardian', member);
    const memberOf = async (appointment: string) => {
      const row = (await h.store.listAppointments()).find((a) => a.key.endsWith(`|${appointment}`));
      const rows = await h.store.listChecks();
      return (row?.checkKeys ?? []).map((k) => rows.find((r) => r.key === k)?.check.subscriber.memberId);
    };
    expect(await send(sentAt('090000', adt('N1', 'P-16', guardian('SBX-COMPLETE-1'))))).toEqual(['AA']);
    // The front desk corrects the member id (A08 at 10:00, on the ADT feed) and books (S12 at 10:05, on the
    // scheduling feed, no IN1, as many PMSs send): the booking arrives first.
    expect(await send(sentAt('100500', siu('N3', 'P-16', 'APT-16')), sentAt('100000', adt('N2', 'P-16', guardian('SBX-COMPLETE-2'))))).toEqual(['AA', 'AA']);
    expect((await h.store.listMessages()).find((m) => m.raw.includes('|N2|'))?.detail).toBe('record: 1 coverages');
    expect(await memberOf('APT-16')).toEqual(['SBX-COMPLETE-2']);
  });

  it("applies what messages say of the patient in the order they were sent (MSH-7): an older one's insurance is not the record's", async () => {
    await start({ settings: { idleMs: 60_000 } });
    await h.sync.stop();
    const sentAt = (time: string, m: string) => m.replace('|20261123090000|', `|20261123${time}|`);
    const guardian = (member: string) => in1('64246', 'Guardian', member);
    const memberIds = async () => Object.fromEntries((await h.store.listAppointments()).filter((a) => a.patientKey.endsWith('|P-14')).map((a) => [a.key.split('|').pop(), a.checkKeys]));
    const memberOf = async (appointment: string) => {
      const keys: string[] = (await memberIds())[appointment] ?? [];
      const rows = await h.store.listChecks();
      return keys.map((k) => rows.find((r) => r.key === k)?.check.subscriber.memberId);
    };

    // The member id corrected at 11:00, and the A08 made at 10:00 delivered after it: the record keeps the correction.
    expect(await send(sentAt('110000', adt('R2', 'P-14', guardian('SBX-COMPLETE-2'))), sentAt('100000', adt('R1', 'P-14', guardian('SBX-COMPLETE-1'))))).toEqual(['AA', 'AA']);
    const kept = (await h.store.listMessages()).find((m) => m.raw.includes('|R1|'));
    expect(kept?.detail).toMatch(/the patient's details and insurance not applied: sent \(MSH-7\) before the message that last changed them$/);
    // A booking made at 09:00, delivered now: its appointment is booked, verified under the record's member id, not its own older one.
    expect(await send(sentAt('090000', siu('R3', 'P-14', 'APT-14', guardian('SBX-COMPLETE-1'))))).toEqual(['AA']);
    expect(await memberOf('APT-14')).toEqual(['SBX-COMPLETE-2']);
    // A booking made later states another: it is the record now, and the first visit follows it.
    expect(await send(sentAt('120000', [msh('SIU^S12^SIU_S12', 'R4'), sch('APT-15', visitIn(30)), pid('P-14'), guardian('SBX-COMPLETE-3')].join('\r')))).toEqual(['AA']);
    expect([await memberOf('APT-14'), await memberOf('APT-15')]).toEqual([['SBX-COMPLETE-3'], ['SBX-COMPLETE-3']]);

    // A cancellation says nothing of the patient: an A08 made before it and delivered after it still applies.
    expect(await send(sentAt('130000', [msh('SIU^S15^SIU_S12', 'R5'), sch('APT-15'), pid('P-14')].join('\r')), sentAt('125000', adt('R6', 'P-14', guardian('SBX-COMPLETE-4'))))).toEqual(['AA', 'AA']);
    expect((await h.store.listMessages()).find((m) => m.raw.includes('|R6|'))?.detail).toBe('record: 1 coverages');
    expect(await memberOf('APT-14')).toEqual(['SBX-COMPLETE-4']);
  });

  it('books an older booking whose birth date a later A08 corrected, its checks built from the record, not refused for the typo', async () => {
    await start({ settings: { idleMs: 60_000 } });
    await h.sync.stop();
    const sentAt = (time: string, m: string) => m.replace('|20261123090000|', `|20261123${time}|`);
    const guardian = in1('64246', 'Guardian', 'SBX-COMPLETE');
    // The booking made at 09:00 has the year mistyped; the A08 made at 10:00 corrects it, and is delivered first.
    expect(await send(sentAt('100000', adt('Y1', 'P-18', guardian)))).toEqual(['AA']);
    expect(await send(sentAt('090000', [msh('SIU^S12^SIU_S12', 'Y2'), sch('APT-18'), pid('P-18', 'DOE^JANE', '20800102'), guardian].join('\r')))).toEqual(['AA']);
    const checks = (await h.store.listChecks()).filter((c) => c.check.source.kind === 'hl7' && c.check.source.appointmentId === 'APT-18');
    expect(checks.map((c) => c.check.patient.birthDate)).toEqual(['1980-01-02']);
  });

  it('loses no update when two connections race with messages for one patient', async () => {
    await start({ settings: { idleMs: 60_000 } });
    await h.sync.stop();
    const a = await client(port);
    const b = await client(port);
    // Insurance from one connection, bookings from the other, interleaved.
    for (let i = 0; i < 10; i++) {
      a.socket.write(frame(adt(`A${i}`, 'P-5', in1('64246', 'Guardian', `MEMBER-${i}`))));
      b.socket.write(frame([msh('SIU^S12^SIU_S12', `B${i}`), sch(`APT-5-${i}`, visitIn(17 + i)), pid('P-5')].join('\r')));
    }
    await Promise.all([a.waitFor(10, 10_000), b.waitFor(10, 10_000)]);
    a.socket.end();
    b.socket.end();
    const appointments = (await h.store.listAppointments()).filter((x) => x.key.includes('APT-5-'));
    expect(appointments).toHaveLength(10);
    // Every booking has a check, none is left waiting: each saw insurance or was given it by a later ADT.
    expect(appointments.every((x) => x.status === 'booked' && x.checkKeys.length === 1)).toBe(true);
    const checks = await h.store.listChecks();
    // And every future booking's check carries the insurance of the last ADT.
    const last = checks.filter((c) => c.state === 'received').map((c) => c.check.subscriber.memberId);
    expect(new Set(last)).toEqual(new Set(['MEMBER-9']));
  });
});
