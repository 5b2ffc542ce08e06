import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { parseHl7Message, readMessageHeader } from '../../../src/adapters/hl7';
import { EligibilityCheck } from '../../../src/domain';
import { FIXTURE_DIR, fixtureNames, observed, runFixture, type ExpectedMessage, type RunMessage } from './corpus';

/**
 * Golden files: every fixtures/hl7/<name>.hl7 against <name>.expected.json, message by message.
 * Then rules that must hold across the whole corpus, whatever a single fixture expects.
 */
const names = fixtureNames();
const runs = new Map<string, RunMessage[]>();

beforeAll(async () => {
  for (const name of names) runs.set(name, await runFixture(name));
});

const all = () => [...runs.values()].flat();
const checksOf = (run: RunMessage) => ('checks' in run.result.outcome ? run.result.outcome.checks : []);

describe('each fixture gives its expected output', () => {
  it.each(names)('%s', (name) => {
    const expected = JSON.parse(readFileSync(path.join(FIXTURE_DIR, `${name}.expected.json`), 'utf8')) as {
      description: string;
      messages: ExpectedMessage[];
    };
    expect(expected.description).toMatch(/\w/);
    expect((runs.get(name) ?? []).map(observed)).toEqual(expected.messages);
  });
});

describe('the corpus', () => {
  it('has at least 25 messages, from a dental PMS with IN1 in SIU, an EHR with insurance only in ADT and an X12-code sender', () => {
    expect(all().length).toBeGreaterThanOrEqual(25);
    const from = (app: string) => all().filter((r) => readMessageHeader(r.text)?.sendingApplication === app);
    expect(from('MOLARPMS').some((r) => r.text.includes('\rIN1|') && r.result.outcome.kind === 'book')).toBe(true);
    const ehr = from('CAREPOINT');
    expect(ehr.filter((r) => r.result.outcome.kind === 'book').every((r) => !r.text.includes('\rIN1|') && checksOf(r).length <= 1)).toBe(true);
    expect(ehr.some((r) => r.result.outcome.kind === 'record')).toBe(true);
    const x12 = from('CUSPDESK').flatMap(checksOf).map((c) => c.subscriber.relationship);
    expect(new Set(x12)).toEqual(new Set(['self', 'spouse', 'child']));
  });

  it('covers every event kind, acknowledgement code and version 2.3 to 2.8', () => {
    expect(new Set(all().map((r) => r.result.outcome.kind))).toEqual(new Set(['book', 'reschedule', 'cancel', 'record', 'merge', 'ignore', 'reject']));
    expect(new Set(all().flatMap((r) => r.acks.map((a) => a.code)))).toEqual(new Set(['AA', 'AE', 'AR', 'CA']));
    const versions = new Set(all().map((r) => readMessageHeader(r.text)?.version));
    for (const v of ['2.3', '2.4', '2.5', '2.5.1', '2.6', '2.7', '2.8']) expect(versions).toContain(v);
    const events = new Set(all().map((r) => `${readMessageHeader(r.text)?.messageCode}^${readMessageHeader(r.text)?.triggerEvent}`));
    for (const e of ['SIU^S12', 'SIU^S13', 'SIU^S14', 'SIU^S15', 'SIU^S16', 'SIU^S17', 'SIU^S26', 'ADT^A04', 'ADT^A08', 'ADT^A28', 'ADT^A31', 'ADT^A40']) expect(events).toContain(e);
  });

  it('covers CR, LF and CRLF files, batches, file batches and several messages per file', () => {
    const raw = names.map((n) => readFileSync(path.join(FIXTURE_DIR, `${n}.hl7`), 'latin1'));
    expect(raw.some((t) => t.includes('\r\n'))).toBe(true);
    expect(raw.some((t) => t.includes('\n') && !t.includes('\r'))).toBe(true);
    expect(raw.some((t) => t.includes('\r') && !t.includes('\n'))).toBe(true);
    expect(raw.some((t) => t.startsWith('BHS'))).toBe(true);
    expect(raw.some((t) => t.startsWith('FHS'))).toBe(true);
    expect([...runs.values()].some((r) => r.length >= 3)).toBe(true);
  });

  it('makes only checks that validate as EligibilityCheck, one per coverage, each key once a message', () => {
    const checks = all().flatMap(checksOf);
    expect(checks.length).toBeGreaterThan(20);
    for (const check of checks) expect(EligibilityCheck.safeParse(check).success).toBe(true);
    for (const run of all()) {
      const orders = checksOf(run).map((c) => c.coverage.order);
      expect(new Set(orders).size).toBe(orders.length);
      const keys = checksOf(run).map((c) => c.idempotencyKey);
      expect(new Set(keys).size).toBe(keys.length);
    }
  });

  it('gives equal keys exactly to checks with the same clinic, patient, payer, member and date', () => {
    const checks = all().flatMap(checksOf);
    const identity = (c: EligibilityCheck) =>
      JSON.stringify([c.clinicId, c.patient.identifiers[0], c.coverage.payer.id ?? c.coverage.payer.name, c.subscriber.memberId, c.dateOfService]);
    for (const a of checks) {
      for (const b of checks) expect(a.idempotencyKey === b.idempotencyKey).toBe(identity(a) === identity(b));
    }
  });

  it('answers every message with ACKs that swap sender and receiver and echo its control id', () => {
    for (const run of all()) {
      const header = readMessageHeader(run.text);
      expect(run.acks.length).toBeGreaterThan(0);
      for (const { code, text } of run.acks) {
        const ack = parseHl7Message(text);
        expect(ack.first('MSA')?.value(1)).toBe(code);
        expect(ack.first('MSA')?.value(2)).toBe(header?.controlId ?? '');
        if (header) {
          expect(ack.header.rawField(3)).toBe(header.receivingApplication);
          expect(ack.header.rawField(5)).toBe(header.sendingApplication);
          expect(ack.header.value(10)).not.toBe(header.controlId);
        }
        // A commit accept says the message was kept; the errors in its data are the application ACK's to carry.
        const errors = run.result.outcome.kind === 'reject' ? run.result.outcome.problems.length : 0;
        const problems = code === 'CA' ? 0 : errors + (run.result.warnings?.length ?? 0);
        expect(ack.all('ERR').length).toBe(problems);
      }
    }
    const ackIds = all().flatMap((r) => r.acks.map((a) => a.controlId));
    expect(new Set(ackIds).size).toBe(ackIds.length);
  });

  it('uses a message with warnings (AA), each an ERR of severity W, and every check it makes carries them', () => {
    const warned = all().filter((r) => r.result.outcome.kind !== 'reject' && (r.result.warnings?.length ?? 0) > 0);
    expect(warned.length).toBeGreaterThanOrEqual(3);
    for (const run of warned) {
      const application = run.acks.at(-1);
      expect(application?.code).toBe('AA');
      const errs = parseHl7Message(application?.text ?? '').all('ERR');
      expect(errs.map((e) => e.value(4))).toEqual(errs.map(() => 'W'));
      const lines = (run.result.warnings ?? []).map((w) => `${w.segment}${w.sequence > 1 ? `[${w.sequence}]` : ''}-${w.field}`);
      for (const check of checksOf(run)) expect((check.warnings ?? []).map((w) => w.split(/[.:]/)[0])).toEqual(lines);
    }
    const reasons = warned.flatMap((r) => r.result.warnings ?? []).map((w) => `${w.segment}-${w.field}`);
    for (const field of ['MSH-10', 'AIP-3', 'PV1-7', 'AIG-3']) expect(reasons).toContain(field);
  });

  it('knows a message without MSH-10 by a sha256 of its content: its checks carry it, its ACK leaves MSA-2 empty', () => {
    const unnamed = all().filter((r) => r.result.header?.controlId === '' && r.result.outcome.kind !== 'reject');
    expect(unnamed.length).toBeGreaterThanOrEqual(2);
    for (const run of unnamed) {
      expect(run.result.messageControlId).toMatch(/^sha256:[0-9a-f]{64}$/);
      for (const check of checksOf(run)) expect(check.source).toMatchObject({ messageControlId: run.result.messageControlId });
      for (const ack of run.acks) expect(parseHl7Message(ack.text).first('MSA')?.value(2)).toBe('');
    }
    const named = all().filter((r) => r.result.header?.controlId);
    for (const run of named) expect(run.result.messageControlId).toBe(run.result.header?.controlId);
  });

  it('never puts patient data into an error', () => {
    const personal = new Set<string>();
    for (const run of all()) {
      let message;
      try {
        message = parseHl7Message(run.text);
      } catch {
        continue;
      }
      const add = (segment: string, field: number, ...components: number[]) => {
        for (const s of message.all(segment)) for (const c of components) personal.add(s.value(field, c));
      };
      add('PID', 5, 1, 2);
      add('PID', 7, 1);
      add('IN1', 16, 1, 2);
      add('IN1', 18, 1);
      add('IN1', 36, 1);
      add('IN1', 49, 1);
      add('IN2', 61, 1);
      add('ZIN', 2, 1);
    }
    const values = [...personal].filter((v) => v.length >= 3);
    expect(values.length).toBeGreaterThan(30);
    const rejected = all().filter((r) => r.result.outcome.kind === 'reject');
    expect(rejected.length).toBeGreaterThanOrEqual(10);
    const warned = all().filter((r) => (r.result.warnings?.length ?? 0) > 0);
    for (const run of [...rejected, ...warned]) {
      const texts = [
        ...run.acks.map((a) => a.text),
        ...(run.result.outcome.kind === 'reject' ? run.result.outcome.problems.map((p) => p.reason) : []),
        ...(run.result.warnings ?? []).map((p) => p.reason),
        ...checksOf(run).flatMap((c) => c.warnings ?? []),
      ];
      // Whole words, as the log scan matches them: a random ACK control id may hold a short name's letters.
      for (const text of texts) for (const value of values) expect(text).not.toMatch(new RegExp(`(?<![A-Za-z0-9])${escapeRegExp(value)}(?![A-Za-z0-9])`));
    }
  });
});

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
