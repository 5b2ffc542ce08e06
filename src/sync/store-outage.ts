import type { PatientInsuranceRecord } from '../domain';
import { errorText } from './error-text';
import { StoreUnavailableError, type AppointmentRow, type CheckRow, type CheckState, type JobStore, type MessageKind, type MessageRow, type NewMessage, type StoreTx } from './job-store';

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

/** Each watched store's outage under way, as its warning said it; a store in it is watched already. */
const outages = new WeakMap<JobStore, () => { since: Date; err: string } | undefined>();

/**
 * The outage a watched store is in: since when, and what failed. A disk full answers reads (a
 * health check's ping among them) while every change fails, so only the watch knows the store fails.
 */
export function outageOf(store: JobStore): { since: Date; err: string } | undefined {
  return outages.get(store)?.();
}

/**
 * How much of the store a call needs: 0 reads, 1 takes a lease, 2 changes what it holds. SQLite
 * with its disk full still answers the lesser ones (reads go on beside the WAL; a claim of nothing,
 * or a transaction that only reads, writes nothing): an outage ends when a call that needs as much
 * as the most any call it failed needed is answered. PostgreSQL away, or SQLite's file held, fails
 * the claims too (BEGIN IMMEDIATE), and a claim answered says it is back.
 */
type Need = 0 | 1 | 2;

/** The calls that take a lease (a claim, its release, its extension, a rate token) rather than store work. */
const LEASES = new Set<PropertyKey>(['claimDue', 'release', 'extendLease', 'beginWork', 'takeRateToken']);

/**
 * A transaction's view of the store, noting in `writes` a change it asked for (`tried`) and one it
 * made (`changed`): one without needs no more of the store than a claim. A message added is no
 * change when it was kept before (INSERT OR IGNORE: a repeat, a dead letter kept once).
 */
class WatchedTx implements StoreTx {
  constructor(
    private readonly tx: StoreTx,
    private readonly writes: { tried: boolean; changed: boolean },
  ) {}

  private change<T>(write: Promise<T>): Promise<T> {
    this.writes.tried = this.writes.changed = true;
    return write;
  }

  async addMessage(message: NewMessage): Promise<{ message: MessageRow; duplicate: boolean }> {
    this.writes.tried = true;
    const added = await this.tx.addMessage(message);
    if (!added.duplicate) this.writes.changed = true;
    return added;
  }

  findMessage(kind: MessageKind, dedupeKey: string) {
    return this.tx.findMessage(kind, dedupeKey);
  }

  deadLettersNaming(prefix: string) {
    return this.tx.deadLettersNaming(prefix);
  }

  updateMessage(id: number, change: Partial<Pick<MessageRow, 'status' | 'detail' | 'answer'>>) {
    return this.change(this.tx.updateMessage(id, change));
  }

  getPatient(patientKey: string) {
    return this.tx.getPatient(patientKey);
  }

  putPatient(patientKey: string, record: PatientInsuranceRecord) {
    return this.change(this.tx.putPatient(patientKey, record));
  }

  getAppointment(key: string) {
    return this.tx.getAppointment(key);
  }

  putAppointment(row: AppointmentRow) {
    return this.change(this.tx.putAppointment(row));
  }

  appointmentsOfPatient(patientKey: string, except?: string) {
    return this.tx.appointmentsOfPatient(patientKey, except);
  }

  appointmentsHolding(checkKey: string) {
    return this.tx.appointmentsHolding(checkKey);
  }

  appointmentsVerifying(coverage: string) {
    return this.tx.appointmentsVerifying(coverage);
  }

  getCheck(key: string) {
    return this.tx.getCheck(key);
  }

  putCheck(row: CheckRow) {
    return this.change(this.tx.putCheck(row));
  }

  checksOfPatient(patientKey: string, memberIds: readonly string[], states: readonly CheckState[]) {
    return this.tx.checksOfPatient(patientKey, memberIds, states);
  }

  checkByCorrelationId(correlationId: string) {
    return this.tx.checkByCorrelationId(correlationId);
  }

  sentUnder(externalId: string) {
    return this.tx.sentUnder(externalId);
  }

  freshResults(coverageFingerprint: string, since: string) {
    return this.tx.freshResults(coverageFingerprint, since);
  }

  verifying(coverageFingerprint: string) {
    return this.tx.verifying(coverageFingerprint);
  }

  getMeta(key: string) {
    return this.tx.getMeta(key);
  }

  setMeta(key: string, value: string) {
    return this.change(this.tx.setMeta(key, value));
  }
}

/**
 * The store, telling `log` of an outage once: a warning at the first call that meets it, and a line
 * when a call that needs as much of the store (Need) is answered again, with how long it was away.
 * Each step, release, poll and message that meets the outage meanwhile says nothing of its own
 * (storeOutage tells them it is one): a restart of a second would otherwise be a page of errors.
 * The line it is back is a warning too, so a log that shows the one shows the other. A store
 * watched already is given as it is: one outage, one pair of lines, however many parts of the
 * process use the store.
 */
export function watchOutages(store: JobStore, log: OutageLog, now: () => number = Date.now): JobStore {
  if (outages.has(store)) return store;
  let since: number | undefined;
  let why = '';
  /**
   * Calls made so far, and how many had been when the outage began or ended: a call made before
   * may be answered (or fail) after, which says nothing of the store since.
   */
  let calls = 0;
  let callsBefore = 0;
  /** The most a call the outage failed needed of the store (Need). */
  let unmet: Need = 0;
  const answered = (call: number, need: Need) => {
    if (since === undefined || call <= callsBefore || need < unmet) return;
    log.warn({ outageMs: now() - since }, 'the job store answers again');
    since = undefined;
    callsBefore = calls;
  };
  const failed = (call: number, need: Need, err: unknown): never => {
    if (!storeOutage(err)) throw err;
    if (since !== undefined) unmet = need > unmet ? need : unmet;
    else if (call > callsBefore) {
      since = now();
      callsBefore = calls;
      unmet = need;
      why = errorText(err);
      log.warn({ err: why }, 'the job store is out of reach: checks, messages and webhooks wait for it, and nothing more is said until it answers');
    }
    throw err;
  };
  const watch = <T>(made: number, result: Promise<T>, need: (answer: boolean) => Need): Promise<T> =>
    result.then(
      (answer) => (answered(made, need(true)), answer),
      (err: unknown) => failed(made, need(false), err),
    );
  /** A transaction needs what it asked for (WatchedTx): a change, or no more than a claim. */
  const transaction: JobStore['transaction'] = (work) => {
    const made = ++calls;
    const writes = { tried: false, changed: false };
    return watch(made, store.transaction((tx) => work(new WatchedTx(tx, writes))), (answer) => ((answer ? writes.changed : writes.tried) ? 2 : 1));
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
      // A prune deletes: it changes what the store holds, as a transaction that writes does.
      const need: Need = LEASES.has(key) ? 1 : key === 'prune' ? 2 : 0;
      // Closing answers nothing of whether the store is back, nor does reading its clock.
      const call = key === 'close' || key === 'now' ? method : key === 'transaction' ? transaction : (...args: unknown[]) => {
        const made = ++calls;
        const result = method(...args);
        return result instanceof Promise ? watch(made, result, () => need) : result;
      };
      wrapped.set(key, { of: value, call });
      return call;
    },
  });
  outages.set(proxy, () => (since === undefined ? undefined : { since: new Date(since), err: why }));
  return proxy;
}
