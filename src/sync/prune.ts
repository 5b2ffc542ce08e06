import { PRUNED, type JobStore, type Pruned } from './job-store';

/**
 * Rows of one kind a prune deletes in one transaction: a first prune of a year's backlog holds the
 * store (SQLite's commit queue, PostgreSQL's locks) and the event loop a few milliseconds at a
 * time, other work going on between its batches.
 */
export const PRUNE_BATCH = 300;

/**
 * Prunes the store of the work finished before `before` (see JobStore.prune): messages, then
 * checks, then the appointments those held, each batch after batch until none is left, yielding
 * to the event loop between batches, and ending early once `stopping` says so. What each kind lost, and the bodies cut.
 */
export async function pruneFinished(store: JobStore, before: string, options: { limit?: number; stopping?: () => boolean } = {}): Promise<Record<Pruned | 'bodies', number>> {
  // bodies: the verification bodies cut from the checks kept (a plan's latest), their benefits gone, their status and ids left.
  const pruned: Record<Pruned | 'bodies', number> = { messages: 0, checks: 0, appointments: 0, bodies: 0 };
  const limit = options.limit ?? PRUNE_BATCH;
  for (const kind of PRUNED) {
    let after: string | undefined;
    do {
      if (options.stopping?.()) return pruned;
      const batch = await store.prune({ kind, before, limit, ...(after !== undefined && { after }) });
      pruned[kind] += batch.pruned;
      pruned.bodies += batch.trimmed ?? 0;
      after = batch.after;
      await new Promise((resolve) => setImmediate(resolve));
    } while (after !== undefined);
  }
  return pruned;
}
