import * as z from 'zod';
import type { CheckRow, JobStore } from './job-store';
import { firstDateToCome, type SchedulePolicy } from './schedule';

/**
 * What the store keeps of the verification service's outages (ServiceOutage): when the whole
 * service and each payer portal out on its own were found out, until each answers again, so that
 * a worker started meanwhile (serve restarted, another instance) takes them up, and the checks
 * given up since then are the ones sent again. An ISO time alone, as the first version kept, is
 * the whole service's.
 */
const SERVICE_OUT_SINCE = 'service-out-since';

const KeptOutages = z.object({
  service: z.iso.datetime().optional(),
  portals: z.record(z.string(), z.iso.datetime()).default({}),
  /** When the first check whose visit's day had come was given up while the service asked for fewer requests (429), until a call is answered. */
  throttled: z.iso.datetime().optional(),
});
type KeptOutages = z.infer<typeof KeptOutages>;

/** The outages kept; nothing for a value this program cannot read (it is only a hint: the worker's calls find the service as it is). */
function readKept(value: string | undefined): KeptOutages {
  if (!value) return { portals: {} };
  if (!value.startsWith('{')) return Number.isNaN(Date.parse(value)) ? { portals: {} } : { service: new Date(value).toISOString(), portals: {} };
  try {
    const kept = KeptOutages.safeParse(JSON.parse(value));
    return kept.success ? kept.data : { portals: {} };
  } catch {
    return { portals: {} };
  }
}

const isEmpty = (kept: KeptOutages) => kept.service === undefined && kept.throttled === undefined && Object.keys(kept.portals).length === 0;
const writeKept = (kept: KeptOutages) => (isEmpty(kept) ? '' : JSON.stringify(kept));

/** Where one start lives in the kept record: the whole service's, a portal's, or a throttling's. */
type Slot = 'service' | 'throttled' | { portal: string };

function startIn(kept: KeptOutages, slot: Slot): string | undefined {
  return typeof slot === 'string' ? kept[slot] : kept.portals[slot.portal];
}

function setStart(kept: KeptOutages, slot: Slot, at: string | undefined): void {
  if (typeof slot !== 'string') {
    if (at === undefined) delete kept.portals[slot.portal];
    else kept.portals[slot.portal] = at;
  } else if (at === undefined) delete kept[slot];
  else kept[slot] = at;
}

/** Keeps `since` in `slot`, unless a worker kept an earlier time there. */
async function keepStart(store: JobStore, slot: Slot, since: Date): Promise<void> {
  await store.transaction(async (tx) => {
    const kept = readKept(await tx.getMeta(SERVICE_OUT_SINCE));
    const at = startIn(kept, slot);
    if (at !== undefined && Date.parse(at) <= since.getTime()) return;
    setStart(kept, slot, since.toISOString());
    await tx.setMeta(SERVICE_OUT_SINCE, writeKept(kept));
  });
}

/** What `slot` kept, forgotten for every worker. */
async function forgetStart(store: JobStore, slot: Slot): Promise<Date | undefined> {
  const at = await store.transaction(async (tx) => {
    const kept = readKept(await tx.getMeta(SERVICE_OUT_SINCE));
    const start = startIn(kept, slot);
    if (start === undefined) return undefined;
    setStart(kept, slot, undefined);
    await tx.setMeta(SERVICE_OUT_SINCE, writeKept(kept));
    return start;
  });
  return at ? new Date(at) : undefined;
}

const outageSlot = (portal: string | undefined): Slot => (portal === undefined ? 'service' : { portal });

/** Keeps when the service (`portal` undefined) or a portal was found out, unless a worker found it earlier. */
export function keepOutageStart(store: JobStore, since: Date, portal?: string): Promise<void> {
  return keepStart(store, outageSlot(portal), since);
}

/** The service's outage (`portal` undefined) or a portal's over for every worker: when the first found it, and it is forgotten. */
export function forgetOutageStart(store: JobStore, portal?: string): Promise<Date | undefined> {
  return forgetStart(store, outageSlot(portal));
}

/**
 * The kept starts dated after `now`, moved back `byMs`: this machine's clock stepped back (SQLite), as the checks
 * given up in them are dated back (dateBackChecks), by no more than `byMs` each. A start left ahead would be after
 * those checks, which its end would then not send again (givenUpSince).
 */
export async function dateBackKept(store: JobStore, now: Date, byMs: number): Promise<void> {
  await store.transaction(async (tx) => {
    const value = await tx.getMeta(SERVICE_OUT_SINCE);
    const kept = readKept(value);
    const back = (at: string) => (Date.parse(at) > now.getTime() ? new Date(Date.parse(at) - byMs).toISOString() : at);
    const dated: KeptOutages = {
      ...(kept.service !== undefined && { service: back(kept.service) }),
      portals: Object.fromEntries(Object.entries(kept.portals).map(([portal, since]) => [portal, back(since)])),
      ...(kept.throttled !== undefined && { throttled: back(kept.throttled) }),
    };
    if (writeKept(dated) !== writeKept(kept)) await tx.setMeta(SERVICE_OUT_SINCE, writeKept(dated));
  });
}

/** The outages workers found, as the store keeps them: the whole service's and each portal's start, and a throttling's; none answered since. */
export async function keptOutages(store: JobStore): Promise<{ service?: Date; portals: Array<{ portal: string; since: Date }>; throttled?: Date }> {
  const kept = readKept(await store.transaction((tx) => tx.getMeta(SERVICE_OUT_SINCE)));
  return {
    ...(kept.service !== undefined && { service: new Date(kept.service) }),
    portals: Object.entries(kept.portals).map(([portal, since]) => ({ portal, since: new Date(since) })),
    ...(kept.throttled !== undefined && { throttled: new Date(kept.throttled) }),
  };
}

/**
 * Keeps when checks whose visits' day had come were first given up while the service asked for
 * fewer requests, unless kept earlier: a worker started meanwhile sends them again once a call of
 * its is answered, as the one that gave them up would have.
 */
export function keepThrottledSince(store: JobStore, since: Date): Promise<void> {
  return keepStart(store, 'throttled', since);
}

/** The throttling over, a call answered: when its checks were first given up, and it is forgotten. */
export function forgetThrottled(store: JobStore): Promise<Date | undefined> {
  return forgetStart(store, 'throttled');
}

/**
 * The checks `givenUp` (this plugin's not-verified failure) since `since`, waiting for a person or
 * for the chart, whose visits are still to come. Read newest first, in pages growing until one
 * reaches past `since`, not every check the store has kept: needs-attention holds every refusal of
 * months, each read with its result, while MLLP and webhooks wait on the loop.
 */
export async function givenUpSince(store: JobStore, since: Date, now: Date, policy: SchedulePolicy, givenUp: (row: CheckRow) => boolean): Promise<CheckRow[]> {
  let rows: CheckRow[];
  for (let limit = 64; ; limit *= 4) {
    rows = await store.listChecks({ states: ['needs-attention', 'result-stored'], limit });
    const oldest = rows.at(-1);
    if (rows.length < limit || oldest === undefined || Date.parse(oldest.updatedAt) < since.getTime()) break;
  }
  return rows.filter(
    (row) =>
      givenUp(row) &&
      Date.parse(row.resultAt ?? '') >= since.getTime() &&
      row.check.dateOfService >= firstDateToCome(now, policy.timeZoneOf?.(row.check.clinicId)),
  );
}
