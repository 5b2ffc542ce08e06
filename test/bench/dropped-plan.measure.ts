import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { PatientInsuranceRecord } from '../../src/domain';
import { projectRoot } from '../../src/mapping-files';
import type { CheckRow, JobStore } from '../../src/sync/job-store';
import { openJobStore } from '../../src/sync/open-store';
import { endDroppedPlans } from '../../src/sync/schedule';
import { startPostgres } from '../support/postgres';
import { checkRow, NOW } from '../sync/job-store-contract';
import { figure, type Measured } from './measure';

/**
 * What a message that drops a plan costs a patient with years of history: `history` checks of the
 * plan the record still lists, each written with a full verification body, and one written check
 * of the plan dropped (its Coverage to end). Each round stores that check afresh, then times
 * endDroppedPlans in the message's transaction, on SQLite and on PostgreSQL (the test cluster,
 * fsync off); a patient with no history beside it is the floor.
 */
const HISTORY = [0, 500];
const ROUNDS = 200;
/** Rounds first, untimed: the JIT warms up on them. */
const WARMUP = 50;
const PATIENT = 'hl7|BSD-MAIN|SC|P-1';

function historyCheck(key: string, memberId: string, dateOfService: string, body: unknown): CheckRow {
  const row = checkRow(key);
  const { check } = row;
  return {
    ...row,
    state: 'written',
    patientKey: PATIENT,
    dueAt: undefined,
    result: body,
    resultAt: NOW,
    written: { requestId: `req-${key}`, responseId: `res-${key}` },
    check: {
      ...check,
      dateOfService,
      // An HL7 patient of one sender: the record speaks for their plans.
      patient: { ...check.patient, identifiers: [{ system: 'SC', type: 'MR', value: 'P-1' }] },
      subscriber: { ...check.subscriber, memberId },
      source: { kind: 'hl7', messageControlId: `M-${key}`, messageType: 'SIU^S12', sendingFacility: 'BSD-MAIN', receivedAt: NOW },
    },
  };
}

async function perDrop(store: JobStore, body: unknown, history: number): Promise<number> {
  const kept = historyCheck('kept', 'KEPT', '2020-01-01', body);
  await store.transaction(async (tx) => {
    for (let i = 0; i < history; i++) {
      const day = new Date(Date.parse('2016-01-04T00:00:00Z') + i * 7 * 86_400_000).toISOString().slice(0, 10);
      await tx.putCheck(historyCheck(`elig_old_${i}`, 'KEPT', day, body));
    }
  });
  const { memberId: _m, ...patient } = kept.check.patient;
  const record: PatientInsuranceRecord = {
    patient,
    coverages: [{ coverage: kept.check.coverage, subscriber: kept.check.subscriber }],
    appointments: [],
    updatedAt: NOW,
    messageControlId: 'M-drop',
  };
  let ms = 0;
  for (let round = 0; round < WARMUP + ROUNDS; round++) {
    await store.transaction((tx) => tx.putCheck(historyCheck('elig_dropped', 'DROPPED', '2026-01-05', body)));
    const start = performance.now();
    const taken = await store.transaction((tx) => endDroppedPlans(tx, PATIENT, record, ['DROPPED'], NOW));
    if (round >= WARMUP) ms += performance.now() - start;
    if (taken.length !== 1) throw new Error(`round ${round} took ${taken.length} checks`);
  }
  return ms / ROUNDS;
}

export async function measure(): Promise<Measured> {
  const body = JSON.parse(readFileSync(path.join(projectRoot, 'fixtures', 'results', 'completed-full.json'), 'utf8')) as unknown;
  const dir = mkdtempSync(path.join(tmpdir(), 'elig-bench-drop-'));
  const postgres = await startPostgres();
  try {
    const lines: string[] = [];
    for (const history of HISTORY) {
      const sqlite = await openJobStore(path.join(dir, `drop-${history}.sqlite`), dir);
      const onSqlite = await perDrop(sqlite, body, history).finally(() => sqlite.close());
      const pg = await openJobStore(await postgres.createDatabase(), dir);
      const onPostgres = await perDrop(pg, body, history).finally(() => pg.close());
      lines.push(
        figure(`dropped-plan: SQLite, a drop, ${history} old checks`, `${onSqlite.toFixed(2)} ms`),
        figure(`dropped-plan: PostgreSQL, a drop, ${history} old checks`, `${onPostgres.toFixed(2)} ms`),
      );
    }
    return { lines, counts: { rounds: ROUNDS } };
  } finally {
    await postgres.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}
