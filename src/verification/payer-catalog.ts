import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import * as path from 'node:path';
import * as z from 'zod';
import { describeIssue, type PayerCandidate, type PayerMatch, type PayerResolution, type PayerResolver } from '../domain';
import { readMappingFile } from '../mapping-files';
import { describeJsonSyntax } from './json-syntax';
import type { VerificationClient } from './client';
import { eachReadable, FEATURE_ASYNC, FEATURE_SYNC, Payer, Portal } from './wire';

export const CatalogSnapshot = z.strictObject({
  /** When the service was last asked; the next refresh asks for updatedSince this. */
  syncedAt: z.iso.datetime({ offset: true }),
  payers: z.array(Payer),
  portals: z.array(Portal),
});
export type CatalogSnapshot = z.infer<typeof CatalogSnapshot>;

/**
 * A snapshot as read back from its file: a payer or portal this version cannot read (a blank
 * primaryPayerId, saved before the listing refused one) is left out and named, as a listing
 * leaves it out, rather than the whole saved catalog being unusable after an upgrade.
 */
const SavedSnapshot = z.strictObject({
  syncedAt: CatalogSnapshot.shape.syncedAt,
  payers: eachReadable(Payer, 'payers'),
  portals: eachReadable(Portal, 'portals'),
});

const PayerAliases = z.looseObject({
  names: z.record(z.string(), z.string()).default({}),
  ids: z.record(z.string(), z.string()).default({}),
});
export type PayerAliases = z.infer<typeof PayerAliases>;

export function loadPayerAliases(dir?: string): PayerAliases {
  return readMappingFile('payers.json', PayerAliases, dir);
}

/** Case, punctuation and spacing do not distinguish payers as PMSs type them. */
export function normaliseName(name: string): string {
  return name
    .toUpperCase()
    .replace(/&/g, ' AND ')
    .replace(/[^A-Z0-9]+/g, ' ')
    .trim();
}

const normaliseId = (id: string) => id.trim().toUpperCase();

/**
 * A cached copy of the payer and portal networks, refreshed with updatedSince, and the
 * resolution of a payer as a PMS names it. A common payer id covering several payers is
 * ambiguous unless the name narrows it to one.
 */
export class PayerCatalog implements PayerResolver {
  private readonly byName = new Map<string, Payer>();
  private readonly byCommonId = new Map<string, Payer[]>();
  private readonly byAlternateId = new Map<string, Payer[]>();
  private readonly aliasNames: Map<string, string>;
  private readonly aliasIds: Map<string, string>;

  constructor(
    readonly snapshot: CatalogSnapshot,
    aliases: PayerAliases = loadPayerAliases(),
  ) {
    for (const payer of snapshot.payers) {
      this.byName.set(normaliseName(payer.name), payer);
      if (payer.commonPayerId) push(this.byCommonId, normaliseId(payer.commonPayerId), payer);
      for (const alt of payer.alternatePayerIds ?? []) push(this.byAlternateId, normaliseId(alt), payer);
    }
    this.aliasNames = new Map(Object.entries(aliases.names).map(([k, v]) => [normaliseName(k), v]));
    this.aliasIds = new Map(Object.entries(aliases.ids).map(([k, v]) => [normaliseId(k), v]));
  }

  static async load(file: string, aliases?: PayerAliases, options: { unreadable?: (described: string[]) => void } = {}): Promise<PayerCatalog> {
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch (err) {
      throw new Error(`payer catalog ${path.basename(file)}: cannot be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch {
      throw new Error(`payer catalog ${path.basename(file)}: ${describeJsonSyntax(text)}`);
    }
    const parsed = SavedSnapshot.safeParse(raw);
    if (!parsed.success) {
      throw new Error(`payer catalog ${path.basename(file)}: ${describeIssue(parsed.error)}`);
    }
    const { syncedAt, payers, portals } = parsed.data;
    const unreadable = [...payers.unreadable, ...portals.unreadable];
    if (unreadable.length > 0) options.unreadable?.(unreadable);
    return new PayerCatalog({ syncedAt, payers: payers.read, portals: portals.read }, aliases);
  }

  /** Writes the snapshot atomically, so a crash mid-write never leaves half a catalog. */
  async save(file: string): Promise<void> {
    const tmp = `${file}.${process.pid}.tmp`;
    try {
      await mkdir(path.dirname(file), { recursive: true });
      await writeFile(tmp, `${JSON.stringify(this.snapshot, null, 2)}\n`);
      await rename(tmp, file);
    } catch (err) {
      // A file that cannot be written (a folder of that name, no permission) leaves no copy behind, and says so by name.
      await rm(tmp, { force: true }).catch(() => undefined);
      throw new Error(`payer catalog ${file}: cannot be written (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
  }

  /**
   * Fetches the networks: everything when there is no previous copy or `full` asks for it,
   * otherwise only what changed since it was taken, merged over it by primaryPayerId / portalId.
   * An incremental listing cannot tell that a payer left the network; a full one replaces the
   * copy, so a payer it no longer lists leaves the catalog. A payer or portal the service lists and
   * the client cannot read is left out and handed to `unreadable`; the rest still refresh.
   */
  static async sync(
    client: VerificationClient,
    previous?: PayerCatalog,
    options: { now?: () => Date; aliases?: PayerAliases; full?: boolean; unreadable?: (described: string[]) => void } = {},
  ): Promise<PayerCatalog> {
    const startedAt = (options.now ?? (() => new Date()))().toISOString();
    const base = options.full ? undefined : previous;
    const updatedSince = base?.snapshot.syncedAt;
    const query = updatedSince ? { updatedSince } : {};
    const payers = new Map((base?.snapshot.payers ?? []).map((p) => [p.primaryPayerId, p]));
    const portals = new Map((base?.snapshot.portals ?? []).map((p) => [p.portalId, p]));
    const listing = { ...(options.unreadable && { unreadable: options.unreadable }) };
    for await (const p of client.all((page) => client.listPayers({ ...page, ...query }), listing)) payers.set(p.primaryPayerId, p);
    for await (const p of client.all((page) => client.listPortals({ ...page, ...query }), listing)) portals.set(p.portalId, p);
    return new PayerCatalog({ syncedAt: startedAt, payers: [...payers.values()], portals: [...portals.values()] }, options.aliases);
  }

  get payers(): readonly Payer[] {
    return this.snapshot.payers;
  }

  get portals(): readonly Portal[] {
    return this.snapshot.portals;
  }

  portal(portalId: string): Portal | undefined {
    return this.snapshot.portals.find((p) => p.portalId === portalId);
  }

  /** Payers whose name or any id contains the text. */
  search(text: string): Payer[] {
    const needle = normaliseName(text);
    return this.snapshot.payers.filter((p) =>
      [p.name, p.commonPayerId ?? '', p.primaryPayerId, ...(p.alternatePayerIds ?? [])].some((v) => normaliseName(v).includes(needle)),
    );
  }

  resolve(named: { name?: string | undefined; id?: string | undefined }): PayerResolution {
    const name = named.name?.trim() ? normaliseName(named.name) : undefined;
    const id = named.id?.trim() ? normaliseId(named.id) : undefined;

    if (id) {
      const aliasedId = this.aliasIds.get(id);
      const found =
        pick(this.byCommonId.get(id), 'commonPayerId', name) ??
        pick(this.byAlternateId.get(id), 'alternatePayerId', name) ??
        (aliasedId ? pick(this.byCommonId.get(normaliseId(aliasedId)), 'alias', name) : undefined);
      if (found) return found;
    }
    if (name) {
      const direct = this.byName.get(name);
      if (direct) return resolved(direct, 'name');
      const aliased = this.aliasNames.get(name);
      const target = aliased ? this.byName.get(normaliseName(aliased)) : undefined;
      if (target) return resolved(target, 'alias');
    }
    return { status: 'unknown' };
  }
}

function pick(candidates: Payer[] | undefined, matchedBy: PayerMatch, name: string | undefined): PayerResolution | undefined {
  if (!candidates?.length) return undefined;
  if (candidates.length === 1) return resolved(candidates[0] as Payer, matchedBy);
  const narrowed = name ? candidates.filter((p) => normaliseName(p.name) === name) : [];
  if (narrowed.length === 1) return resolved(narrowed[0] as Payer, matchedBy);
  return {
    status: 'ambiguous',
    matchedBy,
    candidates: candidates.map(
      (p): PayerCandidate => ({ primaryPayerId: p.primaryPayerId, name: p.name, ...(p.commonPayerId ? { commonPayerId: p.commonPayerId } : {}) }),
    ),
  };
}

/**
 * The portals a payer takes each mode on. Synchronous is the service's default, so its portals
 * count unless the feature says it is not supported; asynchronous only when it says it is.
 */
export function portalsOf(payer: Payer): { syncPortals: string[]; asyncPortals: string[] } {
  const sync = payer.features?.[FEATURE_SYNC];
  const async = payer.features?.[FEATURE_ASYNC];
  return {
    syncPortals: sync?.supported === false ? [] : (sync?.portals ?? []),
    asyncPortals: async?.supported ? (async.portals ?? []) : [],
  };
}

function resolved(payer: Payer, matchedBy: PayerMatch): PayerResolution {
  const { syncPortals, asyncPortals } = portalsOf(payer);
  return {
    status: 'resolved',
    matchedBy,
    primaryPayerId: payer.primaryPayerId,
    ...(payer.commonPayerId ? { commonPayerId: payer.commonPayerId } : {}),
    name: payer.name,
    syncPortals,
    asyncPortals,
    supportsAsync: asyncPortals.length > 0,
  };
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}
