import type { CheckRow, JobStore } from './job-store';
import { firstDateToCome, type SchedulePolicy } from './schedule';

/**
 * What the store keeps of an outage of the verification service (ServiceOutage): when it was found,
 * until it answers again, so that a worker started meanwhile (serve restarted, another instance)
 * takes it up, and the checks given up since then are the ones sent again.
 */
const SERVICE_OUT_SINCE = 'service-out-since';

/** Keeps when the service was found out, unless a worker found it earlier. */
export async function keepOutageStart(store: JobStore, since: Date): Promise<void> {
  await store.transaction(async (tx) => {
    const kept = await tx.getMeta(SERVICE_OUT_SINCE);
    if (!kept || Date.parse(kept) > since.getTime()) await tx.setMeta(SERVICE_OUT_SINCE, since.toISOString());
  });
}

/** When a worker found the service out, as the store keeps it; undefined when none did, or it answered since. */
export async function keptOutageStart(store: JobStore): Promise<Date | undefined> {
  const kept = await store.transaction((tx) => tx.getMeta(SERVICE_OUT_SINCE));
  return kept ? new Date(kept) : undefined;
}

/** The outage over for every worker: when the first found it, and it is forgotten. */
export async function forgetOutageStart(store: JobStore): Promise<Date | undefined> {
  const kept = await store.transaction(async (tx) => {
    const at = await tx.getMeta(SERVICE_OUT_SINCE);
    if (at) await tx.setMeta(SERVICE_OUT_SINCE, '');
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
