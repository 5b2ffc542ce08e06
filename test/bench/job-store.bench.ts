import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { JobStore } from '../../src/sync/job-store';
import { openJobStore } from '../../src/sync/open-store';
import { startPostgres } from '../support/postgres';
import { measureInProcess, print } from './measure';
import { checkRow, NOW } from '../sync/job-store-contract';

/**
 * What a worker's round trip through the store costs: claim a due check, step it in a
 * transaction (read it locked, write it), release the lease. Four workers per instance claiming
 * ten at a time, on SQLite (one instance) and on PostgreSQL (one and two instances on one
 * database, the test cluster with fsync off: a floor, not a production figure).
 */
const CHECKS = 2000;

async function drain(instances: readonly JobStore[], step: boolean): Promise<number> {
  await (instances[0] as JobStore).transaction(async (tx) => {
    for (let i = 0; i < CHECKS; i++) await tx.putCheck(checkRow(`elig_${i}`));
  });
  let done = 0;
  const worker = async (store: JobStore, owner: string) => {
    for (;;) {
      const rows = await store.claimDue({ now: NOW, limit: 10, owner, leaseMs: 60_000 });
      if (rows.length === 0) return;
      for (const row of rows) {
        if (step) {
          await store.transaction(async (tx) => {
            const current = await tx.getCheck(row.key);
            if (current) await tx.putCheck({ ...current, state: 'written', dueAt: undefined });
          });
          await store.release(row.key, owner);
        }
        done++;
      }
    }
  };
  const start = performance.now();
  await Promise.all(instances.flatMap((store, i) => [1, 2, 3, 4].map((n) => worker(store, `i${i}-w${n}`))));
  const seconds = (performance.now() - start) / 1000;
  if (done !== CHECKS) throw new Error(`${done} of ${CHECKS} checks handled`);
  return CHECKS / seconds;
}

const report = (label: string, perSecond: number) => process.stdout.write(`${label.padEnd(52)} ${perSecond.toFixed(0).padStart(8)} checks/s\n`);

test('job store claim throughput', async () => {
  const postgres = await startPostgres();
  const dir = mkdtempSync(path.join(tmpdir(), 'elig-bench-'));
  try {
    for (const step of [false, true]) {
      const what = step ? 'claim + step + release' : 'claim only';
      const sqlite = await openJobStore(path.join(dir, `${what}.sqlite`), dir);
      report(`SQLite, 1 instance, ${what}`, await drain([sqlite], step));
      await sqlite.close();
      for (const count of [1, 2]) {
        const url = await postgres.createDatabase();
        const instances = await Promise.all(Array.from({ length: count }, () => openJobStore(url, dir)));
        report(`PostgreSQL, ${count} instance${count > 1 ? 's' : ''}, ${what}`, await drain(instances, step));
        await Promise.all(instances.map((s) => s.close()));
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await postgres.stop();
  }
});

test("SQLite store: a check's life, CPU per check", async () => {
  const measured = await measureInProcess(path.join(__dirname, 'sqlite-store.measure.ts'));
  print(measured);
  expect(measured.counts.written).toBeGreaterThan(0);
});

test('a plan dropped for a patient with years of checks, on both stores', async () => {
  const measured = await measureInProcess(path.join(__dirname, 'dropped-plan.measure.ts'));
  print(measured);
  expect(measured.counts.rounds).toBeGreaterThan(0);
});
