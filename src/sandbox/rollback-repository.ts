import { generateId, matchesSearchRequest, Operator, stringify, type SearchRequest, type WithId } from '@medplum/core';
import { MemoryRepository } from '@medplum/fhir-router';
// Medplum's own R4 types (a dependency of @medplum/core), which its repository's signatures use.
import type { Bundle, Resource } from '@medplum/fhirtypes';

/** How MemoryRepository 4.5 keeps its data: current versions and every version, by type and id. */
interface Stores {
  resources: Map<string, Map<string, Resource>>;
  history: Map<string, Map<string, Resource[]>>;
}

/** What a write inside a transaction replaced: the current version (none: it was created) and how many versions there were. */
interface Undo {
  resourceType: string;
  id: string;
  current: Resource | undefined;
  versions: number;
}

/**
 * Medplum's MemoryRepository with transactions that roll back, and identifier searches that do
 * not read every resource of the type.
 *
 * Its withTransaction only runs the callback, so a transaction Bundle whose third entry fails kept
 * the first two. Here the outermost transaction keeps a journal of what each write replaced and
 * undoes it, newest first, when the callback throws; nested ones (a conditional create inside a
 * transaction opens its own) are part of the outer one. (It copied the whole store per transaction
 * before: a cost that grew with the chart, quadratic over a morning's writes.)
 *
 * Its search evaluates the search parameter's FHIRPath on every resource of the type. A search by
 * `identifier` (what a sync does before each write, often two identifiers ANDed) looks in an index
 * by identifier value first; the candidates are then matched against every filter as before, so
 * the answer is the same. The index only ever gains
 * ids: one whose resource changed or went is a candidate that does not match.
 *
 * The store is shared: the caller runs one request at a time, or a rollback would also undo a
 * write that interleaved with the transaction.
 */
export class RollbackRepository extends MemoryRepository {
  private depth = 0;
  private journal: Undo[] = [];
  private readonly stores: Stores;
  private readonly byIdentifier = new Map<string, Map<string, Set<string>>>();

  constructor() {
    super();
    const stores = this as unknown as Partial<Stores>;
    // Fails at start-up, not at the first rollback, if a Medplum upgrade moves the store.
    if (!(stores.resources instanceof Map) || !(stores.history instanceof Map)) {
      throw new Error('RollbackRepository: this @medplum/fhir-router MemoryRepository keeps no resources/history maps');
    }
    this.stores = stores as Stores;
  }

  /**
   * MemoryRepository's create, which every write of it (create, update, patch) ends in, but the
   * version stored is frozen and handed back: MemoryRepository handed back a deep copy of it, a
   * millisecond for a full response, which the server mostly leaves out of its answer
   * (`Prefer: return=minimal`). Frozen, no caller can change what the chart holds through it.
   */
  override async createResource<T extends Resource>(resource: T): Promise<WithId<T>> {
    const before = resource.id ? this.remember(resource.resourceType, resource.id) : undefined;
    // Medplum's stringify leaves out empty values, as MemoryRepository's copy does.
    const created = JSON.parse(stringify(resource)) as WithId<T>;
    if (!created.id) created.id = this.generateId();
    const meta = (created.meta ??= {});
    if (!meta.versionId) meta.versionId = generateId();
    if (!meta.lastUpdated) meta.lastUpdated = new Date().toISOString();
    deepFreeze(created);
    const { resourceType, id } = created;
    const resources = this.stores.resources.get(resourceType) ?? new Map<string, Resource>();
    this.stores.resources.set(resourceType, resources.set(id, created));
    const history = this.stores.history.get(resourceType) ?? new Map<string, Resource[]>();
    this.stores.history.set(resourceType, history);
    const versions = history.get(id);
    if (versions) versions.push(created);
    else history.set(id, [created]);
    if (this.depth > 0) this.journal.push(before ?? { resourceType, id, current: undefined, versions: 0 });
    this.index(created);
    return created;
  }

  override async deleteResource(resourceType: string, id: string): Promise<void> {
    const before = this.remember(resourceType, id);
    await super.deleteResource(resourceType, id);
    if (this.depth > 0) this.journal.push(before);
  }

  override async search<T extends Resource>(searchRequest: SearchRequest<T>): Promise<Bundle<WithId<T>>> {
    const value = identifierValue(searchRequest);
    if (value === undefined) return super.search(searchRequest);
    const current = this.stores.resources.get(searchRequest.resourceType);
    const matches: Resource[] = [];
    for (const id of this.byIdentifier.get(searchRequest.resourceType)?.get(value) ?? []) {
      const resource = current?.get(id);
      if (resource && matchesSearchRequest(resource, searchRequest)) matches.push(resource);
    }
    // Insertion order, as MemoryRepository answers; a copy each, as it does.
    const entry = matches.slice(searchRequest.offset ?? 0, (searchRequest.offset ?? 0) + (searchRequest.count ?? matches.length)).map((r) => ({ resource: structuredClone(r) as WithId<T> }));
    return { resourceType: 'Bundle', type: 'searchset', ...(entry.length > 0 && { entry }), total: matches.length } as Bundle<WithId<T>>;
  }

  override clear(): void {
    super.clear();
    this.byIdentifier.clear();
  }

  override async withTransaction<TResult>(callback: (client: undefined) => Promise<TResult>): Promise<TResult> {
    if (this.depth > 0) return callback(undefined);
    this.depth++;
    try {
      return await callback(undefined);
    } catch (err) {
      this.undo();
      throw err;
    } finally {
      this.journal = [];
      this.depth--;
    }
  }

  private remember(resourceType: string, id: string): Undo {
    return {
      resourceType,
      id,
      current: this.stores.resources.get(resourceType)?.get(id),
      versions: this.stores.history.get(resourceType)?.get(id)?.length ?? 0,
    };
  }

  /** Stored resources are never changed in place (each write stores a new copy), so putting the earlier one back restores it. */
  private undo(): void {
    for (const { resourceType, id, current, versions } of this.journal.reverse()) {
      const resources = this.stores.resources.get(resourceType);
      if (current) resources?.set(id, current);
      else resources?.delete(id);
      const history = this.stores.history.get(resourceType);
      const kept = history?.get(id)?.slice(0, versions) ?? [];
      if (kept.length > 0) history?.set(id, kept);
      else history?.delete(id);
    }
  }

  private index(resource: Resource): void {
    const identifiers = (resource as { identifier?: { value?: string }[] }).identifier ?? [];
    if (identifiers.length === 0) return;
    let byValue = this.byIdentifier.get(resource.resourceType);
    if (!byValue) this.byIdentifier.set(resource.resourceType, (byValue = new Map()));
    for (const { value } of identifiers) {
      if (typeof value !== 'string' || resource.id === undefined) continue;
      const key = value.toLowerCase();
      let ids = byValue.get(key);
      if (!ids) byValue.set(key, (ids = new Set()));
      ids.add(resource.id);
    }
  }
}

/** Freezes an object parsed from JSON and everything in it. */
function deepFreeze(value: unknown): void {
  if (typeof value !== 'object' || value === null) return;
  Object.freeze(value);
  for (const child of Object.values(value)) deepFreeze(child);
}

/**
 * The identifier value a search asks for, when an identifier token (`system|value` or `value`)
 * is its only filter and it is not sorted; undefined for any other search. Lower-cased: the index
 * may hold more candidates than match, never fewer.
 */
function identifierValue(searchRequest: SearchRequest): string | undefined {
  if (searchRequest.sortRules?.length) return undefined;
  // Any one identifier the search asks for gives the candidates: the others, and every other filter, are matched on them.
  const filter = searchRequest.filters?.find((f) => f.code === 'identifier' && f.operator === Operator.EQUALS && !f.value.includes(','));
  if (!filter) return undefined;
  const bar = filter.value.indexOf('|');
  const value = bar < 0 ? filter.value : filter.value.slice(bar + 1);
  return value.length > 0 ? value.toLowerCase() : undefined;
}
