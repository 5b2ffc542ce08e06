import { closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import * as path from 'node:path';
import { earliestDateAnywhere } from '../adapters/local-date';
import { closeEachOrThrow } from '../close-each';
import { PatientInsuranceRecord } from '../domain';
import {
  AppointmentRow,
  CheckRow,
  MessageRow,
  WORKABLE_STATES,
  CHART_WORK_SQL,
  SERVICE_WORK_STATES,
  type ClaimOptions,
  claimInTurn,
  checkOfPlanFrom,
  hasCompletedResult,
  messageFrom,
  dismissedSql,
  doneBeforeSql,
  endingLeftSql,
  planLatestSql,
  FOR_A_PERSON_SQL,
  RESTING_STATES_SQL,
  schemaRefusal,
  takeToken,
  type AppointmentStatus,
  type CheckFilter,
  type CheckOfPlanRecord,
  type CheckRowSql,
  type JobStore,
  type MessageKind,
  type MessageRecord,
  type MessageStatus,
  type NewMessage,
  type PruneBatch,
  type PruneDone,
  type Pruned,
  type StoreCounts,
  type StoreTx,
} from './job-store';
import { statusOfKindSql } from '../verification/outcome';
import { Database, type Statement } from './sqlite-driver';
import { WalCheckpointer } from './wal-checkpointer';
import { WalSync } from './wal-sync';

/**
 * The embedded job store: one SQLite file in WAL mode, each commit synced to disk before its
 * transaction resolves (see WalSync: what synchronous=FULL does, off the event loop), so an
 * answered transaction survives a crash or a power cut. better-sqlite3 is synchronous;
 * transactions that await between statements are serialised here, one at a time, so none sees
 * another half done; those that arrive together share a commit (see transaction).
 */

const MIGRATIONS: readonly string[] = [
  `CREATE TABLE messages (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     kind TEXT NOT NULL,
     dedupe_key TEXT NOT NULL,
     received_at TEXT NOT NULL,
     raw TEXT NOT NULL,
     status TEXT NOT NULL,
     detail TEXT,
     answer TEXT,
     UNIQUE (kind, dedupe_key)
   );
   CREATE INDEX messages_status ON messages (status, id);
   CREATE TABLE patients (
     patient_key TEXT PRIMARY KEY,
     record TEXT NOT NULL
   );
   CREATE TABLE appointments (
     key TEXT PRIMARY KEY,
     patient_key TEXT NOT NULL,
     date_of_service TEXT NOT NULL,
     status TEXT NOT NULL,
     check_keys TEXT NOT NULL,
     basis TEXT NOT NULL,
     updated_at TEXT NOT NULL
   );
   CREATE INDEX appointments_patient ON appointments (patient_key);
   CREATE TABLE appointment_checks (
     appointment_key TEXT NOT NULL,
     check_key TEXT NOT NULL,
     PRIMARY KEY (check_key, appointment_key)
   );
   CREATE TABLE checks (
     key TEXT PRIMARY KEY,
     state TEXT NOT NULL,
     row TEXT NOT NULL,
     correlation_id TEXT,
     coverage_fingerprint TEXT NOT NULL,
     result_at TEXT,
     due_at TEXT,
     lease_owner TEXT,
     lease_until TEXT,
     updated_at TEXT NOT NULL
   );
   CREATE INDEX checks_due ON checks (due_at) WHERE due_at IS NOT NULL;
   CREATE UNIQUE INDEX checks_correlation ON checks (correlation_id) WHERE correlation_id IS NOT NULL;
   CREATE INDEX checks_coverage ON checks (coverage_fingerprint, result_at);
   CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);`,
  `CREATE TABLE rate_buckets (bucket TEXT PRIMARY KEY, tokens REAL NOT NULL, at_ms REAL NOT NULL);`,
  // putAppointment unlinks by appointment: without this it scanned every link, a cost growing with the store.
  `CREATE INDEX IF NOT EXISTS appointment_checks_appointment ON appointment_checks (appointment_key);`,
  // The verification body (10 to 30 KB) out of the row's JSON: a step that keeps it writes back the text it read (see resultText).
  `ALTER TABLE checks ADD COLUMN result TEXT;
   UPDATE checks SET result = row -> '$.result', row = json_remove(row, '$.result') WHERE row -> '$.result' IS NOT NULL;`,
  // The body out of the checks table: SQLite writes a row whole, so each lease taken or given back, each step, wrote the body's pages again.
  `CREATE TABLE check_results (key TEXT PRIMARY KEY, result TEXT NOT NULL);
   INSERT INTO check_results (key, result) SELECT key, result FROM checks WHERE result IS NOT NULL;
   ALTER TABLE checks DROP COLUMN result;`,
  // A claim skips the due checks under lease (those in hand) by the index alone: it read each one's row to see its lease.
  `DROP INDEX checks_due;
   CREATE INDEX checks_due ON checks (due_at, lease_until, state) WHERE due_at IS NOT NULL;`,
  // A webhook no check has the correlation id of finds the send under way by its externalId (sentUnder), not by reading every check.
  `CREATE INDEX IF NOT EXISTS checks_submitted ON checks (json_extract(row, '$.externalId')) WHERE state = 'submitted';`,
  // Nothing to change in the tables: patient records may now hold a plan's period (coverages[].period) and a merge's
  // tombstone (mergedInto), which no earlier version reads, so a version of their own keeps those versions off this store.
  `SELECT 1;`,
  // Nor here: checks may now hold their plan's dates (check.coverage.period), which no earlier version reads.
  `SELECT 1;`,
  // A FHIR Coverage changed finds the appointments its checks serve by the index (appointmentsVerifying), not by reading every check:
  // moved to another patient, it is the first patient's checks that are to go. Only checks read from a FHIR Coverage have one:
  // an HL7 booking writes no entry.
  `CREATE INDEX IF NOT EXISTS checks_source_coverage ON checks (json_extract(row, '$.check.source.coverage')) WHERE json_extract(row, '$.check.source.coverage') IS NOT NULL;`,
  // A plan the PMS drops for a patient with no visit to come finds the check that wrote its Coverage by the patient and the plan's
  // member id (checksOfPatient), not among the patient's years of checks. Unreleased, so changed in place (a store made with the
  // patient alone finds the same checks, reading the others).
  `CREATE INDEX IF NOT EXISTS checks_patient ON checks (json_extract(row, '$.patientKey'), json_extract(row, '$.check.subscriber.memberId'));`,
  // Pruning (prune) finds the work finished before the retention period by these, not by reading every row: handled messages
  // by when they came, checks done with by their last change, appointments by their visit.
  `CREATE INDEX IF NOT EXISTS messages_received ON messages (status, received_at);
   CREATE INDEX IF NOT EXISTS checks_finished ON checks (updated_at, key) WHERE state IN ('cancelled', 'written') AND due_at IS NULL;
   CREATE INDEX IF NOT EXISTS appointments_day ON appointments (date_of_service, key);`,
  // Checks left to a person (needs-attention, dead) are pruned too once their visit is over: the index finds them beside the others.
  // Such a check may now say a person dismissed it (dismissedAt), which no earlier version reads: this version keeps them off the store.
  `DROP INDEX checks_finished;
   CREATE INDEX checks_finished ON checks (updated_at, key) WHERE state IN ('cancelled', 'written', 'needs-attention', 'dead') AND due_at IS NULL;`,
  // The worker claims the chart's work (results to write, Coverages to end) into places of their own (claimDue's chart cap):
  // this finds it without reading past a batch's due sends. Unreleased, so changed in place (results alone at first).
  `CREATE INDEX IF NOT EXISTS checks_chart_due ON checks (due_at) WHERE state IN ('result-stored', 'ending-coverage');`,
  // Nothing to change in the tables: an appointment may now be awaiting-correction (an HL7 booking refused for the patient's
  // details, held for an ADT), which no earlier version reads.
  `SELECT 1;`,
  // Nor here: a FHIR check's source may now name its payor Organization (check.source.insurer), which no earlier version reads.
  `SELECT 1;`,
  // Nor here: a check may now say it was withdrawn while its result was on its way to the chart (withdrawnBecause), which no earlier version reads.
  `SELECT 1;`,
];

/** The version this program writes. */
export const SQLITE_SCHEMA_VERSION = MIGRATIONS.length;

export const SQLITE_FILE = 'dental-elig.sqlite';

/**
 * Under steady load the checkpointing thread never catches up with the last commit, and SQLite
 * starts the WAL over only once a checkpoint has: the WAL would grow without end (80 MB after
 * 20,000 messages). Past this many pages (16 MB) the store's own connection checkpoints in its
 * COMMIT, as SQLite does by default at 1,000: only the few frames the thread has not copied yet,
 * then the WAL starts over.
 */
const WAL_BACKSTOP_PAGES = 4000;

/** See batched. */
const LASTING = true;
const LEASE = false;

export class SqliteJobStore implements JobStore {
  private readonly db: Database;
  private queue: Promise<unknown> = Promise.resolve();
  private readonly waiting: { work: () => Promise<unknown>; lasting: boolean; resolve: (value: unknown) => void; reject: (err: unknown) => void }[] = [];
  private readonly tx: StoreTx;
  private readonly leases: Record<'due' | 'chartDue' | 'take' | 'extend' | 'release', Statement>;
  /** Prepared once: db.exec parses its SQL again on every call, and a batch makes several per transaction. */
  private readonly control: Record<'begin' | 'savepoint' | 'release' | 'rollbackTo' | 'commit' | 'rollback' | 'changes' | 'dataVersion', Statement>;
  private readonly checks = new CheckCache();
  private readonly resultOf: Statement;
  /** PRAGMA data_version when the last batch began: it moves when another connection commits. */
  private dataVersion = -1;
  private readonly wal: WalSync;
  private readonly checkpointer: WalCheckpointer;
  /** Prepared at the first prune. */
  private pruning: SqlitePruning | undefined;
  /** Held while this store's worker works the file: see beginWork. */
  private workLock: Database | undefined;

  /**
   * Opens (creating and migrating) the store: a file path, or a directory to hold dental-elig.sqlite.
   * With create false (a reader), a store that is not there is an error: a reader given a mistyped folder would see an
   * empty one; so is one at an older schema, which only the process that works it upgrades (see schemaRefusal).
   */
  static open(location: string, options: { create?: boolean } = {}): SqliteJobStore {
    const file = location.endsWith('.sqlite') || location.endsWith('.db') ? location : path.join(location, SQLITE_FILE);
    if (options.create === false && !existsSync(file)) throw new Error(`no job store at ${file}; serve creates it`);
    // The store holds patient data and dead letters as they arrived: a new one is its owner's alone.
    // SQLite gives the WAL and shared-memory files the mode of the file they belong to.
    mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    if (options.create !== false) closeSync(openSync(file, 'a', 0o600));
    const db = new Database(file);
    try {
      return new SqliteJobStore(db, file, options.create !== false);
    } catch (err) {
      // A file this program refuses (a newer schema, an older one to a reader) is left to whoever opens it next.
      db.close();
      throw err;
    }
  }

  private constructor(
    db: Database,
    private readonly file: string,
    upgrade: boolean,
  ) {
    this.db = db;
    db.pragma('journal_mode = WAL');
    // Migrations commit with SQLite's own sync; the batches after them with WalSync's.
    db.pragma('synchronous = FULL');
    db.pragma('busy_timeout = 5000');
    // Each transaction of a batch runs in a SAVEPOINT, which copies every page it changes first: past
    // 64 KB SQLite spilled those copies to a temporary file, two write()s a page, a third of a message's
    // store time in the hl7-ingest benchmark. They are dropped at the batch's COMMIT.
    db.pragma('temp_store = MEMORY');
    this.upgradedFrom = this.migrate(upgrade);
    db.pragma('synchronous = NORMAL');
    this.wal = new WalSync(`${file}-wal`);
    this.wal.open();
    // The thread checkpoints; this connection only past WAL_BACKSTOP_PAGES (see there), or at 1,000 pages (SQLite's default) should the thread fail.
    db.pragma(`wal_autocheckpoint = ${WAL_BACKSTOP_PAGES}`);
    this.checkpointer = new WalCheckpointer(file, () => {
      if (db.open) db.pragma('wal_autocheckpoint = 1000');
    });
    this.resultOf = db.prepare('SELECT result FROM check_results WHERE key = ?').pluck();
    this.tx = this.statements();
    this.control = {
      begin: db.prepare('BEGIN IMMEDIATE'),
      savepoint: db.prepare('SAVEPOINT tx'),
      release: db.prepare('RELEASE tx'),
      rollbackTo: db.prepare('ROLLBACK TO tx'),
      commit: db.prepare('COMMIT'),
      rollback: db.prepare('ROLLBACK'),
      changes: db.prepare('SELECT total_changes()').pluck(),
      dataVersion: db.prepare('PRAGMA data_version').pluck(),
    };
    this.leases = {
      due: db.prepare(
        `SELECT key, row FROM checks WHERE due_at IS NOT NULL AND due_at <= ? AND (lease_until IS NULL OR lease_until <= ?)
         AND state IN (${SERVICE_WORK_STATES.map(() => '?').join(',')}) ORDER BY due_at LIMIT ?`,
      ),
      chartDue: db.prepare(
        `SELECT key, row FROM checks WHERE state IN ${CHART_WORK_SQL} AND due_at <= ? AND (lease_until IS NULL OR lease_until <= ?) ORDER BY due_at LIMIT ?`,
      ),
      take: db.prepare('UPDATE checks SET lease_owner = ?, lease_until = ? WHERE key = ?'),
      extend: db.prepare('UPDATE checks SET lease_until = ? WHERE key = ? AND lease_owner = ?'),
      release: db.prepare('UPDATE checks SET lease_owner = NULL, lease_until = NULL WHERE key = ? AND lease_owner = ?'),
    };
  }

  /** The schema version this file was upgraded from as it opened; undefined when it was at this program's, or new. */
  readonly upgradedFrom: number | undefined;

  /** The schema version this file is at (the number of migrations applied). */
  get schemaVersion(): number {
    return this.db.pragma('user_version', { simple: true }) as number;
  }

  /**
   * Under the work lock: a serve of the version before, still working the file, would go on
   * reading it as the schema it knows (a column moved out from under it fails its every step),
   * and a new serve started beside it would have upgraded the file before finding it worked.
   * Gives the version it upgraded the file from; undefined when there was nothing to do, or the file was new.
   */
  private migrate(upgrade: boolean): number | undefined {
    const from = this.schemaVersion;
    const refusal = schemaRefusal(from, MIGRATIONS.length, upgrade);
    if (refusal) throw new Error(refusal);
    if (from === MIGRATIONS.length) return undefined;
    const lock = this.takeWorkLock(`stop it before this version upgrades the store from schema version ${from}`);
    try {
      for (let version = from; version < MIGRATIONS.length; version++) {
        this.db.transaction(() => {
          this.db.exec(MIGRATIONS[version] as string);
          this.db.pragma(`user_version = ${version + 1}`);
        })();
      }
    } finally {
      lock.close();
    }
    return from > 0 ? from : undefined;
  }

  /**
   * Group commit: transactions that arrive while one batch runs or commits wait, then run together
   * in one BEGIN…COMMIT, each in its own SAVEPOINT, so a failed one rolls back alone and the rest
   * share one sync. None is answered before the batch's COMMIT is on disk; a failed COMMIT fails
   * them all, and changes nothing. The next batch runs while this one syncs, so the event loop
   * reads and handles the next messages meanwhile. Claims, lease releases and rate tokens join the
   * batches too: each of them committing alone cost a worker's round trip more than its check's
   * own transactions.
   */
  transaction<T>(work: (tx: StoreTx) => Promise<T>): Promise<T> {
    return this.batched(LASTING, () => work(this.tx));
  }

  claimDue(options: ClaimOptions): Promise<CheckRow[]> {
    return this.batched(LEASE, async () => {
      const until = new Date(Date.parse(options.now) + options.leaseMs).toISOString();
      return claimInTurn(options, (work, limit) => {
        const rows = (work === 'chart' ? this.leases.chartDue.all(options.now, options.now, limit) : this.leases.due.all(options.now, options.now, ...SERVICE_WORK_STATES, limit)) as KeyedRow[];
        return rows.map((r) => {
          this.leases.take.run(options.owner, until, r.key);
          return this.checkOf(r);
        });
      });
    });
  }

  /**
   * The lock is an exclusive transaction on a file of its own beside the store (one on the store
   * itself would hold off the CLI and the checkpointing thread), never committed: SQLite's locks
   * are the OS's, gone with the process however it ends. A second call in the process that holds
   * it gives back nothing: a worker here may hold those leases.
   */
  async beginWork(): Promise<number> {
    if (this.workLock) return 0;
    this.workLock = this.takeWorkLock('one process works a SQLite store; several instances share PostgreSQL');
    return this.batched(LEASE, async () => this.db.prepare('UPDATE checks SET lease_owner = NULL, lease_until = NULL WHERE lease_owner IS NOT NULL').run().changes);
  }

  /** The work lock (see beginWork), or an error saying another process holds it and `remedy`. */
  private takeWorkLock(remedy: string): Database {
    const lock = new Database(`${this.file}-worker`, { timeout: 1000 });
    try {
      lock.exec('BEGIN EXCLUSIVE');
    } catch (err) {
      lock.close();
      if ((err as { code?: unknown }).code !== 'SQLITE_BUSY') throw err;
      throw new Error(`job store ${this.file}: another process is working it (${remedy})`);
    }
    return lock;
  }

  release(key: string, owner: string): Promise<void> {
    return this.batched(LEASE, async () => {
      this.leases.release.run(key, owner);
    });
  }

  extendLease(options: { key: string; owner: string; now: string; leaseMs: number }): Promise<boolean> {
    return this.batched(LEASE, async () => {
      const until = new Date(Date.parse(options.now) + options.leaseMs).toISOString();
      return this.leases.extend.run(until, options.key, options.owner).changes > 0;
    });
  }

  /**
   * `lasting`: what the work writes must be on disk before it is answered. A lease (a claim, its
   * release) need not be: it means nothing once the process that holds it is gone, so a batch of
   * leases alone commits without a sync of its own (the next sync, or a checkpoint, writes it out).
   */
  private batched<T>(lasting: boolean, work: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.waiting.push({ work, lasting, resolve: resolve as (value: unknown) => void, reject });
      if (this.waiting.length > 1) return;
      // setImmediate, not a microtask: every socket read in this turn of the event loop joins the batch.
      setImmediate(() => void this.serial(() => this.commitBatch()));
    });
  }

  private async commitBatch(): Promise<void> {
    const batch = this.waiting.splice(0);
    if (batch.length === 0) return;
    // A batch of one needs no SAVEPOINT: rolling back the whole transaction rolls back that one alone.
    const alone = batch.length === 1;
    const sql = this.control;
    const outcomes: { ok: boolean; value: unknown }[] = [];
    // Whether the batch wrote something that must be on disk before it is answered.
    let mustSync = false;
    try {
      this.wal.check();
      sql.begin.run();
      // Another connection (the CLI, say) changed the file: what this one remembers of its checks may be out of date.
      const version = sql.dataVersion.get() as number;
      if (version !== this.dataVersion) (this.checks.clear(), (this.dataVersion = version));
      for (const { work, lasting } of batch) {
        if (!alone) sql.savepoint.run();
        const before = lasting ? (sql.changes.get() as number) : 0;
        try {
          outcomes.push({ ok: true, value: await work() });
          if (!alone) sql.release.run();
          if (lasting && sql.changes.get() !== before) mustSync = true;
        } catch (err) {
          // What the work wrote is undone: so is what it put in the cache.
          this.checks.clear();
          if (!alone) (sql.rollbackTo.run(), sql.release.run());
          // SQLite may have rolled the transaction back itself (a full disk): the work's error is the one to give.
          else if (this.db.inTransaction) sql.rollback.run();
          outcomes.push({ ok: false, value: err });
        }
      }
      // A batch of one that failed was rolled back whole: nothing to commit.
      if (!alone || outcomes[0]?.ok) {
        sql.commit.run();
        this.checkpointer.committed();
      }
    } catch (err) {
      this.checks.clear();
      if (this.db.inTransaction) sql.rollback.run();
      for (const { reject } of batch) reject(err);
      return;
    }
    // Not awaited: the next batch need not wait for this one's sync, only its answers do. Answers
    // that need no sync of their own still wait for those under way: they may have read what those cover.
    (mustSync ? this.wal.sync() : this.wal.synced()).then(
      () =>
        batch.forEach(({ resolve, reject }, i) => {
          const outcome = outcomes[i] as { ok: boolean; value: unknown };
          if (outcome.ok) resolve(outcome.value);
          else reject(outcome.value);
        }),
      (err: unknown) => batch.forEach(({ reject }) => reject(err)),
    );
  }

  async nextDueAt(): Promise<string | undefined> {
    const row = this.db
      .prepare(`SELECT MIN(MAX(due_at, COALESCE(lease_until, ''))) AS next FROM checks WHERE due_at IS NOT NULL AND state IN (${WORKABLE_STATES.map(() => '?').join(',')})`)
      .get(...WORKABLE_STATES) as { next: string | null };
    return row.next ?? undefined;
  }

  async listChecks(filter: CheckFilter = {}): Promise<CheckRow[]> {
    const states = filter.states ?? [];
    const clauses = [...(states.length > 0 ? [`state IN (${states.map(() => '?').join(',')})`] : []), ...(filter.changedAfter !== undefined ? ['updated_at > ?'] : [])];
    const where = clauses.length > 0 ? `WHERE ${clauses.join(' AND ')}` : '';
    const params = [...states, ...(filter.changedAfter !== undefined ? [filter.changedAfter] : [])];
    const rows = this.db.prepare(`SELECT row, result FROM checks LEFT JOIN check_results USING (key) ${where} ORDER BY updated_at DESC, key LIMIT ?`).all(...params, filter.limit ?? -1) as CheckRecord[];
    return rows.map(checkFrom);
  }

  async listAppointments(status?: AppointmentStatus): Promise<AppointmentRow[]> {
    const rows = (status
      ? this.db.prepare('SELECT * FROM appointments WHERE status = ? ORDER BY updated_at DESC').all(status)
      : this.db.prepare('SELECT * FROM appointments ORDER BY updated_at DESC').all()) as AppointmentRecord[];
    return rows.map(appointmentFrom);
  }

  async listMessages(filter: { status?: MessageStatus; kind?: MessageKind; limit?: number } = {}): Promise<MessageRow[]> {
    const clauses: string[] = [];
    const params: unknown[] = [];
    if (filter.status) (clauses.push('status = ?'), params.push(filter.status));
    if (filter.kind) (clauses.push('kind = ?'), params.push(filter.kind));
    const where = clauses.length > 0 ? `WHERE ${clauses.join(' AND ')}` : '';
    const rows = this.db.prepare(`SELECT * FROM messages ${where} ORDER BY id DESC LIMIT ?`).all(...params, filter.limit ?? -1) as MessageRecord[];
    return rows.map(messageFrom);
  }

  async getMessage(id: number): Promise<MessageRow | undefined> {
    const row = this.db.prepare('SELECT * FROM messages WHERE id = ?').get(id) as MessageRecord | undefined;
    return row && messageFrom(row);
  }

  async counts(now: string): Promise<StoreCounts> {
    const tally = (sql: string, ...params: string[]) => Object.fromEntries((this.db.prepare(sql).all(...params) as { k: string; n: number }[]).map((r) => [r.k, r.n]));
    const due = this.db
      .prepare(
        `SELECT COUNT(*) AS n, MIN(due_at) AS oldest FROM checks WHERE due_at IS NOT NULL AND due_at <= ? AND (lease_until IS NULL OR lease_until <= ?)
         AND state IN (${WORKABLE_STATES.map(() => '?').join(',')})`,
      )
      .get(now, now, ...WORKABLE_STATES) as { n: number; oldest: string | null };
    // Visits still to come somewhere: one whose day is over waits for nothing a person can do, and an alert on it would not clear.
    const waiting = tally(
      `SELECT status AS k, COUNT(*) AS n FROM appointments WHERE status IN ('awaiting-insurance', 'awaiting-correction') AND date_of_service >= ? GROUP BY status`,
      earliestDateAnywhere(new Date(now)),
    );
    const forAPerson = this.db.prepare(`SELECT COUNT(*) AS n FROM checks c WHERE c.state IN ${FOR_A_PERSON_SQL} AND NOT ${dismissedSql(ROW_SQL, 'c')}`).get() as { n: number };
    return {
      checks: tally('SELECT state AS k, COUNT(*) AS n FROM checks GROUP BY state'),
      messages: tally(`SELECT kind || ':' || status AS k, COUNT(*) AS n FROM messages GROUP BY kind, status`),
      awaitingInsurance: waiting['awaiting-insurance'] ?? 0,
      awaitingCorrection: waiting['awaiting-correction'] ?? 0,
      forAPerson: forAPerson.n,
      due: due.n,
      oldestDueAt: due.oldest ?? undefined,
    };
  }

  /** One batch, in the commit queue as every transaction is: see JobStore.prune. */
  prune(options: PruneBatch & { kind: Pruned }): Promise<PruneDone> {
    return this.batched(LASTING, async () => {
      const done = (this.pruning ??= sqlitePruning(this.db))[options.kind](options);
      for (const key of done.checks ?? []) this.checks.forget(key);
      return { pruned: done.pruned, ...(done.trimmed && { trimmed: done.trimmed }), ...(done.after !== undefined && { after: done.after }) };
    });
  }

  takeRateToken(bucket: string, perSecond: number, now: string): Promise<number> {
    return this.batched(LASTING, async () => {
      const last = this.db.prepare('SELECT tokens, at_ms AS atMs FROM rate_buckets WHERE bucket = ?').get(bucket) as { tokens: number; atMs: number } | undefined;
      const next = takeToken(last, perSecond, now);
      this.db
        .prepare('INSERT INTO rate_buckets (bucket, tokens, at_ms) VALUES (?, ?, ?) ON CONFLICT (bucket) DO UPDATE SET tokens = excluded.tokens, at_ms = excluded.at_ms')
        .run(bucket, next.bucket.tokens, next.bucket.atMs);
      return next.waitMs;
    });
  }

  /** The WAL syncs so far and the commits they covered (see WalSync.stats). */
  syncStats(): { syncs: number; commits: number; syncMs: number } {
    return this.wal.stats();
  }

  async ping(): Promise<void> {
    this.wal.check();
    this.db.prepare('SELECT 1').get();
  }

  async close(): Promise<void> {
    // A batch still waiting for its turn commits first.
    await this.serial(() => this.commitBatch()).catch(() => undefined);
    // Each closed whatever the one before throws: a WAL that failed to close left the file open
    // and the work lock held, so no other process could work the file, and a second close failed again.
    await closeEachOrThrow([
      { name: 'the WAL', close: () => this.wal.close() },
      { name: 'the checkpointing thread', close: () => this.checkpointer.close() },
      { name: 'the database', close: () => (this.db.open ? this.db.close() : undefined) },
      // Last: another process may work the file once what this one committed is all in it.
      { name: 'the work lock', close: () => this.releaseWorkLock() },
    ]);
  }

  private releaseWorkLock(): void {
    const lock = this.workLock;
    this.workLock = undefined;
    lock?.close();
  }

  private serial<T>(step: () => Promise<T>): Promise<T> {
    const run = this.queue.then(step, step);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /**
   * A check row read inside a batch: the one this connection last wrote or read, if its JSON is
   * still the same, else parsed from the file (its body read only then).
   */
  private checkOf(r: KeyedRow): CheckRow {
    const known = this.checks.get(r.key, r.row);
    if (known) return known;
    const row = checkFrom({ row: r.row, result: (this.resultOf.get(r.key) as string | undefined) ?? null });
    this.checks.put(row, r.row);
    return row;
  }

  private statements(): StoreTx {
    const db = this.db;
    const checks = this.checks;
    const checkOf = (r: KeyedRow) => this.checkOf(r);
    const insertMessage = db.prepare(
      'INSERT INTO messages (kind, dedupe_key, received_at, raw, status, detail, answer) VALUES (@kind, @dedupeKey, @receivedAt, @raw, @status, @detail, @answer) ON CONFLICT (kind, dedupe_key) DO NOTHING',
    );
    const messageByKey = db.prepare('SELECT * FROM messages WHERE kind = ? AND dedupe_key = ?');
    const lettersNaming = db.prepare("SELECT * FROM messages WHERE status = 'dead' AND kind = 'fhir-notification' AND substr(detail, 1, length(@prefix)) = @prefix");
    const getPatient = db.prepare('SELECT record FROM patients WHERE patient_key = ?');
    const putPatient = db.prepare('INSERT INTO patients (patient_key, record) VALUES (?, ?) ON CONFLICT (patient_key) DO UPDATE SET record = excluded.record');
    const getAppointment = db.prepare('SELECT * FROM appointments WHERE key = ?');
    const putAppointment = db.prepare(
      `INSERT INTO appointments (key, patient_key, date_of_service, status, check_keys, basis, updated_at)
       VALUES (@key, @patientKey, @dateOfService, @status, @checkKeys, @basis, @updatedAt)
       ON CONFLICT (key) DO UPDATE SET patient_key = excluded.patient_key, date_of_service = excluded.date_of_service,
         status = excluded.status, check_keys = excluded.check_keys, basis = excluded.basis, updated_at = excluded.updated_at`,
    );
    const unlinkAppointment = db.prepare('DELETE FROM appointment_checks WHERE appointment_key = ?');
    const linkAppointment = db.prepare('INSERT OR IGNORE INTO appointment_checks (appointment_key, check_key) VALUES (?, ?)');
    // Ordered here, not by SQL: SQLite 3.54 (better-sqlite3 13, Node 22 on) spends several µs opening a sorter or a join even for no rows.
    const ofPatient = db.prepare('SELECT * FROM appointments WHERE patient_key = ? AND key IS NOT ?');
    const holding = db.prepare(
      `SELECT a.* FROM appointment_checks l JOIN appointments a ON a.key = l.appointment_key WHERE l.check_key = ? AND a.status = 'booked'`,
    );
    const verifyingCoverage = db.prepare(
      `SELECT DISTINCT a.* FROM checks c JOIN appointment_checks l ON l.check_key = c.key JOIN appointments a ON a.key = l.appointment_key
       WHERE json_extract(c.row, '$.check.source.coverage') = ? AND a.status = 'booked'`,
    );
    // What a patient's history says of their plans (CheckOfPlan): neither the body, in check_results, nor the request's people.
    const ofPatientChecks = db.prepare(
      `SELECT key, state, json_extract(row, '$.written') IS NOT NULL AS written, json_extract(row, '$.planDroppedAt') AS plan_dropped_at,
         json_extract(row, '$.dueAt') AS due_at, json_extract(row, '$.resultAt') AS result_at,
         json_extract(row, '$.check.dateOfService') AS date_of_service, json_extract(row, '$.check.source.kind') AS source_kind,
         json_extract(row, '$.check.patient.identifiers[0].system') AS patient_system,
         json_extract(row, '$.check.coverage.payer.id') AS payer_id, json_extract(row, '$.check.coverage.payer.name') AS payer_name,
         json_extract(row, '$.check.coverage.period.start') AS period_start, json_extract(row, '$.check.coverage.period.end') AS period_end,
         json_extract(row, '$.check.subscriber.memberId') AS member_id
       FROM checks WHERE json_extract(row, '$.patientKey') = ? AND json_extract(row, '$.check.subscriber.memberId') IN (SELECT value FROM json_each(?))
         AND state IN (SELECT value FROM json_each(?))`,
    );
    const getCheck = db.prepare('SELECT key, row FROM checks WHERE key = ?');
    const putCheck = db.prepare(
      `INSERT INTO checks (key, state, row, correlation_id, coverage_fingerprint, result_at, due_at, updated_at)
       VALUES (@key, @state, @row, @correlationId, @coverageFingerprint, @resultAt, @dueAt, @updatedAt)
       ON CONFLICT (key) DO UPDATE SET state = excluded.state, row = excluded.row, correlation_id = excluded.correlation_id,
         coverage_fingerprint = excluded.coverage_fingerprint, result_at = excluded.result_at, due_at = excluded.due_at,
         updated_at = excluded.updated_at`,
    );
    // A body the step kept is not written again: no page of it changes.
    const putResult = db.prepare(
      'INSERT INTO check_results (key, result) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET result = excluded.result WHERE result IS NOT excluded.result',
    );
    const dropResult = db.prepare('DELETE FROM check_results WHERE key = ?');
    const byCorrelation = db.prepare('SELECT key, row FROM checks WHERE correlation_id = ?');
    // By the partial index of submitted checks (checks_submitted), the expression as it is indexed.
    const submittedUnder = db.prepare(`SELECT key, row FROM checks WHERE state = 'submitted' AND json_extract(row, '$.externalId') = ?`);
    const fresh = db.prepare(`SELECT key, row, result_at FROM checks WHERE coverage_fingerprint = ? AND result_at >= ? AND state IN ('result-stored', 'written', 'cancelled')`);
    const unfinished = db.prepare(
      `SELECT key, row FROM checks WHERE coverage_fingerprint = ? AND (state IN ('received', 'submitted', 'awaiting-result') OR (state = 'cancelled' AND (result_at IS NULL OR result_at < json_extract(row, '$.submittedAt'))))`,
    );
    const getMeta = db.prepare('SELECT value FROM meta WHERE key = ?');
    const setMeta = db.prepare('INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value');
    // One statement per combination of the columns changed (at most seven), prepared once.
    const updates = new Map<string, Statement>();

    return {
      async addMessage(message: NewMessage) {
        const inserted = insertMessage.run({ ...message, detail: message.detail ?? null, answer: message.answer ?? null });
        // Inserted: the row is what was given, under its new id; no need to read it back.
        if (inserted.changes === 1) return { message: { ...message, id: Number(inserted.lastInsertRowid) }, duplicate: false };
        return { message: messageFrom(messageByKey.get(message.kind, message.dedupeKey) as MessageRecord), duplicate: true };
      },
      async findMessage(kind, dedupeKey) {
        const row = messageByKey.get(kind, dedupeKey) as MessageRecord | undefined;
        return row && messageFrom(row);
      },
      async deadLettersNaming(prefix) {
        return (lettersNaming.all({ prefix }) as MessageRecord[]).map(messageFrom);
      },
      async updateMessage(id, change) {
        const sets = Object.entries({ status: change.status, detail: change.detail, answer: change.answer }).filter(([, v]) => v !== undefined);
        if (sets.length === 0) return;
        const sql = `UPDATE messages SET ${sets.map(([k]) => `${k} = ?`).join(', ')} WHERE id = ?`;
        let update = updates.get(sql);
        if (!update) updates.set(sql, (update = db.prepare(sql)));
        update.run(...sets.map(([, v]) => v), id);
      },
      async getPatient(patientKey) {
        const row = getPatient.get(patientKey) as { record: string } | undefined;
        return row ? PatientInsuranceRecord.parse(JSON.parse(row.record)) : undefined;
      },
      async putPatient(patientKey, record) {
        putPatient.run(patientKey, JSON.stringify(record));
      },
      async getAppointment(key) {
        const row = getAppointment.get(key) as AppointmentRecord | undefined;
        return row && appointmentFrom(row);
      },
      // Rows written are typed by the code that built them; rows read are parsed (the file may be older).
      async putAppointment(row) {
        putAppointment.run({ ...row, checkKeys: JSON.stringify(row.checkKeys), basis: JSON.stringify(row.basis) });
        unlinkAppointment.run(row.key);
        for (const key of row.checkKeys) linkAppointment.run(row.key, key);
      },
      async appointmentsOfPatient(patientKey, except) {
        const records = (ofPatient.all(patientKey, except ?? null) as AppointmentRecord[]).sort((a, b) => byText(a.date_of_service, b.date_of_service) || byText(a.key, b.key));
        return records.map(appointmentFrom);
      },
      async appointmentsHolding(checkKey) {
        return (holding.all(checkKey) as AppointmentRecord[]).map(appointmentFrom);
      },
      async appointmentsVerifying(coverage) {
        return (verifyingCoverage.all(coverage) as AppointmentRecord[]).map(appointmentFrom);
      },
      async getCheck(key) {
        const r = getCheck.get(key) as KeyedRow | undefined;
        return r && checkOf(r);
      },
      async putCheck(given) {
        // Validated here, as the PostgreSQL store does: a row read back from the cache is then one that passed.
        const row = validCheckRow(given);
        const { result, ...rest } = row;
        const text = JSON.stringify(rest);
        const body = resultText(result);
        putCheck.run({
          key: row.key,
          state: row.state,
          row: text,
          correlationId: row.correlationId ?? null,
          coverageFingerprint: row.coverageFingerprint,
          resultAt: row.resultAt ?? null,
          dueAt: row.dueAt ?? null,
          updatedAt: row.updatedAt,
        });
        if (body === null) dropResult.run(row.key);
        else putResult.run(row.key, body);
        checks.put(row, text);
      },
      async checksOfPatient(patientKey, memberIds, states) {
        return (ofPatientChecks.all(patientKey, JSON.stringify(memberIds), JSON.stringify(states)) as CheckOfPlanRecord[]).map(checkOfPlanFrom);
      },
      async checkByCorrelationId(correlationId) {
        const r = byCorrelation.get(correlationId) as KeyedRow | undefined;
        return r && checkOf(r);
      },
      async sentUnder(externalId) {
        const r = submittedUnder.get(externalId) as KeyedRow | undefined;
        return r && checkOf(r);
      },
      async freshResults(coverageFingerprint, since) {
        const newestFirst = (fresh.all(coverageFingerprint, since) as Array<KeyedRow & { result_at: string }>).sort((a, b) => byText(b.result_at, a.result_at));
        return newestFirst.map(checkOf).filter(hasCompletedResult);
      },
      async verifying(coverageFingerprint) {
        return (unfinished.all(coverageFingerprint) as KeyedRow[]).map(checkOf);
      },
      async getMeta(key) {
        return (getMeta.get(key) as { value: string } | undefined)?.value;
      },
      async setMeta(key, value) {
        setMeta.run(key, value);
      },
    };
  }

}

/** A check as the checks table keeps it: the row's JSON, and its verification body's apart. */
interface CheckRecord {
  row: string;
  result: string | null;
}

/** A check row's key and JSON, without its verification body (read only when the row is not in the cache). */
interface KeyedRow {
  key: string;
  row: string;
}

/** Checks the worker is likely to read again soon: those it has yet to move on. */
const CACHED_STATES: ReadonlySet<string> = new Set(['received', 'submitted', 'awaiting-result', 'result-stored']);
const CACHED_CHECKS = 1024;

/**
 * The checks under way as this connection last wrote or read them, parsed, with the JSON of the
 * row (body apart) as stored. A worker reads a check several times in its life (claimed, stepped,
 * found by a webhook): parsing it each time, body and all, was most of the store's CPU. A row is
 * taken from here only while its stored JSON is the same text; the store clears it on every
 * rollback and whenever another connection has committed (PRAGMA data_version), so the body,
 * not compared, is the one stored too. Callers get a copy of the row: its fields may be replaced,
 * never changed in place (rows are built with spreads, see applyStep).
 */
class CheckCache {
  private readonly rows = new Map<string, { text: string; row: CheckRow }>();

  get(key: string, text: string): CheckRow | undefined {
    const known = this.rows.get(key);
    return known && known.text === text ? { ...known.row } : undefined;
  }

  put(row: CheckRow, text: string): void {
    this.rows.delete(row.key);
    if (!CACHED_STATES.has(row.state)) return;
    this.rows.set(row.key, { text, row: { ...row } });
    // The oldest first out: a Map iterates in insertion order.
    if (this.rows.size > CACHED_CHECKS) this.rows.delete(this.rows.keys().next().value as string);
  }

  clear(): void {
    this.rows.clear();
  }

  forget(key: string): void {
    this.rows.delete(key);
  }
}

/**
 * The requests (a check row's `check`, the largest part of its schema) that passed CheckRow:
 * a step builds its row from one read with a spread, and keeps the request it read. Objects in a
 * row are replaced, never changed in place (see CheckCache).
 */
const validChecks = new WeakSet<object>();
const CheckRowAround = CheckRow.omit({ check: true });

/** CheckRow.parse, without walking again a request that has passed it. */
function validCheckRow(given: CheckRow): CheckRow {
  if (!validChecks.has(given.check)) {
    const row = CheckRow.parse(given);
    validChecks.add(row.check);
    return row;
  }
  const { check, ...around } = given;
  return { ...CheckRowAround.parse(around), check };
}

/** The JSON text each verification body was read from or written as (bodies are never changed in place). */
const resultTexts = new WeakMap<object, string>();

function checkFrom(r: CheckRecord): CheckRow {
  const fields = JSON.parse(r.row) as Record<string, unknown>;
  if (r.result !== null) fields.result = JSON.parse(r.result);
  const row = CheckRow.parse(fields);
  validChecks.add(row.check);
  if (r.result !== null && typeof row.result === 'object' && row.result !== null) resultTexts.set(row.result, r.result);
  return row;
}

/** A body already read or written is not stringified again: a step that keeps it writes the same text back. */
function resultText(result: unknown): string | null {
  if (result === undefined) return null;
  if (typeof result !== 'object' || result === null) return JSON.stringify(result);
  let text = resultTexts.get(result);
  if (text === undefined) resultTexts.set(result, (text = JSON.stringify(result)));
  return text;
}

interface AppointmentRecord {
  key: string;
  patient_key: string;
  date_of_service: string;
  status: string;
  check_keys: string;
  basis: string;
  updated_at: string;
}

const byText = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

function appointmentFrom(r: AppointmentRecord): AppointmentRow {
  return AppointmentRow.parse({
    key: r.key,
    patientKey: r.patient_key,
    dateOfService: r.date_of_service,
    status: r.status,
    checkKeys: JSON.parse(r.check_keys),
    basis: JSON.parse(r.basis),
    updatedAt: r.updated_at,
  });
}

/** A prune batch's work, and the checks it deleted or trimmed (out of the cache). */
type SqlitePruning = Record<Pruned, (batch: PruneBatch) => PruneDone & { checks?: string[] }>;

/** A field of a check row's JSON as the store's expression indexes name it; text compares as JavaScript compares it. */
const ROW_SQL: CheckRowSql = { field: (t, path) => `json_extract(${t}.row, '$.${path.join('.')}')`, asText: (expression) => expression };

/**
 * The prune's statements (see JobStore.prune). Checks and appointments are looked at a page at a
 * time in index order from where the last batch stopped, so those kept (a plan's latest, an
 * appointment holding one) are not read again at each batch of a first prune of a year's backlog.
 */
function sqlitePruning(db: Database): SqlitePruning {
  const messages = db.prepare(
    `DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE status = 'handled' AND received_at < @before ORDER BY received_at LIMIT @limit)`,
  );
  const pageOfChecks = db.prepare(
    `SELECT key, updated_at AS at FROM checks WHERE state IN ${RESTING_STATES_SQL} AND due_at IS NULL AND updated_at < @before
       AND (updated_at, key) > (@at, @key) ORDER BY updated_at, key LIMIT @limit`,
  );
  // Of a page, those done with before the cutoff: a check's result, its visit and every visit that holds it before then.
  const pastCutoff = `c.key IN (SELECT value FROM json_each(@keys)) AND ${doneBeforeSql(ROW_SQL, 'c', { before: '@before', day: '@day' })}`;
  const checksToGo = db.prepare(`SELECT c.key FROM checks c WHERE ${pastCutoff} AND NOT ${planLatestSql(ROW_SQL, 'c')} AND NOT ${endingLeftSql(ROW_SQL, 'c')}`).pluck();
  const resultsToTrim = db.prepare(
    `SELECT c.key FROM checks c JOIN check_results r ON r.key = c.key WHERE ${pastCutoff}
       AND ${statusOfKindSql("json_extract(r.result, '$.status')", ['completed', 'partial'])} AND json_type(r.result, '$.result') <> 'null'`,
  ).pluck();
  const trimResults = db.prepare(`UPDATE check_results SET result = json_remove(result, '$.result') WHERE key IN (SELECT value FROM json_each(?))`);
  const dropChecks = db.prepare('DELETE FROM checks WHERE key IN (SELECT value FROM json_each(?))');
  const dropResults = db.prepare('DELETE FROM check_results WHERE key IN (SELECT value FROM json_each(?))');
  const dropCheckLinks = db.prepare('DELETE FROM appointment_checks WHERE check_key IN (SELECT value FROM json_each(?))');
  const pageOfAppointments = db.prepare(
    `SELECT key, date_of_service AS at FROM appointments WHERE date_of_service < @day AND (date_of_service, key) > (@at, @key) ORDER BY date_of_service, key LIMIT @limit`,
  );
  // A cancellation that overtook its booking names no visit (''): it stays the retention period from when it came, as its booking may come late.
  const appointmentsToGo = db.prepare(
    `SELECT a.key FROM appointments a WHERE a.key IN (SELECT value FROM json_each(@keys)) AND (a.date_of_service <> '' OR a.updated_at < @before)
       AND NOT EXISTS (SELECT 1 FROM appointment_checks l JOIN checks c ON c.key = l.check_key WHERE l.appointment_key = a.key)`,
  ).pluck();
  const dropAppointments = db.prepare('DELETE FROM appointments WHERE key IN (SELECT value FROM json_each(?))');
  const dropAppointmentLinks = db.prepare('DELETE FROM appointment_checks WHERE appointment_key IN (SELECT value FROM json_each(?))');
  /** A page from `after` ([at, key] as the last page ended), and where the next begins: none once a page is short. */
  const paged = (page: Statement, batch: PruneBatch, day: string) => {
    const [at, key] = batch.after === undefined ? ['', ''] : (JSON.parse(batch.after) as [string, string]);
    const rows = page.all({ before: batch.before, day, at, key, limit: batch.limit }) as { key: string; at: string }[];
    const last = rows[rows.length - 1];
    return { keys: JSON.stringify(rows.map((r) => r.key)), ...(rows.length === batch.limit && last && { after: JSON.stringify([last.at, last.key]) }) };
  };
  return {
    messages: (batch) => {
      const pruned = messages.run({ before: batch.before, limit: batch.limit }).changes;
      // Each batch starts again from the oldest: those it deleted are gone, and none are kept.
      return { pruned, ...(pruned === batch.limit && { after: 'more' }) };
    },
    checks: (batch) => {
      const day = batch.before.slice(0, 10);
      const page = paged(pageOfChecks, batch, day);
      const gone = checksToGo.all({ keys: page.keys, before: batch.before, day }) as string[];
      const keys = JSON.stringify(gone);
      if (gone.length > 0) (dropChecks.run(keys), dropResults.run(keys), dropCheckLinks.run(keys));
      const trimmed = resultsToTrim.all({ keys: page.keys, before: batch.before, day }) as string[];
      if (trimmed.length > 0) trimResults.run(JSON.stringify(trimmed));
      return { pruned: gone.length, trimmed: trimmed.length, checks: [...gone, ...trimmed], ...(page.after !== undefined && { after: page.after }) };
    },
    appointments: (batch) => {
      const day = batch.before.slice(0, 10);
      const page = paged(pageOfAppointments, batch, day);
      const gone = appointmentsToGo.all({ keys: page.keys, before: batch.before }) as string[];
      const keys = JSON.stringify(gone);
      if (gone.length > 0) (dropAppointments.run(keys), dropAppointmentLinks.run(keys));
      return { pruned: gone.length, ...(page.after !== undefined && { after: page.after }) };
    },
  };
}
