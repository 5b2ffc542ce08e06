import { errorText } from './error-text';
import { StoreUnavailableError, type JobStore } from './job-store';

/**
 * Whether the store failed as a whole rather than the work given it: out of reach
 * (StoreUnavailableError), or SQLite's disk full or file held by another process past its
 * busy_timeout. Nothing of the work is at fault; the same work once the store answers is the remedy.
 * A constraint the work broke, or a fault of this program, is not one.
 */
export function storeOutage(err: unknown): boolean {
  if (err instanceof StoreUnavailableError) return true;
  const code = (err as { code?: unknown } | undefined)?.code;
  return code === 'SQLITE_FULL' || code === 'SQLITE_BUSY';
}

export interface OutageLog {
  warn(obj: object, msg: string): void;
}

const watched = new WeakSet<JobStore>();

/** The calls that take a lease (a claim, its release, its extension, a rate token) rather than store work. */
const LEASES = new Set<PropertyKey>(['claimDue', 'release', 'extendLease', 'beginWork', 'takeRateToken']);

/**
 * How much of the store a call needs: 0 reads, 1 takes a lease, 2 stores work (a transaction).
 * SQLite with its disk full or its file held still answers the lesser ones (reads go on beside
 * the WAL, a claim with nothing due writes nothing): only a call that needs as much as the one
 * that met the outage says the store is back.
 */
function needs(key: PropertyKey): number {
  return key === 'transaction' ? 2 : LEASES.has(key) ? 1 : 0;
}

/**
 * The store, telling `log` of an outage once: a warning at the first call that meets it, and a line
 * when a call that needs as much of the store (needs) is answered again, with how long it was away.
 * Each step, release, poll and message that meets the outage meanwhile says nothing of its own
 * (storeOutage tells them it is one): a restart of a second would otherwise be a page of errors.
 * The line it is back is a warning too, so a log that shows the one shows the other. A store
 * watched already is given as it is: one outage, one pair of lines, however many parts of the
 * process use the store.
 */
export function watchOutages(store: JobStore, log: OutageLog, now: () => number = Date.now): JobStore {
  if (watched.has(store)) return store;
  let since: number | undefined;
  /**
   * Calls made so far, and how many had been when the outage began or ended: a call made before
   * may be answered (or fail) after, which says nothing of the store since.
   */
  let calls = 0;
  let callsBefore = 0;
  /** What the call that met the outage needed of the store (needs). */
  let unmet = 0;
  const answered = (call: number, need: number) => {
    if (since === undefined || call <= callsBefore || need < unmet) return;
    log.warn({ outageMs: now() - since }, 'the job store answers again');
    since = undefined;
    callsBefore = calls;
  };
  const failed = (call: number, need: number, err: unknown): never => {
    if (since === undefined && call > callsBefore && storeOutage(err)) {
      since = now();
      callsBefore = calls;
      unmet = need;
      log.warn({ err: errorText(err) }, 'the job store is out of reach: checks, messages and webhooks wait for it, and nothing more is said until it answers');
    }
    throw err;
  };
  // Each method wrapped once, at its first use, not at every call: the store is on every hot path.
  const wrapped = new Map<PropertyKey, { of: unknown; call: unknown }>();
  const proxy = new Proxy(store, {
    get(target, key) {
      const value = Reflect.get(target, key, target) as unknown;
      if (typeof value !== 'function') return value;
      const known = wrapped.get(key);
      // A method set on the store since (as tests do to make it fail) is wrapped anew.
      if (known?.of === value) return known.call;
      const method = (value as (...a: unknown[]) => unknown).bind(target);
      const need = needs(key);
      // Closing answers nothing of whether the store is back.
      const call = key === 'close' ? method : (...args: unknown[]) => {
        const made = ++calls;
        const result = method(...args);
        return result instanceof Promise ? result.then(
          (answer: unknown) => (answered(made, need), answer),
          (err: unknown) => failed(made, need, err),
        ) : result;
      };
      wrapped.set(key, { of: value, call });
      return call;
    },
  });
  watched.add(proxy);
  return proxy;
}
