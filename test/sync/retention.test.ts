import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { loadClinicRouting } from '../../src/adapters/clinic-routing';
import { loadHl7Mappings } from '../../src/adapters/hl7';
import { createEligibilitySync } from '../../src/service/eligibility-sync';
import { createLogger } from '../../src/service/logger';
import { ingestHl7 } from '../../src/sync/ingest-hl7';
import type { CheckRow, JobStore } from '../../src/sync/job-store';
import { pruneFinished } from '../../src/sync/prune';
import { Database } from '../../src/sync/sqlite-driver';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { PayerCatalog } from '../../src/verification/payer-catalog';
import { segment } from '../adapters/hl7/segment';
import { checkRow, NOW } from './job-store-contract';
import { until } from './harness';

/** What the store keeps, and for how long: finished work goes once the retention period is over. */
let dataDir: string;
beforeEach(() => {
  dataDir = mkdtempSync(path.join(tmpdir(), 'elig-retention-'));
});
afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

const DAY = 86_400_000;
const body = (i: number) => ({ status: 'Completed', correlationId: `corr-${i}`, benefits: 'x'.repeat(12_000) });

/** A day's work for `patients` patients, done: an HL7 message handled, an appointment, its check written with its body. */
function dayOfWork(at: Date, patients: number, day: number): { messages: string[]; checks: CheckRow[]; appointments: string[] } {
  const when = at.toISOString();
  const dateOfService = when.slice(0, 10);
  const checks = Array.from({ length: patients }, (_, p) => {
    const key = `elig_${day}_${p}`;
    const row = checkRow(key, { state: 'written', dueAt: undefined, createdAt: when, updatedAt: when, result: body(p), resultAt: when, written: { requestId: 'r', responseId: 's' } });
    return {
      ...row,
      patientKey: `hl7|BSD|MR|${p}`,
      check: {
        ...row.check,
        dateOfService,
        source: { kind: 'hl7' as const, messageControlId: `MSG-${day}-${p}`, messageType: 'SIU^S12', receivedAt: when },
        subscriber: { ...row.check.subscriber, memberId: `M${p}` },
      },
    };
  });
  return { messages: checks.map((c) => c.check.source.kind === 'hl7' ? c.check.source.messageControlId : ''), checks, appointments: checks.map((c) => `hl7|BSD|APT-${c.key}`) };
}

it('stops growing once pruning runs: a SQLite file taking the same work every day keeps its size past the retention period', async () => {
  const file = path.join(dataDir, 'dental-elig.sqlite');
  const store = SqliteJobStore.open(dataDir);
  const retentionDays = 10;
  const pages: number[] = [];
  try {
    for (let day = 0; day < 40; day++) {
      const at = new Date(Date.parse('2026-01-01T15:00:00.000Z') + day * DAY);
      const work = dayOfWork(at, 40, day);
      await store.transaction(async (tx) => {
        for (const [i, dedupeKey] of work.messages.entries()) {
          await tx.addMessage({ kind: 'hl7', dedupeKey, receivedAt: at.toISOString(), raw: `MSH|^~\\&|PMS|BSD|||||SIU^S12|${dedupeKey}|P|2.5\rPID|1||${i}^^^BSD^MR||DOE^JANE`.padEnd(3000, ' '), status: 'handled' });
        }
        for (const [i, row] of work.checks.entries()) {
          await tx.putCheck(row);
          await tx.putAppointment({ key: work.appointments[i] ?? '', patientKey: row.patientKey, dateOfService: row.check.dateOfService, status: 'booked', checkKeys: [row.key], basis: {}, updatedAt: at.toISOString() });
        }
      });
      // The sync's prune, as it runs each hour: what finished more than the retention period ago goes.
      await pruneFinished(store, new Date(at.getTime() - retentionDays * DAY).toISOString());
      const reader = new Database(file, { readonly: true });
      pages.push(reader.pragma('page_count', { simple: true }) as number);
      reader.close();
    }
    const counts = await store.counts(NOW);
    // The retention period's days of work, and each patient's plan's latest check, whatever its age (the one a dropped plan's Coverage ends through).
    expect(counts.checks).toEqual({ written: 40 * (retentionDays + 1) });
    expect((await store.listAppointments()).length).toBe(40 * (retentionDays + 1));
    expect(counts.messages).toEqual({ 'hl7:handled': 40 * (retentionDays + 1) });
  } finally {
    await store.close();
  }
  // SQLite reuses the pages freed (no VACUUM): past the retention period the file grows by no more than its
  // b-trees settling (a few pages, 2,267 to 2,277 here), then by none, where it grew ~190 pages a day unpruned.
  const atRetention = pages[retentionDays + 1] ?? 0;
  expect(Math.max(...pages)).toBeLessThan(atRetention * 1.01);
  expect(new Set(pages.slice(25))).toEqual(new Set([pages[39]]));
});

describe('the sync prunes the store', () => {
  const catalog = new PayerCatalog({ syncedAt: '2026-11-24T00:00:00Z', payers: [], portals: [] });
  const OLD = '2026-05-01T09:00:00.000Z';

  /** Old work, finished: two HL7 messages handled (their control ids name the patient, as some PMSs make them), a check cancelled and its appointment. */
  async function oldWork(store: JobStore): Promise<void> {
    await store.transaction(async (tx) => {
      for (const dedupeKey of ['BSD|SMITH-JOHN-19800101', 'BSD|DOE-JANE-19900202']) {
        await tx.addMessage({ kind: 'hl7', dedupeKey, receivedAt: OLD, raw: `MSH|...|${dedupeKey}\rPID|1||1^^^BSD^MR||SMITH^JOHN`, status: 'handled' });
      }
      await tx.addMessage({ kind: 'hl7', dedupeKey: 'BSD|dead', receivedAt: OLD, raw: 'MSH|...', status: 'dead' });
      const row = checkRow('elig_smith_john', { state: 'cancelled', dueAt: undefined, updatedAt: OLD });
      await tx.putCheck({ ...row, check: { ...row.check, dateOfService: OLD.slice(0, 10) } });
      await tx.putAppointment({ key: 'hl7|BSD|APT-SMITH', patientKey: 'hl7|BSD|MR|1', dateOfService: OLD.slice(0, 10), status: 'cancelled', checkKeys: ['elig_smith_john'], basis: {}, updatedAt: OLD });
      // Another patient's plan's latest check: kept for the day the PMS drops the plan, its benefits cut.
      const kept = checkRow('elig_doe_jane', { state: 'written', dueAt: undefined, updatedAt: OLD, resultAt: OLD, result: { status: 'Completed', correlationId: 'corr-doe', result: { benefits: [] } }, written: { requestId: 'r', responseId: 's' } });
      await tx.putCheck({ ...kept, patientKey: 'hl7|BSD|MR|2', check: { ...kept.check, dateOfService: OLD.slice(0, 10), source: { kind: 'hl7', messageControlId: 'DOE-1', messageType: 'SIU^S12', receivedAt: OLD }, subscriber: { ...kept.check.subscriber, memberId: 'M-DOE' } } });
    });
  }

  it('prunes a while after start and again each interval, counting what went in /metrics and logging counts alone; a store failing is warned of and tried again', async () => {
    const lines: string[] = [];
    const logger = createLogger({ level: 'debug', destination: { write: (line: string) => lines.push(line) } as unknown as NodeJS.WritableStream });
    const store = SqliteJobStore.open(dataDir);
    await oldWork(store);
    const prune = store.prune.bind(store);
    let runs = 0;
    store.prune = async (options) => {
      // The first run's first batch fails as a disk would: the sync goes on, and the next run prunes.
      if (runs++ === 0) throw Object.assign(new Error('disk I/O error'), { code: 'SQLITE_IOERR' });
      return prune(options);
    };
    const sync = createEligibilitySync({
      store,
      dataDir,
      catalog,
      service: { baseUrl: 'http://127.0.0.1:1', apiKey: 'k' },
      fhir: { baseUrl: 'http://127.0.0.1:1/fhir' },
      settings: { pruneIntervalMs: 10 },
      now: () => new Date(NOW),
      logger,
    });
    try {
      await sync.start();
      const pruned = await until('a prune logged', async () => lines.find((line) => line.includes('pruned the job store')));
      const failed = lines.find((line) => line.includes('pruning the job store failed'));
      expect(failed && JSON.parse(failed)).toMatchObject({ level: 40, err: 'disk I/O error' });
      const said = JSON.parse(pruned) as Record<string, unknown>;
      expect(said).toMatchObject({ level: 30, messages: 2, checks: 1, appointments: 1, bodies: 1, retentionDays: 90 });
      expect(Object.keys(said).sort()).toEqual(['appointments', 'bodies', 'checks', 'level', 'messages', 'msg', 'retentionDays', 'service', 'time']);
      for (const line of lines) expect(line).not.toMatch(/SMITH|DOE|elig_smith/);
      const metrics = await sync.metrics.text();
      expect(metrics).toContain('dental_elig_pruned_total{what="messages"} 2');
      expect(metrics).toContain('dental_elig_pruned_total{what="checks"} 1');
      expect(metrics).toContain('dental_elig_pruned_total{what="appointments"} 1');
      expect(metrics).toContain('dental_elig_pruned_bodies_total 1');
      // It runs on, each interval, finding nothing more: no line of its own then.
      const before = runs;
      await until('another prune', async () => runs > before + 3);
      expect(lines.filter((line) => line.includes('pruned the job store'))).toHaveLength(1);
      expect((await store.listMessages()).map((m) => m.dedupeKey)).toEqual(['BSD|dead']);
    } finally {
      await sync.stop();
      await store.close();
    }
    // Stopped, it prunes no more.
    const atStop = runs;
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(runs).toBe(atStop);
  });

  it('refuses a retention period shorter than the freshness window, naming the setting and why', () => {
    const create = (settings: { retentionDays: number; freshnessDays?: number }) => () =>
      createEligibilitySync({ dataDir, catalog, service: { baseUrl: 'http://127.0.0.1:1', apiKey: 'k' }, fhir: { baseUrl: 'http://127.0.0.1:1/fhir' }, settings });
    expect(create({ retentionDays: 5 })).toThrow(/^settings\.retentionDays: must be at least freshnessDays \(7\): a fresh result kept serves another appointment of its coverage$/);
    expect(create({ retentionDays: 20, freshnessDays: 30 })).toThrow(/^settings\.retentionDays: must be at least freshnessDays \(30\)/);
    expect(create({ retentionDays: 0 })).toThrow(/^settings\.retentionDays: /);
    // Kept for good is a hundred years: a cutoff before the dates JavaScript holds threw in the prune's timer, and serve stopped.
    expect(create({ retentionDays: 1e9 })).toThrow(/^settings\.retentionDays: must be at most 36500 \(a hundred years\)$/);
  });
});

it('keeps a cancellation that overtook its booking, which names no visit, for the retention period: the booking that comes later books nothing', async () => {
  const store = SqliteJobStore.open(dataDir);
  const options = { mappings: loadHl7Mappings(), routing: loadClinicRouting(), now: () => new Date(NOW), policy: { freshnessMs: 7 * DAY, reverifyLeadMs: DAY } };
  const msh = (type: string, id: string, sentAt: string) => `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|${sentAt}||${type}|${id}|P|2.5.1`;
  const sch = 'SCH|APT-OV^SC||||||||||^^^20261210093000';
  const pid = 'PID|1||P-OV^^^SC^MR||DOE^JANE||19800102|F';
  try {
    await ingestHl7(store, [msh('SIU^S15^SIU_S12', 'OV2', '20261123100000'), sch, pid].join('\r'), options);
    // The sync's prune, an hour on: the cancellation is not 90 days old.
    await pruneFinished(store, new Date(Date.parse(NOW) + 3_600_000 - 90 * DAY).toISOString());
    // The booking, sent before the cancellation, arrives after the prune (an engine resending what it could not deliver).
    const booking = await ingestHl7(store, [msh('SIU^S12^SIU_S12', 'OV1', '20261123090000'), sch, pid, segment('IN1', { 1: '1', 3: '64246', 4: 'Guardian', 17: 'SEL', 36: 'DD1234567' })].join('\r'), options);
    expect(booking.created).toEqual([]);
    expect(await store.listChecks()).toEqual([]);
    expect((await store.listAppointments()).map((a) => a.status)).toEqual(['cancelled']);
    // Once older than the retention period, it goes as any appointment over does.
    expect(await pruneFinished(store, new Date(Date.parse(NOW) + 91 * DAY - 90 * DAY).toISOString())).toMatchObject({ appointments: 1 });
  } finally {
    await store.close();
  }
});
