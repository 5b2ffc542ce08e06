import { MemoryRepository } from '@medplum/fhir-router';
import type { Resource } from 'fhir/r4';

/** How MemoryRepository 4.5 keeps its data: current versions and every version, by type and id. */
interface Stores {
  resources: Map<string, Map<string, Resource>>;
  history: Map<string, Map<string, Resource[]>>;
}

/**
 * Medplum's MemoryRepository with transactions that roll back: its withTransaction only runs the
 * callback, so a transaction Bundle whose third entry fails kept the first two. Here the outermost
 * transaction snapshots the store and restores it when the callback throws; nested ones (a
 * conditional create inside a transaction opens its own) are part of the outer one.
 *
 * The store is shared: the caller runs one request at a time, or a rollback would also undo a
 * write that interleaved with the transaction.
 */
export class RollbackRepository extends MemoryRepository {
  private depth = 0;
  private readonly stores: Stores;

  constructor() {
    super();
    const stores = this as unknown as Partial<Stores>;
    // Fails at start-up, not at the first rollback, if a Medplum upgrade moves the store.
    if (!(stores.resources instanceof Map) || !(stores.history instanceof Map)) {
      throw new Error('RollbackRepository: this @medplum/fhir-router MemoryRepository keeps no resources/history maps');
    }
    this.stores = stores as Stores;
  }

  override async withTransaction<TResult>(callback: (client: undefined) => Promise<TResult>): Promise<TResult> {
    if (this.depth > 0) return callback(undefined);
    const snapshot = this.snapshot();
    this.depth++;
    try {
      return await callback(undefined);
    } catch (err) {
      this.restore(snapshot);
      throw err;
    } finally {
      this.depth--;
    }
  }

  /** Stored resources are never changed in place (each write stores a new copy), so shallow copies of the maps suffice. */
  private snapshot(): Stores {
    const copy = <V>(byType: Map<string, Map<string, V>>, value: (v: V) => V) =>
      new Map([...byType].map(([type, byId]) => [type, new Map([...byId].map(([id, v]) => [id, value(v)]))]));
    return { resources: copy(this.stores.resources, (r) => r), history: copy(this.stores.history, (versions) => [...versions]) };
  }

  private restore(snapshot: Stores): void {
    for (const key of ['resources', 'history'] as const) {
      const live = this.stores[key] as Map<string, unknown>;
      live.clear();
      for (const [type, byId] of snapshot[key]) live.set(type, byId);
    }
  }
}
