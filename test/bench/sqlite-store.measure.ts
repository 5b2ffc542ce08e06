import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { projectRoot } from '../../src/mapping-files';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { checkRow, NOW } from '../sync/job-store-contract';
import { figure, type Measured } from './measure';

/**
 * A check's life through the SQLite store as serve's worker and webhook receiver live it, without
 * the network: booked (read, then written), claimed and sent (awaiting its result), its result
 * delivered by webhook (the correlation id looked up, then the delivery kept and the result
 * stored in one transaction), claimed and written back. LANES checks at a time, as serve's
 * concurrency, each waiting the morning batch's request latency and webhook delay: the store sees
 * transactions arrive as it does in serve, a few at a time, not one large batch after another. The figure that matters is the process's CPU per check (every thread: the
 * checkpointer and the syncs too), which the machine's other load changes less than the wall time.
 */
const CHECKS = 1000;
const LANES = 64;
/** As the morning-batch benchmark's sandbox: 300 ± 100 ms a request, the result by webhook 200 ms after. */
const waitRequest = () => new Promise((r) => setTimeout(r, 200 + Math.random() * 200));
const waitWebhook = () => new Promise((r) => setTimeout(r, 200));
const OWNER = 'bench';

export async function measure(): Promise<Measured> {
  const body = JSON.parse(readFileSync(path.join(projectRoot, 'fixtures', 'results', 'completed-full.json'), 'utf8')) as { correlationId: string };
  const dir = mkdtempSync(path.join(tmpdir(), 'elig-bench-sqlite-'));
  const store = SqliteJobStore.open(dir);
  let written = 0;
  const life = async (i: number) => {
    const key = `elig_${i}`;
    const correlationId = `corr-${i}`;
    await store.transaction(async (tx) => {
      if (!(await tx.getCheck(key))) await tx.putCheck(checkRow(key));
    });
    const step = (from: string, change: Record<string, unknown>) =>
      store.transaction(async (tx) => {
        const current = await tx.getCheck(key);
        if (current?.state === from) await tx.putCheck({ ...current, ...change, updatedAt: NOW });
      });
    await store.claimDue({ now: NOW, limit: 1, owner: OWNER, leaseMs: 60_000 });
    await waitRequest();
    await step('received', { state: 'awaiting-result', correlationId, dueAt: undefined });
    await store.release(key, OWNER);
    await waitWebhook();
    await store.transaction((tx) => tx.checkByCorrelationId(correlationId));
    await store.transaction(async (tx) => {
      const { message } = await tx.addMessage({ kind: 'webhook', dedupeKey: `wh-${i}`, receivedAt: NOW, raw: JSON.stringify({ ...body, correlationId }), status: 'received' });
      const current = await tx.checkByCorrelationId(correlationId);
      if (current) await tx.putCheck({ ...current, state: 'result-stored', result: { ...body, correlationId }, resultAt: NOW, dueAt: NOW });
      await tx.updateMessage(message.id, { status: 'handled', detail: 'awaiting-result -> result-stored' });
    });
    await store.claimDue({ now: NOW, limit: 1, owner: OWNER, leaseMs: 60_000 });
    await waitRequest();
    await step('result-stored', { state: 'written', written: { requestId: `req-${i}`, responseId: `res-${i}` }, dueAt: undefined });
    await store.release(key, OWNER);
    written++;
  };
  try {
    let next = 0;
    const lane = async () => {
      while (next < CHECKS) await life(next++);
    };
    const cpu = process.cpuUsage();
    const start = performance.now();
    await Promise.all(Array.from({ length: LANES }, lane));
    const seconds = (performance.now() - start) / 1000;
    const used = process.cpuUsage(cpu);
    const cpuMsPerCheck = (used.user + used.system) / 1000 / CHECKS;
    return {
      lines: [
        figure(`sqlite-store: ${CHECKS} checks' lives, ${LANES} at a time`, `${(CHECKS / seconds).toFixed(0)} checks/s`),
        figure('sqlite-store: verification body', `${JSON.stringify(body).length} bytes`),
        `bench sqlite-store: cpu ${cpuMsPerCheck.toFixed(3)} ms/check (user ${(used.user / 1000 / CHECKS).toFixed(3)}, system ${(used.system / 1000 / CHECKS).toFixed(3)}), ${store.syncStats().syncs} syncs, ${store.syncStats().commits} commits, ${(store.syncStats().syncMs / store.syncStats().syncs).toFixed(2)} ms each, ${seconds.toFixed(1)} s`,
      ],
      counts: { written },
    };
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}
