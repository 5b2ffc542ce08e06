import type { CheckRow, JobStore } from './job-store';
import { reverifyAt, type SchedulePolicy } from './schedule';

/**
 * Dates back the checks changed while this machine's clock ran ahead, once it has stepped back
 * (SQLite: the store goes by this machine's clock), and returns how many. A check changed `ahead`
 * past now was changed no later than now: what it dated then (its change, its send, its result)
 * is dated back by `ahead`, and a due time set as a delay from then (a
 * backoff, a poll, a webhook's deadline, an outage's hold) is that delay from now, no longer
 * waiting out the step. A written check's due time is its re-verification, set by its result's
 * time and its visit's day, which no clock moves: it is reckoned again from its result dated
 * back, so one due next month, or the lead time before its visit, stays so. A check changed
 * before the clock ran ahead is dated right and left as it is.
 */
export async function dateBackChecks(store: JobStore, now: () => Date, policy: SchedulePolicy): Promise<number> {
  const ahead = await store.listChecks({ changedAfter: now().toISOString() });
  if (ahead.length === 0) return 0;
  return store.transaction(async (tx) => {
    const at = now().getTime();
    let dated = 0;
    // Read again in the transaction: the worker may have changed one since, by the clock set right.
    for (const { key } of ahead) {
      const row = await tx.getCheck(key);
      const aheadMs = row ? Date.parse(row.updatedAt) - at : 0;
      if (!row || aheadMs <= 0) continue;
      await tx.putCheck(datedBack(row, aheadMs, at, policy));
      dated++;
    }
    return dated;
  });
}

function datedBack(row: CheckRow, aheadMs: number, at: number, policy: SchedulePolicy): CheckRow {
  // By the same `ahead` each: one before another stays so (a result before this round's send, a dismissal before the
  // last change), and none is dated before it happened, the clock having run ahead by `ahead` at least.
  const back = (time: string | undefined) => (time === undefined || Date.parse(time) <= at ? time : new Date(Date.parse(time) - aheadMs).toISOString());
  const resultAt = back(row.resultAt);
  const dueAt =
    row.dueAt === undefined ? undefined
    : row.state === 'written' && resultAt !== undefined ? reverifyAt(row, new Date(resultAt), policy)
    : new Date(Date.parse(row.dueAt) - aheadMs).toISOString();
  return { ...row, updatedAt: new Date(at).toISOString(), createdAt: back(row.createdAt) ?? row.createdAt, submittedAt: back(row.submittedAt), resultAt, dueAt, dismissedAt: back(row.dismissedAt), planDroppedAt: back(row.planDroppedAt) };
}
