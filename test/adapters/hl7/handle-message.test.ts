import { cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { loadClinicRouting, type ClinicRouting } from '../../../src/adapters/clinic-routing';
import { ackFor, handleHl7Message, InMemoryPatientInsuranceStore, loadHl7Mappings, type Hl7Outcome, type Hl7Result } from '../../../src/adapters/hl7';
import type { PatientInsuranceStore } from '../../../src/domain';
import { mappingsDir } from '../../../src/mapping-files';
import { fixturePayers } from './fixture-payers';
import { segment } from './segment';

/**
 * The adapter as a specification: messages built inline, one comment per field naming where it
 * must land, then asserted field by field.
 */
const mappings = loadHl7Mappings();
const routing = loadClinicRouting();
const receivedAt = '2024-05-01T12:00:00.000Z';

function run(segments: string[], store: PatientInsuranceStore = new InMemoryPatientInsuranceStore(), withResolver = true): Promise<Hl7Result> {
  return handleHl7Message(segments.join('\r'), { mappings, routing, store, receivedAt, ...(withResolver && { resolver: fixturePayers }) });
}

const msh = (type: string, id = 'C1', facility = 'BSD-MAIN', version = '2.5.1') => `MSH|^~\\&|SMILECLOUD|${facility}|ELIG|BSD|20240501||${type}|${id}|P|${version}`;
const SCH = 'SCH|APT-1^SC|||||^New|||||^^^20240610093000';
const PID = 'PID|1||P-1^^^SC^MR||DOE^JANE^Q||19800102|F';

function checksOf(result: Hl7Result) {
  const outcome: Hl7Outcome = result.outcome;
  if (outcome.kind !== 'book' && outcome.kind !== 'reschedule') throw new Error(`expected checks, got ${outcome.kind}: ${JSON.stringify(outcome)}`);
  return outcome.checks;
}

describe('SIU^S12 with insurance: where each field goes', () => {
  it('maps the default profile field by field', async () => {
    const result = await run([
      msh('SIU^S12^SIU_S12', 'CTRL-9'), // source.messageControlId, source.messageType SIU^S12; MSH-4 → clinic (BSD-MAIN)
      'SCH|APT-1^SC|FILLER-7^SC||||^New|||||^^^20240610093000', // SCH-2 → appointment id (before SCH-1); SCH-11.4 → dateOfService
      'PID|1||P-1^^^SC^MR~X-9^^^OTHER^PI||DOE^JANE^Q||19800102|F', // PID-3 → identifiers; PID-5 → names; PID-7 → birthDate; PID-8 → gender
      segment('IN1', {
        1: '1', // set id: the order, IN1-22 being empty
        2: 'PLN^Gold Plan', // IN1-2.2 → coverage.planName
        3: 'CDCA1', // → coverage.payer.id
        4: 'Delta Dental of California', // → coverage.payer.name
        8: 'G-100', // → coverage.groupNumber
        9: 'ACME', // → coverage.groupName
        16: 'DOE^JOHN^R', // → subscriber names
        17: 'SPO', // → subscriber.relationship (table 0063)
        18: '19790303', // → subscriber.birthDate
        36: 'M-555', // → subscriber.memberId
      }),
      segment('IN2', { 1: '1', 61: 'DEP-1' }), // IN2-61 → patient.memberId
      'AIP|1||1234567893^CHEN^LAURA', // AIP-3 → provider npi and name
    ]);
    expect(result.ackCode).toBe('AA');
    const [check] = checksOf(result);
    expect(check).toEqual({
      idempotencyKey: expect.stringMatching(/^elig_[0-9a-f]{32}$/),
      source: {
        kind: 'hl7',
        messageControlId: 'CTRL-9',
        messageType: 'SIU^S12',
        sendingApplication: 'SMILECLOUD',
        sendingFacility: 'BSD-MAIN',
        appointmentId: 'FILLER-7',
        receivedAt,
      },
      clinicId: 'cln_sandbox_main',
      patient: {
        firstName: 'JANE',
        middleName: 'Q',
        lastName: 'DOE',
        birthDate: '1980-01-02',
        gender: 'female',
        identifiers: [
          { value: 'P-1', system: 'SC', type: 'MR' },
          { value: 'X-9', system: 'OTHER', type: 'PI' },
        ],
        memberId: 'DEP-1',
      },
      subscriber: { firstName: 'JOHN', middleName: 'R', lastName: 'DOE', birthDate: '1979-03-03', memberId: 'M-555', relationship: 'spouse' },
      coverage: {
        order: 'primary',
        payer: { name: 'Delta Dental of California', id: 'CDCA1' },
        resolution: expect.objectContaining({ status: 'resolved', primaryPayerId: 'DDCA01' }),
        groupNumber: 'G-100',
        groupName: 'ACME',
        planName: 'Gold Plan',
      },
      provider: { npi: '1234567893', firstName: 'LAURA', lastName: 'CHEN' },
      dateOfService: '2024-06-10',
    });
  });

  it('takes the subscriber from PID when IN1-17 says self and IN1-16/18 are empty', async () => {
    const [check] = checksOf(await run([msh('SIU^S12'), SCH, PID, segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna', 17: 'SEL', 36: 'M-1' })]));
    expect(check?.subscriber).toEqual({ firstName: 'JANE', middleName: 'Q', lastName: 'DOE', birthDate: '1980-01-02', memberId: 'M-1', relationship: 'self' });
  });

  it('reads an empty IN1-17 as self only when IN1-16 is empty or names the patient', async () => {
    const self = await run([msh('SIU^S12'), SCH, PID, segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna', 16: 'DOE^JANE', 36: 'M-1' })]);
    expect(checksOf(self)[0]?.subscriber.relationship).toBe('self');
    const other = await run([msh('SIU^S12'), SCH, PID, segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna', 16: 'DOE^JOHN', 36: 'M-1' })]);
    // Refused for what it says of the patient alone: its visit is held for the correction (see ingest-hl7).
    expect(other.outcome).toEqual({
      kind: 'reject',
      problems: [expect.objectContaining({ segment: 'IN1', field: 17, reason: 'relationship to patient missing', code: 101 })],
      held: { patientKey: { facility: 'BSD-MAIN', identifier: { system: 'SC', value: 'P-1' } }, appointmentId: 'APT-1', appointment: expect.objectContaining({ dateOfService: '2024-06-10' }) },
    });
  });

  it('orders coverages by IN1-22 when every IN1 gives a distinct priority, else by IN1 order', async () => {
    const in1 = (set: number, payer: string, priority: string) => segment('IN1', { 1: `${set}`, 3: payer, 4: `P${set}`, 17: 'SEL', 22: priority, 36: `M-${set}` });
    const declared = checksOf(await run([msh('SIU^S12'), SCH, PID, in1(1, '62308', '2'), in1(2, '65978', '1')]));
    expect(declared.map((c) => [c.coverage.order, c.coverage.payer.id])).toEqual([['primary', '65978'], ['secondary', '62308']]);
    const clash = checksOf(await run([msh('SIU^S12'), SCH, PID, in1(1, '62308', '1'), in1(2, '65978', '1')]));
    expect(clash.map((c) => [c.coverage.order, c.coverage.payer.id])).toEqual([['primary', '62308'], ['secondary', '65978']]);
  });

  it('orders by IN1-22 this year\'s plans and next year\'s sent together, each year\'s 1 and 2 being distinct on any day', async () => {
    // Listed secondary first; next year's plans (begun 2025) priorities 1 and 2 again.
    const in1 = (set: number, payer: string, priority: string, dates: [string, string]) =>
      segment('IN1', { 1: `${set}`, 3: payer, 4: `P${set}`, 12: dates[0], 13: dates[1], 17: 'SEL', 22: priority, 36: `M-${set}` });
    const thisYear: [string, string] = ['20240101', '20241231'];
    const nextYear: [string, string] = ['20250101', ''];
    const plans = [in1(1, '62308', '2', thisYear), in1(2, '65978', '1', thisYear), in1(3, '60054', '2', nextYear), in1(4, 'CDCA1', '1', nextYear)];
    const june = checksOf(await run([msh('SIU^S12'), SCH, PID, ...plans]));
    expect(june.map((c) => [c.coverage.order, c.coverage.payer.id])).toEqual([['primary', '65978'], ['secondary', '62308']]);
    const january = checksOf(await run([msh('SIU^S12'), 'SCH|APT-1^SC|||||^New|||||^^^20250110093000', PID, ...plans]));
    expect(january.map((c) => [c.coverage.order, c.coverage.payer.id])).toEqual([['primary', 'CDCA1'], ['secondary', '60054']]);
    // Two plans of one priority that hold together are no order: IN1's is taken.
    const overlapping = checksOf(await run([msh('SIU^S12'), SCH, PID, in1(1, '62308', '2', thisYear), in1(2, '65978', '1', thisYear), in1(3, '60054', '2', ['20240601', ''])]));
    expect(overlapping.map((c) => [c.coverage.order, c.coverage.payer.id])).toEqual([['primary', '62308'], ['secondary', '65978'], ['tertiary', '60054']]);
  });

  it("carries a plan's dates on its check, spanning every period the plan is listed with, and leaves them out of its key", async () => {
    const in1 = (set: number, payer: string, member: string, dates: [string, string]) => segment('IN1', { 1: `${set}`, 3: payer, 4: `P${set}`, 12: dates[0], 13: dates[1], 17: 'SEL', 36: member });
    const [dated] = checksOf(await run([msh('SIU^S12'), SCH, PID, in1(1, '62308', 'M-1', ['20240101', '20241231'])]));
    expect(dated?.coverage.period).toEqual({ start: '2024-01-01', end: '2024-12-31' });
    // Last year's and this year's under one member id are one Coverage in the chart: its dates are both years'.
    const renewed = checksOf(await run([msh('SIU^S12'), SCH, PID, in1(1, '62308', 'M-1', ['20230101', '20231231']), in1(2, '62308', 'M-1', ['20240101', '20241231'])]));
    expect(renewed.map((c) => c.coverage.period)).toEqual([{ start: '2023-01-01', end: '2024-12-31' }]);
    const reopened = checksOf(await run([msh('SIU^S12'), SCH, PID, in1(1, '62308', 'M-1', ['20230101', '20231231']), in1(2, '62308', 'M-1', ['20240101', ''])]));
    expect(reopened.map((c) => c.coverage.period)).toEqual([{ start: '2023-01-01' }]);
    const undated = checksOf(await run([msh('SIU^S12'), SCH, PID, segment('IN1', { 1: '1', 3: '62308', 4: 'P1', 17: 'SEL', 36: 'M-1' })]));
    expect(undated[0]?.coverage).not.toHaveProperty('period');
    // A date the PMS corrects is the same check: nothing to verify anew.
    expect(dated?.idempotencyKey).toBe(undated[0]?.idempotencyKey);
  });

  it('keeps a plan date the message leaves empty, deletes one sent as "" (HL7\'s null), and keeps no expiration before a new effective date', async () => {
    const store = new InMemoryPatientInsuranceStore();
    const in1 = (member: string, dates: [string, string]) => segment('IN1', { 1: '1', 3: '62308', 4: 'P1', 12: dates[0], 13: dates[1], 17: 'SEL', 36: member });
    const periodAfter = async (...plans: string[]) => {
      await run([msh('ADT^A08^ADT_A01'), PID, ...plans], store);
      return (await store.get({ facility: 'BSD-MAIN', identifier: { system: 'SC', value: 'P-1' } }))?.coverages.map((c) => c.period);
    };
    expect(await periodAfter(in1('M-1', ['20240101', '20241231']))).toEqual([{ start: '2024-01-01', end: '2024-12-31' }]);
    expect(await periodAfter(in1('M-1', ['', '']))).toEqual([{ start: '2024-01-01', end: '2024-12-31' }]);
    expect(await periodAfter(in1('M-1', ['', '20250630']))).toEqual([{ start: '2024-01-01', end: '2025-06-30' }]);
    expect(await periodAfter(in1('M-1', ['""', '']))).toEqual([{ end: '2025-06-30' }]);
    // A renewal: the new effective date is after the expiration on file, which was the old plan's.
    expect(await periodAfter(in1('M-1', ['20250701', '']))).toEqual([{ start: '2025-07-01' }]);
    expect(await periodAfter(in1('M-1', ['', '20251231']))).toEqual([{ start: '2025-07-01', end: '2025-12-31' }]);
    // A date that cannot be read is none, not the one on file (00000000, as some PMSs write no date).
    expect(await periodAfter(in1('M-1', ['', '00000000']))).toEqual([{ start: '2025-07-01' }]);
    // Both deleted: an empty period, which clears the chart Coverage's.
    expect(await periodAfter(in1('M-1', ['""', '""']))).toEqual([{}]);
    // Another member id is another plan: nothing of the one on file is kept for it.
    expect(await periodAfter(in1('M-2', ['', '']))).toEqual([undefined]);
  });

  it('rejects a fourth insurance rather than drop it', async () => {
    const in1 = (set: number) => segment('IN1', { 1: `${set}`, 3: `6230${set}`, 4: 'P', 17: 'SEL', 36: `M-${set}` });
    const result = await run([msh('SIU^S12'), SCH, PID, in1(1), in1(2), in1(3), in1(4)]);
    expect(result.outcome).toEqual({ kind: 'reject', problems: [expect.objectContaining({ segment: 'IN1', sequence: 4, reason: 'more than three insurances in force at once' })], held: expect.objectContaining({ appointmentId: 'APT-1' }) });
  });

  it('leaves the resolution out when no catalog is at hand, and writes unknown gender codes as unknown', async () => {
    const [check] = checksOf(await run([msh('SIU^S12'), SCH, 'PID|1||P-1^^^SC^MR||DOE^JANE||19800102|Z', segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna', 17: 'SEL', 36: 'M-1' })], undefined, false));
    expect(check?.coverage).not.toHaveProperty('resolution');
    expect(check?.patient.gender).toBe('unknown');
  });

  it('dates a start written with an offset where the clinic is, when clinics.json says where; one without, as written', async () => {
    const IN1 = segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna', 17: 'SEL', 36: 'M-1' });
    const california: ClinicRouting = { ...routing, timeZone: 'America/Los_Angeles' };
    const dateOf = async (start: string, zoned: ClinicRouting = california) => {
      const text = [msh('SIU^S12'), 'SCH|APT-1^SC', `TQ1|1||||||${start}`, PID, IN1].join('\r');
      return checksOf(await handleHl7Message(text, { mappings, routing: zoned, store: new InMemoryPatientInsuranceStore(), receivedAt }))[0]?.dateOfService;
    };
    // A 5:30 pm visit as an engine writing UTC sends it, and on New Year's Eve, when the plan year turns.
    expect(await dateOf('202406110030+0000')).toBe('2024-06-10');
    expect(await dateOf('20250101013000.000+0000')).toBe('2024-12-31');
    expect(await dateOf('2024061100+0000')).toBe('2024-06-10');
    // The clinic's own offset, a local time, a date: as written.
    expect(await dateOf('202406101730-0700')).toBe('2024-06-10');
    expect(await dateOf('202406110030')).toBe('2024-06-11');
    expect(await dateOf('20240611')).toBe('2024-06-11');
    // No time zone in clinics.json: as written.
    expect(await dateOf('202406110030+0000', routing)).toBe('2024-06-11');
  });

  it("dates a plan's effective and expiration dates written with a time and an offset where the clinic is, as its visit; in an ADT, where the sender is", async () => {
    const in1 = (dates: [string, string]) => segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna', 12: dates[0], 13: dates[1], 17: 'SEL', 36: 'M-1' });
    const zoned = (timeZone: string): ClinicRouting => ({ ...routing, timeZone });
    const periodOf = async (timeZone: string | undefined, dates: [string, string], visit: string) => {
      const text = [msh('SIU^S12'), 'SCH|APT-1^SC', `TQ1|1||||||${visit}`, PID, in1(dates)].join('\r');
      const result = await handleHl7Message(text, { mappings, routing: timeZone ? zoned(timeZone) : routing, store: new InMemoryPatientInsuranceStore(), receivedAt });
      return checksOf(result).map((c) => c.coverage.period);
    };
    // An engine writing UTC: Auckland's (+13) 1 December begins at 11:00 on 30 November, in force for a visit that day.
    expect(await periodOf('Pacific/Auckland', ['20241130110000+0000', '20251130105959+0000'], '20241201100000')).toEqual([{ start: '2024-12-01', end: '2025-11-30' }]);
    // Los Angeles' 30 November ends at 07:59:59 on 1 December: the plan is over for a visit that day.
    expect(await periodOf('America/Los_Angeles', ['20240101080000+0000', '20241201075959+0000'], '20240615100000')).toEqual([{ start: '2024-01-01', end: '2024-11-30' }]);
    expect(await periodOf('America/Los_Angeles', ['20240101080000+0000', '20241201075959+0000'], '20241201100000')).toEqual([]);
    // The clinic's own offset, a local time, a date alone: as written.
    expect(await periodOf('America/Los_Angeles', ['20240101000000-0800', '20241231235959'], '20240615100000')).toEqual([{ start: '2024-01-01', end: '2024-12-31' }]);
    expect(await periodOf('Pacific/Auckland', ['20240101+0000', '202412'], '20240615100000')).toEqual([{ start: '2024-01-01', end: '2024-12-31' }]);
    // No time zone in clinics.json: as written.
    expect(await periodOf(undefined, ['20241130110000+0000', ''], '20241201100000')).toEqual([{ start: '2024-11-30' }]);
    // A date an engine writes as its first or last moment in UTC (a date column rendered with a time) is the day written, as
    // the service's are (dayWritten): Los Angeles' last visit of the year is this plan's, not next year's, which begins 1 January.
    const yearEnd: [string, string] = ['20240101000000+0000', '20241231235959+0000'];
    expect(await periodOf('America/Los_Angeles', yearEnd, '20241231100000')).toEqual([{ start: '2024-01-01', end: '2024-12-31' }]);
    expect(await periodOf('America/Los_Angeles', ['20240101000000+0000', '20241231000000+0000'], '20241231100000')).toEqual([{ start: '2024-01-01', end: '2024-12-31' }]);
    expect(await periodOf('America/Los_Angeles', ['20250101000000+0000', ''], '20241231100000')).toEqual([]);

    const store = new InMemoryPatientInsuranceStore();
    await handleHl7Message([msh('ADT^A08^ADT_A01'), PID, in1(['20241130110000+0000', '20251130105959+0000'])].join('\r'), { mappings, routing: zoned('Pacific/Auckland'), store, receivedAt });
    expect((await store.get({ facility: 'BSD-MAIN', identifier: { system: 'SC', value: 'P-1' } }))?.coverages.map((c) => c.period)).toEqual([{ start: '2024-12-01', end: '2025-11-30' }]);
  });

  it('refuses a start whose offset no clock keeps, rather than date the visit days off where the clinic is', async () => {
    const IN1 = segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna', 17: 'SEL', 36: 'M-1' });
    const california: ClinicRouting = { ...routing, timeZone: 'America/Los_Angeles' };
    for (const start of ['202406101730+9999', '202406101730-2400']) {
      const text = [msh('SIU^S12'), 'SCH|APT-1^SC', `TQ1|1||||||${start}`, PID, IN1].join('\r');
      const result = await handleHl7Message(text, { mappings, routing: california, store: new InMemoryPatientInsuranceStore(), receivedAt });
      expect(result.ackCode).toBe('AE');
      expect(result.outcome.kind === 'reject' && result.outcome.problems.map((p) => `${p.segment}-${p.field}: ${p.reason}`)).toEqual(['TQ1-7: appointment start is not a valid HL7 date (YYYYMMDD[HHMM[SS]])']);
    }
  });

  it('collects every problem of a message, each naming its field, none its value', async () => {
    const result = await run([msh('SIU^S12'), 'SCH|APT-1', 'PID|1||P-1^^^SC^MR||DOE||1980', segment('IN1', { 1: '1', 17: 'ZZ' })]);
    expect(result.ackCode).toBe('AE');
    const problems = result.outcome.kind === 'reject' ? result.outcome.problems : [];
    expect(problems.map((p) => `${p.segment}-${p.field}: ${p.reason} (${p.code})`)).toEqual([
      'PID-5: patient family or given name missing (101)',
      'PID-7: birth date needs year, month and day (102)',
      'SCH-11: appointment start missing (101)',
    ]);
  });
});

describe('a message of more than one appointment or patient', () => {
  const in1 = (payer: string, memberId: string) => segment('IN1', { 1: '1', 3: payer, 4: 'P', 17: 'SEL', 36: memberId });
  const problemsOf = (result: Hl7Result) => (result.outcome.kind === 'reject' ? result.outcome.problems.map((p) => `${p.segment}[${p.sequence}]: ${p.code} ${p.ackCode}`) : []);

  it('refuses a booking with a second SCH, which was answered AA and never booked', async () => {
    const result = await run([msh('SIU^S12'), SCH, SCH.replace('APT-1', 'APT-2').replace('20240610', '20240612'), PID, in1('62308', 'M-1')]);
    expect(problemsOf(result)).toEqual(['SCH[2]: 100 AE']);
  });

  it("refuses a booking with a second patient rather than verify the first under the second's plan", async () => {
    const store = new InMemoryPatientInsuranceStore();
    const result = await run([msh('SIU^S12'), SCH, PID, in1('62308', 'M-1'), 'PID|2||P-2^^^SC^MR||ROE^RICHARD||19700101|M', in1('65978', 'M-2')], store);
    expect(problemsOf(result)).toEqual(['PID[2]: 100 AE']);
    expect(result.outcome).not.toHaveProperty('held');
    // Nothing of either patient's plans is kept as the first's.
    expect(await store.get({ facility: 'BSD-MAIN', identifier: { system: 'SC', value: 'P-1' } })).toBeUndefined();
  });

  it("refuses an ADT with a second patient rather than record the second's plan as the first's", async () => {
    const store = new InMemoryPatientInsuranceStore();
    const result = await run([msh('ADT^A08^ADT_A01'), PID, in1('62308', 'M-1'), 'PID|2||P-2^^^SC^MR||ROE^RICHARD||19700101|M', in1('65978', 'M-2')], store);
    expect(problemsOf(result)).toEqual(['PID[2]: 100 AE']);
    expect(await store.get({ facility: 'BSD-MAIN', identifier: { system: 'SC', value: 'P-1' } })).toBeUndefined();
  });

  it('refuses a cancellation with a second SCH rather than cancel the first alone', async () => {
    expect(problemsOf(await run([msh('SIU^S15'), SCH, SCH.replace('APT-1', 'APT-2'), PID]))).toEqual(['SCH[2]: 100 AE']);
  });
});

describe('the subscriber', () => {
  const in1 = (fields: Record<number, string>) => segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna', 36: 'M-1', ...fields });
  const problemsOf = (result: Hl7Result) => (result.outcome.kind === 'reject' ? result.outcome.problems : []);

  it('refuses a relationship of self when IN1-16 or IN1-18 name another person, without saying who', async () => {
    const others: Array<Record<number, string>> = [{ 16: 'SMITH^JOHN', 18: '19500101' }, { 16: 'SMITH^JOHN' }, { 18: '19500101' }, { 16: 'DOE^JOHN', 18: '19800102' }];
    for (const other of others) {
      const result = await run([msh('SIU^S12'), SCH, PID, in1({ 17: 'SEL', ...other })]);
      expect(result.ackCode).toBe('AE');
      expect(problemsOf(result)).toEqual([
        { segment: 'IN1', sequence: 1, field: 17, reason: 'relationship self but IN1-16/IN1-18 name another person', code: 103, ackCode: 'AE' },
      ]);
    }
  });

  it('refuses a patient or a subscriber born after the date of service, naming the field, not the date of birth', async () => {
    // The visit is on 2024-06-10; a newborn seen the day of birth is fine.
    const sameDay = await run([msh('SIU^S12'), SCH, 'PID|1||P-1^^^SC^MR||DOE^JANE||20240610|F', in1({ 16: 'DOE^JOHN', 17: 'PAR', 18: '19790303' })]);
    expect(sameDay.ackCode).toBe('AA');
    const unborn = await run([
      msh('SIU^S12'),
      SCH,
      'PID|1||P-1^^^SC^MR||DOE^JANE||20620102|F',
      in1({ 17: 'SEL' }),
      segment('IN1', { 1: '2', 3: 'CDCA1', 4: 'Delta Dental of California', 16: 'DOE^JOHN', 17: 'SPO', 18: '20790303', 36: 'M-2' }),
    ]);
    expect(unborn.ackCode).toBe('AE');
    expect(problemsOf(unborn)).toEqual([
      { segment: 'PID', sequence: 1, field: 7, reason: 'patient birth date is after the date of service, 2024-06-10', code: 102, ackCode: 'AE' },
      { segment: 'IN1', sequence: 2, field: 18, reason: 'subscriber birth date is after the date of service, 2024-06-10', code: 102, ackCode: 'AE' },
    ]);
    expect(JSON.stringify(problemsOf(unborn))).not.toMatch(/2062|2079/);
  });

  it('refuses a record (A08) stating a birth date in the future, which every later booking would send; tomorrow is not refused', async () => {
    const store = new InMemoryPatientInsuranceStore();
    const spouse = (born: string) => in1({ 16: 'DOE^JOHN', 17: 'SPO', 18: born });
    // Received at noon UTC on 2024-05-01: a day ahead of it may already be the day in a clinic east of UTC.
    expect((await run([msh('ADT^A08^ADT_A01', 'A1'), PID, spouse('20240502')], store)).ackCode).toBe('AA');
    const future = await run([msh('ADT^A08^ADT_A01', 'A2'), 'PID|1||P-1^^^SC^MR||DOE^JANE||20620102|F', spouse('20790303')], store);
    expect(future.ackCode).toBe('AE');
    expect(problemsOf(future).map((p) => `${p.segment}-${p.field}: ${p.reason}`)).toEqual(['PID-7: patient birth date is in the future', 'IN1-18: subscriber birth date is in the future']);
    // Refused, it changed nothing on file: a booking without IN1 is built from the record as it was.
    const [check] = checksOf(await run([msh('SIU^S12', 'S1'), SCH, PID], store));
    expect([check?.patient.birthDate, check?.subscriber.birthDate]).toEqual(['1980-01-02', '2024-05-02']);
  });

  it('accepts self when IN1-16 and IN1-18 name the patient, family and given name in any case, the middle name aside', async () => {
    const [check] = checksOf(await run([msh('SIU^S12'), SCH, PID, in1({ 16: 'doe^Jane^X', 17: 'SEL', 18: '19800102' })]));
    expect(check?.subscriber).toMatchObject({ lastName: 'doe', firstName: 'Jane', relationship: 'self', memberId: 'M-1' });
  });

  it('answers an empty IN1-17 with another person in IN1-16 as a missing relationship, not as self', async () => {
    const result = await run([msh('SIU^S12'), SCH, PID, in1({ 16: 'SMITH^JOHN', 18: '19500101' })]);
    expect(problemsOf(result)).toEqual([expect.objectContaining({ segment: 'IN1', field: 17, reason: 'relationship to patient missing' })]);
  });

  it('never takes a dependent’s own member number (IN2-61) as the subscriber’s: IN1-36 is missing', async () => {
    const child = segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna', 16: 'DOE^JOHN', 17: 'CHD', 18: '19790303' });
    const result = await run([msh('SIU^S12'), SCH, PID, child, segment('IN2', { 1: '1', 61: 'DEP-1' })]);
    expect(problemsOf(result)).toEqual([{ segment: 'IN1', sequence: 1, field: 36, reason: 'member id missing', code: 101, ackCode: 'AE' }]);
    const molar = await run([msh('SIU^S12').replace('SMILECLOUD', 'MOLARPMS'), SCH, PID, child, segment('IN2', { 1: '1', 61: 'DEP-1' })]);
    expect(problemsOf(molar)).toEqual([expect.objectContaining({ segment: 'IN1', field: 49, reason: 'member id missing' })]);
  });

  it('takes the patient’s own member number (IN2-61) as the subscriber’s when the patient is the subscriber', async () => {
    const self = segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna', 17: 'SEL' });
    const [check] = checksOf(await run([msh('SIU^S12'), SCH, PID, self, segment('IN2', { 1: '1', 61: 'OWN-1' })]));
    expect(check?.subscriber).toMatchObject({ memberId: 'OWN-1', relationship: 'self' });
    expect(check?.patient.memberId).toBe('OWN-1');
    const stated = checksOf(await run([msh('SIU^S12'), SCH, PID, in1({ 17: 'SEL' }), segment('IN2', { 1: '1', 61: 'OWN-1' })]));
    expect(stated[0]?.subscriber.memberId).toBe('M-1');
  });
});

describe('the provider', () => {
  const delta = segment('IN1', { 1: '1', 3: 'CDCA1', 4: 'Delta Dental of California', 17: 'SEL', 36: 'D-1' });
  const pv1 = (attending: string) => segment('PV1', { 1: '1', 2: 'O', 7: attending });
  const providerOf = async (...segments: string[]) => {
    const result = await run([msh('SIU^S12'), SCH, PID, delta, ...segments]);
    return result.outcome.kind === 'reject' ? result.outcome.problems : checksOf(result)[0]?.provider;
  };

  it('takes NPI and name from the same field: the first with an NPI, else the name of the first named one', async () => {
    expect(await providerOf('AIP|1||^HYG^ANNA|H', pv1('1234567893^CHEN^LAURA'))).toEqual({ npi: '1234567893', firstName: 'LAURA', lastName: 'CHEN' });
    expect(await providerOf('AIP|1||^HYG^ANNA|H', pv1('1234567893'))).toEqual({ npi: '1234567893' });
    expect(await providerOf('AIP|1||^HYG^ANNA|H', pv1('LOC9^CHEN^LAURA'))).toEqual({ firstName: 'ANNA', lastName: 'HYG' });
  });

  it('finds the NPI in any repetition: the one typed NPI in XCN-13, else the first valid ten-digit id', async () => {
    expect(await providerOf(pv1('LOC1^CHEN^LAURA~1234567893^CHEN^LAURA^^^^^^^^^^NPI'))).toEqual({ npi: '1234567893', firstName: 'LAURA', lastName: 'CHEN' });
    expect(await providerOf(pv1('LOC1^CHEN^LAURA~1234567893'))).toEqual({ npi: '1234567893', firstName: 'LAURA', lastName: 'CHEN' });
    expect(await providerOf(pv1('1234567893^CHEN^LAURA~1987654328^PARK^DANIEL^^^^^^^^^^npi'))).toEqual({ npi: '1987654328', firstName: 'DANIEL', lastName: 'PARK' });
    expect(await providerOf(pv1('1234567890^CHEN^LAURA~1234567893^CHEN^LAURA'))).toEqual({ npi: '1234567893', firstName: 'LAURA', lastName: 'CHEN' });
  });

  it('verifies without an NPI that fails the check digit or is not ten digits: AA with a W ERR naming its repetition, the check warned', async () => {
    const result = await run([msh('SIU^S12'), SCH, PID, delta, pv1('LOC1^CHEN^LAURA~1234567890^CHEN^LAURA^^^^^^^^^^NPI')]);
    expect(result.ackCode).toBe('AA');
    expect(result.warnings).toEqual([
      { segment: 'PV1', sequence: 1, field: 7, repetition: 2, component: 1, reason: 'provider NPI fails the check digit: verified without it', code: 102, ackCode: 'AA' },
    ]);
    const [check] = checksOf(result);
    expect(check?.provider).toEqual({ firstName: 'LAURA', lastName: 'CHEN' });
    expect(check?.warnings).toEqual(['PV1-7.1: provider NPI fails the check digit: verified without it']);
    const [ack] = ackFor(result);
    expect(ack?.code).toBe('AA');
    expect(ack?.text.split('\r').filter((s) => s.startsWith('ERR|'))).toEqual([
      'ERR||PV1^1^7^2^1|102^Data type error^HL70357|W||||PV1-7.1: provider NPI fails the check digit: verified without it',
    ]);
    const short = await run([msh('SIU^S12'), SCH, PID, delta, pv1('12345^CHEN^LAURA^^^^^^^^^^NPI')]);
    expect(short.warnings).toEqual([expect.objectContaining({ field: 7, repetition: 1, reason: 'provider NPI is not ten digits: verified without it' })]);
    expect(checksOf(short)[0]?.provider).toEqual({ firstName: 'LAURA', lastName: 'CHEN' });
  });

  it('finds the dentist in AIG-3 when neither AIP-3 nor PV1-7 names one (eClinicalWorks-style feeds)', async () => {
    expect(await providerOf('AIG|1||1234567893^CHEN^LAURA|D')).toEqual({ npi: '1234567893', firstName: 'LAURA', lastName: 'CHEN' });
    expect(await providerOf(pv1('LOC9^PARK^DANIEL'), 'AIG|1||1234567893^CHEN^LAURA|D')).toEqual({ npi: '1234567893', firstName: 'LAURA', lastName: 'CHEN' });
    expect(await providerOf('AIP|1||1987654328^PARK^DANIEL|D', 'AIG|1||1234567893^CHEN^LAURA|D')).toEqual({ npi: '1987654328', firstName: 'DANIEL', lastName: 'PARK' });
  });
});

describe('the provider among a hygienist and a dentist', () => {
  const delta = segment('IN1', { 1: '1', 3: 'CDCA1', 4: 'Delta Dental of California', 17: 'SEL', 36: 'D-1' });
  const providerOf = async (...segments: string[]) => checksOf(await run([msh('SIU^S12'), SCH, PID, delta, 'RGS|1', ...segments]))[0]?.provider;
  const chen = { npi: '1234567893', firstName: 'LAURA', lastName: 'CHEN' };
  const park = { npi: '1245319599', firstName: 'JUNE', lastName: 'PARK' };

  it('takes the dentist when the hygienist or assistant is listed first (AIP-4 code or text, mappings/hl7/provider-role.json)', async () => {
    expect(await providerOf('AIP|1||1245319599^PARK^JUNE|HYG^Hygienist', 'AIP|2||1234567893^CHEN^LAURA|DDS^Dentist')).toEqual(chen);
    expect(await providerOf('AIP|1||1245319599^PARK^JUNE|^Dental Hygienist', 'AIP|2||1234567893^CHEN^LAURA|D^Dentist')).toEqual(chen);
    expect(await providerOf('AIP|1||1245319599^PARK^JUNE|EFDA', 'AIP|2||1234567893^CHEN^LAURA')).toEqual(chen);
    // The attending dentist of PV1-7 and a dentist in AIG-3 come before a hygienist in AIP-3 too.
    expect(await providerOf('AIP|1||1245319599^PARK^JUNE|RDH', segment('PV1', { 1: '1', 2: 'O', 7: '1234567893^CHEN^LAURA' }))).toEqual(chen);
    expect(await providerOf('AIG|1||1234567893^CHEN^LAURA|DENTIST', 'AIP|1||1245319599^PARK^JUNE|HYG')).toEqual(chen);
  });

  it('names the dentist without an NPI rather than the hygienist with one, and the hygienist when no one else is named', async () => {
    expect(await providerOf('AIP|1||1245319599^PARK^JUNE|HYG', 'AIP|2||LOC7^CHEN^LAURA|DDS')).toEqual({ firstName: 'LAURA', lastName: 'CHEN' });
    expect(await providerOf('AIP|1||1245319599^PARK^JUNE|HYG', 'AIP|2||LOC7|DDS')).toEqual(park);
    expect(await providerOf('AIP|1||1245319599^PARK^JUNE|HYG')).toEqual(park);
  });

  it('puts a dentist before a person of a role it does not know, and keeps the first with an NPI when no role says who is who', async () => {
    expect(await providerOf('AIP|1||1245319599^PARK^JUNE|ORTHO', 'AIP|2||1234567893^CHEN^LAURA|DMD')).toEqual(chen);
    expect(await providerOf('AIP|1||1245319599^PARK^JUNE|ORTHO', 'AIP|2||1234567893^CHEN^LAURA')).toEqual(park);
    expect(await providerOf('AIP|1||1245319599^PARK^JUNE', 'AIP|2||1234567893^CHEN^LAURA')).toEqual(park);
    // A dentist without an NPI does not take the place of the attending's NPI of PV1-7 (no role, the same person, say).
    expect(await providerOf('AIP|1||LOC7^CHEN^LAURA|DDS', segment('PV1', { 1: '1', 2: 'O', 7: '1234567893^CHEN^LAURA' }))).toEqual(chen);
  });
});

describe('a message without a control id (MSH-10 empty)', () => {
  const delta = segment('IN1', { 1: '1', 3: 'CDCA1', 4: 'Delta Dental of California', 17: 'SEL', 36: 'D-1' });
  const unnamed = [msh('SIU^S12', ''), SCH, PID, delta];

  it('is used, known by a sha256 of its content: the checks and the store carry that id, the ACK has MSA-2 empty and a W ERR at MSH-10', async () => {
    const store = new InMemoryPatientInsuranceStore();
    const result = await run(unnamed, store);
    expect(result.ackCode).toBe('AA');
    expect(result.messageControlId).toMatch(/^sha256:[0-9a-f]{64}$/);
    const [check] = checksOf(result);
    expect(check?.source.kind === 'hl7' && check.source.messageControlId).toBe(result.messageControlId);
    expect(check?.warnings).toEqual(['MSH-10: message control id missing: known by a hash of its content']);
    const key = { facility: 'BSD-MAIN', identifier: { system: 'SC', value: 'P-1' } };
    expect((await store.get(key))?.messageControlId).toBe(result.messageControlId);
    const [ack] = ackFor(result);
    const segments = ack?.text.split('\r') ?? [];
    expect(segments[1]).toBe('MSA|AA||MSH-10: message control id missing: known by a hash of its content');
    expect(segments[2]).toBe('ERR||MSH^1^10^1|101^Required field missing^HL70357|W||||MSH-10: message control id missing: known by a hash of its content');
  });

  it('gets the same id when resent with other line endings and framing, and another id when anything else differs', async () => {
    const first = await run(unnamed);
    const resent = await handleHl7Message(`\x0b${unnamed.join('\r\n')}\r\n\x1c\r`, { mappings, routing, store: new InMemoryPatientInsuranceStore(), receivedAt });
    expect(resent.messageControlId).toBe(first.messageControlId);
    const other = await run([msh('SIU^S12', ''), SCH.replace('20240610', '20240611'), PID, delta]);
    expect(other.messageControlId).not.toBe(first.messageControlId);
    expect((await run([msh('SIU^S12', '  '), SCH, PID, delta])).messageControlId).toMatch(/^sha256:/);
  });

  it('keeps a control id the sender wrote as it is', async () => {
    expect((await run([msh('SIU^S12', 'CTRL-1'), SCH, PID, delta])).messageControlId).toBe('CTRL-1');
  });
});

describe('the patient insurance store', () => {
  const adt = (event: string, id: string, in1?: string) => [msh(`ADT^${event}^ADT_A01`, id), `EVN|${event}|20240501`, PID, 'PV1|1|O', ...(in1 ? [in1] : [])];
  const delta = segment('IN1', { 1: '1', 3: 'CDCA1', 4: 'Delta Dental of California', 17: 'SEL', 36: 'D-1' });
  const metlife = segment('IN1', { 1: '1', 3: '65978', 4: 'MetLife', 17: 'SEL', 36: 'ML-1' });

  it('gives a SIU without IN1 the insurance of an earlier ADT, and keeps it through an ADT without IN1', async () => {
    const store = new InMemoryPatientInsuranceStore();
    expect((await run(adt('A04', 'A1', delta), store)).outcome).toMatchObject({ kind: 'record', coverageCount: 1, insuranceReceived: true });
    expect((await run(adt('A08', 'A2'), store)).outcome).toMatchObject({ kind: 'record', coverageCount: 1, insuranceReceived: false });
    const [check] = checksOf(await run([msh('SIU^S12', 'S1'), SCH, PID], store));
    expect(check?.coverage.payer).toEqual({ name: 'Delta Dental of California', id: 'CDCA1' });
    expect(check?.source).toMatchObject({ kind: 'hl7', messageControlId: 'S1' });
  });

  it('gives a SIU without IN1 the insurance of an earlier SIU that had one', async () => {
    const store = new InMemoryPatientInsuranceStore();
    await run([msh('SIU^S12', 'S1'), SCH, PID, metlife], store);
    const later = checksOf(await run([msh('SIU^S12', 'S2'), SCH.replace('APT-1', 'APT-2').replace('20240610', '20240710'), PID], store));
    expect(later.map((c) => c.subscriber.memberId)).toEqual(['ML-1']);
  });

  it('makes one check of a plan that a record stored before c9d41a7 lists twice, without dates', async () => {
    const store = new InMemoryPatientInsuranceStore();
    await run(adt('A04', 'A1', delta), store);
    // Such a version kept one plan a PMS listed in two IN1 as it came: primary, then secondary.
    const older: PatientInsuranceStore = {
      get: async (patient) => {
        const record = await store.get(patient);
        const [plan] = record?.coverages ?? [];
        return record && plan && { ...record, coverages: [plan, { ...plan, coverage: { ...plan.coverage, order: 'secondary' } }] };
      },
      put: (patient, record) => store.put(patient, record),
    };
    const checks = checksOf(await run([msh('SIU^S12', 'S1'), SCH, PID], older));
    expect(checks.map((c) => [c.subscriber.memberId, c.coverage.order])).toEqual([['D-1', 'primary']]);
  });

  it('gives a subscriber who is the patient the name and birth date an ADT without IN1 corrects', async () => {
    const store = new InMemoryPatientInsuranceStore();
    await run(adt('A04', 'A1', delta), store);
    const corrected = 'PID|1||P-1^^^SC^MR||DOE-SMITH^JANE||19800103|F';
    const updated = await run([msh('ADT^A08^ADT_A01', 'A2'), corrected], store);
    const self = { firstName: 'JANE', lastName: 'DOE-SMITH', birthDate: '1980-01-03', memberId: 'D-1', relationship: 'self' };
    // The record the pipeline builds the patient's booked checks again from.
    expect(updated.outcome.kind === 'record' && updated.outcome.record?.coverages.map((c) => c.subscriber)).toEqual([self]);
    // The same stated again: no record to build them again from.
    const again = await run([msh('ADT^A08^ADT_A01', 'A3'), corrected], store);
    expect(again.outcome).toMatchObject({ kind: 'record', coverageCount: 1 });
    expect(again.outcome.kind === 'record' && 'record' in again.outcome).toBe(false);
    const [check] = checksOf(await run([msh('SIU^S12', 'S1'), SCH, corrected], store));
    expect(check?.patient).toMatchObject({ lastName: 'DOE-SMITH', birthDate: '1980-01-03' });
    expect(check?.subscriber).toEqual(self);
  });

  it('keeps another person as the subscriber when the patient’s name is corrected', async () => {
    const store = new InMemoryPatientInsuranceStore();
    const spouse = segment('IN1', { 1: '1', 3: 'CDCA1', 4: 'Delta Dental of California', 16: 'DOE^JOHN', 17: 'SPO', 18: '19790304', 36: 'D-1' });
    await run(adt('A04', 'A1', spouse), store);
    const [check] = checksOf(await run([msh('SIU^S12', 'S1'), SCH, 'PID|1||P-1^^^SC^MR||DOE-SMITH^JANE||19800102|F'], store));
    expect(check?.subscriber).toEqual({ firstName: 'JOHN', lastName: 'DOE', birthDate: '1979-03-04', memberId: 'D-1', relationship: 'spouse' });
  });

  it('forgets insurance when an ADT says self pay, so the next appointment makes no check', async () => {
    const store = new InMemoryPatientInsuranceStore();
    await run(adt('A04', 'A1', delta), store);
    await run(adt('A08', 'A2', segment('IN1', { 1: '1', 2: 'SELFPAY', 17: 'SEL' })), store);
    const result = await run([msh('SIU^S12'), SCH, PID], store);
    expect(result.outcome).toMatchObject({ kind: 'book', appointmentId: 'APT-1', checks: [], replacedKeys: [], selfPay: true, awaitingInsurance: false });
  });

  it('keeps patients of different facilities apart, even with the same PID-3', async () => {
    const store = new InMemoryPatientInsuranceStore();
    await run(adt('A04', 'A1', delta), store);
    const elsewhere = await run([msh('SIU^S12', 'S1', 'BSD-NORTH'), SCH, PID], store);
    expect(checksOf(elsewhere)).toEqual([]);
  });

  it('names the keys a reschedule replaces and a cancellation withdraws', async () => {
    const store = new InMemoryPatientInsuranceStore();
    const [booked] = checksOf(await run([msh('SIU^S12', 'S1'), SCH, PID, delta], store));
    const moved = await run([msh('SIU^S13', 'S2'), SCH.replace('20240610', '20240617'), PID], store);
    const [rekeyed] = checksOf(moved);
    expect(moved.outcome).toMatchObject({ kind: 'reschedule', appointmentId: 'APT-1', replacedKeys: [booked?.idempotencyKey] });
    expect(rekeyed?.idempotencyKey).not.toBe(booked?.idempotencyKey);
    expect((await run([msh('SIU^S15', 'S3'), SCH, PID], store)).outcome).toMatchObject({ kind: 'cancel', appointmentId: 'APT-1', keys: [rekeyed?.idempotencyKey] });
    expect((await run([msh('SIU^S15', 'S4'), SCH, PID], store)).outcome).toMatchObject({ kind: 'cancel', appointmentId: 'APT-1', keys: [] });
  });

  it('takes a discontinuation (S16), a deletion (S17) and a no-show (S26) for a cancellation: the visit will not happen', async () => {
    for (const event of ['SIU^S16', 'SIU^S17', 'SIU^S26']) {
      const store = new InMemoryPatientInsuranceStore();
      const [booked] = checksOf(await run([msh('SIU^S12', 'S1'), SCH, PID, delta], store));
      expect((await run([msh(event, 'S2'), SCH, PID], store)).outcome).toMatchObject({ kind: 'cancel', appointmentId: 'APT-1', keys: [booked?.idempotencyKey] });
    }
  });

  it('takes an empty IN1 (its set id alone) for no insurance, saying so in the ACK, where one with anything in it is read', async () => {
    const store = new InMemoryPatientInsuranceStore();
    await run(adt('A04', 'E1', delta), store);
    const result = await run([msh('SIU^S12', 'E2'), SCH, PID, 'IN1|1', 'IN2|||'], store);
    expect(result.outcome).toMatchObject({ kind: 'book', checks: [], selfPay: true, awaitingInsurance: false });
    const [ack] = ackFor(result, { now: new Date(receivedAt) });
    expect(ack?.code).toBe('AA');
    expect(ack?.text.split('\r').filter((s) => s.startsWith('ERR|'))).toEqual(['ERR||IN1^1^3^1|101^Required field missing^HL70357|W||||IN1-3: insurance group empty: taken as no insurance']);
    // The patient's record says so too: the next booking without IN1 is self-pay, not the plan on file before.
    expect(checksOf(await run([msh('SIU^S12', 'E3'), SCH, PID], store))).toEqual([]);
    // Anything in it and it is an insurance, read (and refused here, its payer missing).
    expect((await run([msh('SIU^S12', 'E4'), SCH, PID, 'IN1|1||||||||||||||||||||||||||||||||||M-1'], store)).ackCode).toBe('AE');
  });

  it('takes an empty IN1 for no insurance where the appointment\'s resources follow it, as a SIU lays them out', async () => {
    // RGS, AIS and AIP come after the patient's IN1 in a SIU: they are the appointment's, not the insurance's.
    const result = await run([msh('SIU^S12', 'E5'), SCH, PID, 'IN1|1', 'RGS|1', 'AIS|1||D1110^Prophy', 'AIP|1||1234567893^HYG^ANNA']);
    expect(result.ackCode).toBe('AA');
    expect(result.outcome).toMatchObject({ kind: 'book', checks: [], selfPay: true });
    // An IN1 with something in it followed by them is still read: refused here, its payer missing.
    expect((await run([msh('SIU^S12', 'E6'), SCH, PID, 'IN1|1||||||||||||||||||||||||||||||||||M-1', 'RGS|1'])).ackCode).toBe('AE');
  });

  it('takes a booking or move whose filler status (SCH-25) says the visit will not happen for a cancellation', async () => {
    const store = new InMemoryPatientInsuranceStore();
    const [booked] = checksOf(await run([msh('SIU^S12', 'F1'), SCH, PID, delta], store));
    // SCH-25 is a CE: the code (table 0278) in the first component, or only its text in the second.
    const withStatus = (status: string) => segment('SCH', { 1: 'APT-1^SC', 6: '^New', 11: '^^^20240610093000', 25: status });
    expect((await run([msh('SIU^S14', 'F2'), withStatus('Booked'), PID, delta], store)).outcome.kind).toBe('reschedule');
    expect((await run([msh('SIU^S14', 'F3'), withStatus('CANCELLED^Cancelled'), PID], store)).outcome).toMatchObject({ kind: 'cancel', appointmentId: 'APT-1', keys: [booked?.idempotencyKey] });
    for (const [id, status] of [['F4', 'Noshow'], ['F5', '^No show'], ['F6', 'Deleted'], ['F7', 'DC']]) {
      expect((await run([msh('SIU^S12', id ?? ''), withStatus(status ?? ''), PID, delta], store)).outcome.kind).toBe('cancel');
    }
  });

  describe('two appointments of the patient on one day, which share one check', () => {
    const at = (type: string, id: string, appointment: string, start: string) => [
      msh(type, id),
      SCH.replace('APT-1', appointment).replace('20240610093000', start),
      PID,
      delta,
    ];

    it('keep the check when one of them is cancelled; it goes with the last one', async () => {
      const store = new InMemoryPatientInsuranceStore();
      const [shared] = checksOf(await run(at('SIU^S12', 'S1', 'APT-A', '20240610100000'), store));
      expect(checksOf(await run(at('SIU^S12', 'S2', 'APT-B', '20240610150000'), store))[0]?.idempotencyKey).toBe(shared?.idempotencyKey);
      expect((await run(at('SIU^S15', 'S3', 'APT-A', '20240610100000'), store)).outcome).toMatchObject({ kind: 'cancel', appointmentId: 'APT-A', keys: [] });
      expect((await run(at('SIU^S15', 'S4', 'APT-B', '20240610150000'), store)).outcome).toMatchObject({ kind: 'cancel', appointmentId: 'APT-B', keys: [shared?.idempotencyKey] });
    });

    it('keep the check when one of them moves to another day; it goes when the other moves too', async () => {
      const store = new InMemoryPatientInsuranceStore();
      const [shared] = checksOf(await run(at('SIU^S12', 'S1', 'APT-A', '20240610100000'), store));
      await run(at('SIU^S12', 'S2', 'APT-B', '20240610150000'), store);
      const moved = await run(at('SIU^S13', 'S3', 'APT-A', '20240612100000'), store);
      expect(moved.outcome).toMatchObject({ kind: 'reschedule', appointmentId: 'APT-A', replacedKeys: [] });
      expect(checksOf(moved)[0]?.idempotencyKey).not.toBe(shared?.idempotencyKey);
      expect((await run(at('SIU^S14', 'S4', 'APT-B', '20240611150000'), store)).outcome).toMatchObject({ replacedKeys: [shared?.idempotencyKey] });
    });
  });

  it('lets a store failure through as a throw, not a reject outcome: the listener answers it (AR, or no ACK for an outage: mllp-listener.test)', async () => {
    const failing: PatientInsuranceStore = {
      get: async () => undefined,
      put: async () => {
        throw new Error('disk full');
      },
    };
    await expect(run([msh('SIU^S12'), SCH, PID, delta], failing)).rejects.toThrow('disk full');
  });
});

describe('merges (ADT^A40, A34, A47)', () => {
  const delta = segment('IN1', { 1: '1', 3: 'CDCA1', 4: 'Delta Dental of California', 17: 'SEL', 36: 'D-1' });
  const metlife = segment('IN1', { 1: '1', 3: '65978', 4: 'MetLife', 17: 'SEL', 36: 'ML-1' });
  const pid = (id: string) => `PID|1||${id}^^^SC^MR||DOE^JANE^Q||19800102|F`;
  const key = (id: string) => ({ facility: 'BSD-MAIN', identifier: { system: 'SC', value: id } });
  const booking = (id: string, patient: string, appointment = 'APT-1', ...rest: string[]) => [msh('SIU^S12', id), SCH.replace('APT-1', appointment), pid(patient), ...rest];
  /** An A40 of one or more patient groups: PID-3 the survivor, MRG-1 the prior patient merged into it. */
  const a40 = (id: string, ...pairs: Array<[survivor: string, prior: string]>) => [
    msh('ADT^A40^ADT_A39', id),
    'EVN|A40|20240501',
    ...pairs.flatMap(([survivor, prior]) => [pid(survivor), `MRG|${prior}^^^SC^MR`]),
  ];

  it('gives the survivor the prior patient\'s insurance and appointments, and forwards a later message under the prior number', async () => {
    const store = new InMemoryPatientInsuranceStore();
    const [booked] = checksOf(await run(booking('S1', 'P-OLD', 'APT-1', delta), store));
    const merged = await run(a40('M1', ['P-NEW', 'P-OLD']), store);
    expect(merged.ackCode).toBe('AA');
    expect(merged.outcome).toMatchObject({
      kind: 'merge',
      merges: [{ priorKey: key('P-OLD'), patientKey: key('P-NEW'), appointmentIds: ['APT-1'], insuranceFrom: 'prior', changed: true }],
    });
    const [merge] = merged.outcome.kind === 'merge' ? merged.outcome.merges : [];
    // The record the pipeline builds the moved appointment's checks again from: the survivor's, with the prior's plan.
    expect(merge?.record.patient.identifiers).toEqual([{ value: 'P-NEW', system: 'SC', type: 'MR' }]);
    expect(merge?.record.coverages.map((c) => c.subscriber.memberId)).toEqual(['D-1']);
    expect(merge?.record.appointments.map((a) => a.appointmentId)).toEqual(['APT-1']);
    expect(await store.get(key('P-OLD'))).toMatchObject({ coverages: [], appointments: [], mergedInto: key('P-NEW') });

    // A booking for the survivor without IN1 is verified with the prior's plan, under the survivor.
    const [survivors] = checksOf(await run(booking('S2', 'P-NEW', 'APT-2'), store));
    expect(survivors?.subscriber.memberId).toBe('D-1');
    expect(survivors?.patient.identifiers).toEqual([{ value: 'P-NEW', system: 'SC', type: 'MR' }]);
    expect(survivors?.idempotencyKey).not.toBe(booked?.idempotencyKey);
    // One made under the prior number and delivered after the merge is the survivor's: no check under the dead number.
    const late = await run(booking('S3', 'P-OLD', 'APT-3'), store);
    expect(late.outcome).toMatchObject({ kind: 'book', patientKey: key('P-NEW') });
    expect(checksOf(late).map((c) => c.patient.identifiers[0]?.value)).toEqual(['P-NEW']);
    // As is a cancellation: the appointment is found in the survivor's record.
    expect((await run([msh('SIU^S15', 'S4'), SCH.replace('APT-1', 'APT-3'), pid('P-OLD')], store)).outcome).toMatchObject({ kind: 'cancel', patientKey: key('P-NEW'), keys: [] });
    expect((await store.get(key('P-NEW')))?.appointments.map((a) => a.appointmentId)).toEqual(['APT-1', 'APT-2']);
  });

  it('keeps the insurance the survivor stated, and unites both patients\' appointments', async () => {
    const store = new InMemoryPatientInsuranceStore();
    await run(booking('S1', 'P-OLD', 'APT-1', delta), store);
    await run(booking('S2', 'P-NEW', 'APT-2', metlife), store);
    const merged = await run(a40('M1', ['P-NEW', 'P-OLD']), store);
    expect(merged.outcome).toMatchObject({ kind: 'merge', merges: [{ appointmentIds: ['APT-1'], insuranceFrom: 'survivor', changed: false }] });
    const survivor = await store.get(key('P-NEW'));
    expect(survivor?.coverages.map((c) => c.subscriber.memberId)).toEqual(['ML-1']);
    expect(survivor?.appointments.map((a) => a.appointmentId)).toEqual(['APT-2', 'APT-1']);
  });

  it('merges every patient group of an A40, each prior into its own survivor', async () => {
    const store = new InMemoryPatientInsuranceStore();
    await run(booking('S1', 'P-OLD-1', 'APT-1', delta), store);
    await run(booking('S2', 'P-OLD-2', 'APT-2', metlife), store);
    const merged = await run(a40('M1', ['P-NEW-1', 'P-OLD-1'], ['P-NEW-2', 'P-OLD-2']), store);
    expect(merged.outcome).toMatchObject({
      kind: 'merge',
      merges: [
        { priorKey: key('P-OLD-1'), patientKey: key('P-NEW-1'), appointmentIds: ['APT-1'] },
        { priorKey: key('P-OLD-2'), patientKey: key('P-NEW-2'), appointmentIds: ['APT-2'] },
      ],
    });
    expect((await store.get(key('P-NEW-1')))?.coverages.map((c) => c.subscriber.memberId)).toEqual(['D-1']);
    expect((await store.get(key('P-NEW-2')))?.coverages.map((c) => c.subscriber.memberId)).toEqual(['ML-1']);
  });

  it('reads the prior patient of a 2.3 A34 and of an A47 (a change of identifier) the same way', async () => {
    for (const [type, version] of [['ADT^A34^ADT_A30', '2.3'], ['ADT^A47^ADT_A30', '2.5.1']] as const) {
      const store = new InMemoryPatientInsuranceStore();
      await run(booking('S1', 'P-OLD', 'APT-1', delta), store);
      const merged = await run([msh(type, 'M1', 'BSD-MAIN', version), pid('P-NEW'), 'MRG|P-OLD^^^SC^MR'], store);
      expect(merged.outcome).toMatchObject({ kind: 'merge', merges: [{ priorKey: key('P-OLD'), patientKey: key('P-NEW'), appointmentIds: ['APT-1'], insuranceFrom: 'prior' }] });
    }
  });

  it('takes a prior never seen (AA, nothing to move) and keeps the survivor as an ADT would', async () => {
    const store = new InMemoryPatientInsuranceStore();
    const merged = await run(a40('M1', ['P-NEW', 'P-UNSEEN']), store);
    expect(merged.ackCode).toBe('AA');
    expect(merged.outcome).toMatchObject({ kind: 'merge', merges: [{ appointmentIds: [], insuranceFrom: 'none', changed: true }] });
    expect(await store.get(key('P-NEW'))).toMatchObject({ patient: { lastName: 'DOE', identifiers: [{ value: 'P-NEW' }] }, coverages: [], insuranceKnown: false });
  });

  it('changes nothing for a patient merged into itself, nor for a merge resent under another control id', async () => {
    const store = new InMemoryPatientInsuranceStore();
    await run(booking('S1', 'P-1', 'APT-1', delta), store);
    const before = await store.get(key('P-1'));
    expect((await run(a40('M1', ['P-1', 'P-1']), store)).outcome).toEqual({ kind: 'merge', merges: [] });
    expect(await store.get(key('P-1'))).toEqual(before);
    expect(store.size).toBe(1);

    await run(a40('M2', ['P-NEW', 'P-1']), store);
    const survivor = await store.get(key('P-NEW'));
    expect((await run(a40('M3', ['P-NEW', 'P-1']), store)).outcome).toEqual({ kind: 'merge', merges: [] });
    expect(await store.get(key('P-NEW'))).toEqual(survivor);
  });

  it('answers AE naming MRG-1 when a patient group has no prior identifier, and changes nothing', async () => {
    const store = new InMemoryPatientInsuranceStore();
    await run(booking('S1', 'P-OLD', 'APT-1', delta), store);
    for (const group of [[pid('P-NEW'), 'MRG|'], [pid('P-NEW'), 'PV1|1|O']]) {
      const result = await run([msh('ADT^A40^ADT_A39', 'M1'), 'EVN|A40|20240501', ...group], store);
      expect(result.ackCode).toBe('AE');
      expect(ackFor(result)[0]?.text.split('\r').filter((s) => s.startsWith('ERR|'))).toEqual([
        'ERR||MRG^1^1^1|101^Required field missing^HL70357|E||||MRG-1: prior patient identifier missing',
      ]);
    }
    expect(store.size).toBe(1);
  });

  it('reads the prior patient where a dialect says its PMS writes it', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'hl7-mappings-'));
    try {
      await cp(path.join(mappingsDir(), 'hl7'), path.join(dir, 'hl7'), { recursive: true });
      const dialect = { name: 'oldpms', description: 'writes the prior patient in ZMG-2', sendingApplications: ['SMILECLOUD'], merge: { priorIdentifiers: ['ZMG-2'] } };
      await writeFile(path.join(dir, 'hl7', 'dialects', 'oldpms.json'), JSON.stringify(dialect));
      const store = new InMemoryPatientInsuranceStore();
      const options = { mappings: loadHl7Mappings(dir), routing, store, receivedAt };
      await handleHl7Message(booking('S1', 'P-OLD', 'APT-1', delta).join('\r'), options);
      const merged = await handleHl7Message([msh('ADT^A40^ADT_A39', 'M1'), pid('P-NEW'), 'MRG|P-ELSE^^^SC^MR', 'ZMG|1|P-OLD^^^SC^MR'].join('\r'), options);
      expect(merged.outcome).toMatchObject({ kind: 'merge', merges: [{ priorKey: key('P-OLD'), appointmentIds: ['APT-1'] }] });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('message types and headers', () => {
  it('refuses a receivedAt that is not an instant with offset, as a fault of the caller, whatever the message', async () => {
    for (const bad of ['yesterday', '2024-05-01T12:00:00', '']) {
      const options = { mappings, routing, store: new InMemoryPatientInsuranceStore(), receivedAt: bad };
      await expect(handleHl7Message([msh('SIU^S18'), SCH, PID].join('\r'), options)).rejects.toThrow('receivedAt must be an ISO 8601 date-time with offset');
    }
  });

  it('acknowledges and ignores other SIU and ADT events', async () => {
    expect((await run([msh('SIU^S18'), SCH, PID])).outcome).toEqual({ kind: 'ignore', reason: 'SIU^S18 does not change eligibility' });
    expect((await run([msh('ADT^A03'), PID])).outcome).toEqual({ kind: 'ignore', reason: 'ADT^A03 does not change eligibility' });
  });

  it('reads a message type and event written in lower case as the profile names them; the ACK echoes the event as sent', async () => {
    const delta = segment('IN1', { 1: '1', 3: 'CDCA1', 4: 'Delta Dental of California', 17: 'SEL', 36: 'D-1' });
    const booked = await run([msh('siu^s12^siu_s12'), SCH, PID, delta]);
    expect(booked.ackCode).toBe('AA');
    expect(checksOf(booked)[0]?.source).toMatchObject({ kind: 'hl7', messageType: 'SIU^S12' });
    expect(ackFor(booked)[0]?.text.split('\r')[0]?.split('|')[8]).toBe('ACK^s12^ACK');
    expect((await run([msh('Siu^S15'), SCH, PID])).outcome).toMatchObject({ kind: 'cancel', appointmentId: 'APT-1' });
    expect((await run([msh('siu^s18'), SCH, PID])).outcome).toEqual({ kind: 'ignore', reason: 'SIU^S18 does not change eligibility' });
    expect((await run([msh('adt^a08'), PID, delta])).outcome).toMatchObject({ kind: 'record', coverageCount: 1 });
    const unknown = await run([msh('orm^o01'), SCH, PID]);
    expect(unknown.ackCode).toBe('AR');
    expect(unknown.outcome).toEqual({ kind: 'reject', problems: [expect.objectContaining({ field: 9, code: 200, reason: 'message type orm is not supported' })] });
  });

  it.each([
    ['ORM^O01', '2.5.1', 'MSH-9: message type ORM is not supported', 200],
    ['SIU^S12', '2.2', 'MSH-12: version 2.2 is not supported (2.3 to 2.8)', 203],
    ['SIU^S12', '', 'MSH-12: version missing', 101],
    ['SIU', '2.5.1', 'MSH-9: message type or trigger event missing', 101],
  ])('rejects %s v%j with AR', async (type, version, text, code) => {
    const result = await run([msh(type, 'C1', 'BSD-MAIN', version), SCH, PID]);
    expect(result.ackCode).toBe('AR');
    const [problem] = result.outcome.kind === 'reject' ? result.outcome.problems : [];
    expect(`${problem?.segment}-${problem?.field}: ${problem?.reason}`).toBe(text);
    expect(problem?.code).toBe(code);
  });

  it('rejects a training or debugging message with AR 202 at MSH-11, unless the profile takes its processing id', async () => {
    const withProcessingId = (id: string) => msh('SIU^S12').replace('|P|2.5.1', `|${id}|2.5.1`);
    for (const id of ['T', 'D^A', 't']) {
      const result = await run([withProcessingId(id), SCH, PID]);
      expect(result.ackCode).toBe('AR');
      expect(result.outcome).toEqual({
        kind: 'reject',
        problems: [expect.objectContaining({ segment: 'MSH', field: 11, code: 202, reason: `processing id ${id.charAt(0).toUpperCase()} is not accepted here (P)` })],
      });
      // The ACK echoes what was sent, so the sender's training system sees its own id back.
      expect(ackFor(result)[0]?.text.split('\r')[0]?.split('|')[10]).toBe(id);
    }
    const training = { ...mappings, defaultProfile: { ...mappings.defaultProfile, processingIds: ['T'] } };
    const taken = await handleHl7Message([withProcessingId('T'), SCH, PID].join('\r'), { mappings: training, routing, resolver: fixturePayers, receivedAt, store: new InMemoryPatientInsuranceStore() });
    expect(taken.ackCode).toBe('AA');
    expect((await handleHl7Message([withProcessingId('P'), SCH, PID].join('\r'), { mappings: training, routing, receivedAt, store: new InMemoryPatientInsuranceStore() })).ackCode).toBe('AR');
  });

  it("uses a message with no processing id as the profile's first, with a warning at MSH-11", async () => {
    const result = await run([msh('SIU^S12').replace('|P|2.5.1', '||2.5.1'), SCH, PID]);
    expect(result.ackCode).toBe('AA');
    expect(result.warnings).toContainEqual(expect.objectContaining({ segment: 'MSH', field: 11, code: 101, ackCode: 'AA', reason: 'processing id missing: taken as P' }));
  });

  it('accepts every version from 2.3 to 2.8', async () => {
    for (const version of ['2.3', '2.3.1', '2.4', '2.5', '2.5.1', '2.6', '2.7', '2.7.1', '2.8', '2.8.1', '2.8.2']) {
      expect((await run([msh('SIU^S18', 'C1', 'BSD-MAIN', version), SCH, PID])).ackCode).toBe('AA');
    }
  });
});
