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

/** Keeps when the service (`portal` undefined) or a portal was found out, unless a worker found it earlier. */
export async function keepOutageStart(store: JobStore, since: Date, portal?: string): Promise<void> {
  await store.transaction(async (tx) => {
    const kept = readKept(await tx.getMeta(SERVICE_OUT_SINCE));
    const at = portal === undefined ? kept.service : kept.portals[portal];
    if (at !== undefined && Date.parse(at) <= since.getTime()) return;
    if (portal === undefined) kept.service = since.toISOString();
    else kept.portals[portal] = since.toISOString();
    await tx.setMeta(SERVICE_OUT_SINCE, writeKept(kept));
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
export async function keepThrottledSince(store: JobStore, since: Date): Promise<void> {
  await store.transaction(async (tx) => {
    const kept = readKept(await tx.getMeta(SERVICE_OUT_SINCE));
    if (kept.throttled !== undefined && Date.parse(kept.throttled) <= since.getTime()) return;
    kept.throttled = since.toISOString();
    await tx.setMeta(SERVICE_OUT_SINCE, writeKept(kept));
  });
}

/** The throttling over, a call answered: when its checks were first given up, and it is forgotten. */
export async function forgetThrottled(store: JobStore): Promise<Date | undefined> {
  const at = await store.transaction(async (tx) => {
    const kept = readKept(await tx.getMeta(SERVICE_OUT_SINCE));
    if (kept.throttled === undefined) return undefined;
    const { throttled, ...rest } = kept;
    await tx.setMeta(SERVICE_OUT_SINCE, writeKept(rest));
    return throttled;
  });
  return at ? new Date(at) : undefined;
}

/** The service's outage (`portal` undefined) or a portal's over for every worker: when the first found it, and it is forgotten. */
export async function forgetOutageStart(store: JobStore, portal?: string): Promise<Date | undefined> {
  const kept = await store.transaction(async (tx) => {
    const all = readKept(await tx.getMeta(SERVICE_OUT_SINCE));
    const at = portal === undefined ? all.service : all.portals[portal];
    if (at === undefined) return undefined;
    if (portal === undefined) delete all.service;
    else delete all.portals[portal];
    await tx.setMeta(SERVICE_OUT_SINCE, writeKept(all));
    return at;
  });
  return kept ? new Date(kept) : undefined;
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
