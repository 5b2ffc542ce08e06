import { performance } from 'node:perf_hooks';
import { Client, DatabaseError, Pool, type PoolClient, type QueryResult, type QueryResultRow } from 'pg';
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
  takeToken,
  type AppointmentStatus,
  type CheckFilter,
  type CheckOfPlan,
  type CheckOfPlanRecord,
  type CheckRowSql,
  type CheckState,
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
import { LEASE_ORPHANED, LiveLock } from './pg-live-lock';
import { expectSchema, migrate, PG_SCHEMA_VERSION, schemaVersion } from './pg-schema';
import { inTransaction, lockKey, storeError, type Queryable } from './pg-transaction';

/**
 * pg's Client, but one whose start fails closes its connection. The server asking for a password
 * none was given for (no PGPASSWORD, none in the URL) fails in pg, on this side, with the
 * connection left open, which the server closes only at its authentication_timeout: `jobs`, or a
 * serve refused at start, said nothing for a minute, then named a SASL message. It is said at once,
 * naming where the password goes.
 */
class ClosingClient extends Client {
  override connect(): Promise<Client>;
  override connect(callback: (err: Error | null, client?: Client) => void): void;
  override connect(callback?: (err: Error | null, client?: Client) => void): Promise<Client> | void {
    if (!callback) return new Promise((resolve, reject) => this.connect((err) => (err ? reject(err) : resolve(this))));
    let askedForPassword = false;
    const asked = () => (askedForPassword = true);
    for (const request of ['authenticationCleartextPassword', 'authenticationMD5Password', 'authenticationSASL']) this.connection.once(request, asked);
    super.connect((err: Error | null) => {
      if (!err) return callback(null, this);
      void this.end().catch(() => undefined);
      const refusedByServer = err instanceof DatabaseError;
      callback(askedForPassword && !refusedByServer && !this.password ? new Error('the database asks for a password: set PGPASSWORD, or the whole URL in DENTAL_ELIG_STORE') : err);
    });
  }
}

/**
 * The job store on PostgreSQL, for several instances sharing the work. Claims are plain
 * `FOR UPDATE SKIP LOCKED` leases on the checks table: the store is a table of states with due
 * times, not a queue of jobs, so a queue library (pg-boss) would be a second copy of the state to
 * keep in step. A worker's leases carry its instance's live lock, so those of an instance that
 * died go on at once, not when they run out. A transaction locks each patient, appointment and
 * check it reads until it commits, so two instances handling messages for one patient apply them
 * one after the other, and a check's step never overwrites a webhook's.
 */
export class PgJobStore implements JobStore {
  private closed = false;
  /** This instance's sign of life, taken when its worker begins: see LiveLock. */
  private live: LiveLock | undefined;
  /** The workers that claimed checks through this store: their leases are this instance's. */
  private readonly owners = new Set<string>();

  /** Connects to a postgres:// URL and creates or migrates the schema; with create false (a reader), finds it at this program's version. */
  static async open(url: string, options: { poolSize?: number; queryTimeoutMs?: number; create?: boolean } = {}): Promise<PgJobStore> {
    const pool = new Pool({
      Client: ClosingClient,
      connectionString: url,
      max: options.poolSize ?? 10,
      connectionTimeoutMillis: 10_000,
      // A database gone without a word (a failover, a network that drops packets) would hold a
      // query, and the worker's claim with it, until TCP gave up: hours. Its query fails instead,
      // its connection is dropped, and keepalive finds the dead ones sooner.
      query_timeout: options.queryTimeoutMs ?? 60_000,
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
      application_name: 'dental-elig',
    });
    // A pooled connection the server drops while idle is reported here; the next query reconnects.
    pool.on('error', () => undefined);
    // The server ending a connection (PostgreSQL stopping, a failover) is also emitted on the
    // client, and the pool listens only while it is idle: a client handed to a transaction, even
    // in the moment before the transaction resumes, would end the process with it. The query
    // under way or the next fails instead, and the pool does not take the connection back.
    pool.on('connect', (client) => client.on('error', () => undefined));
    let from: number | undefined;
    try {
      if (options.create === false) await expectSchema(pool);
      else from = await migrate(pool);
      const store = new PgJobStore(pool, url, from !== undefined && from > 0 && from < PG_SCHEMA_VERSION ? from : undefined);
      await store.readClock();
      return store;
    } catch (err) {
      await pool.end();
      throw err;
    }
  }

  private constructor(
    private readonly pool: Pool,
    private readonly url: string,
    readonly upgradedFrom: number | undefined,
  ) {}

  /** The database's time as last read, and this process's monotonic time when it was: see now(). Before the first reading, this machine's. */
  private clock = { dbMs: Date.now(), at: performance.now(), read: false };
  private clockTimer: NodeJS.Timeout | undefined;

  /**
   * The database's time, which every instance sharing it goes by. A lease is judged free, and a
   * check due, by the clock of the instance that claims it: one whose clock ran ahead of another's
   * by more than a lease took the other's live checks and sent them again, and one behind took up a
   * dead instance's checks as late as it was behind. Read at open and every CLOCK_READ_MS since,
   * and carried on between by this process's monotonic clock, which NTP's steps do not move.
   */
  now(): Date {
    return new Date(this.clock.dbMs + (performance.now() - this.clock.at));
  }

  private async readClock(): Promise<void> {
    // Timed from a connection in hand: the wait for one, under load, is no part of the round trip.
    const client = await this.pool.connect();
    const before = performance.now();
    const { rows } = await client.query<{ ms: number }>('SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms').catch((err: Error) => {
      // A connection that failed is not put back in the pool.
      client.release(err);
      throw err;
    });
    const after = performance.now();
    client.release();
    const ms = rows[0]?.ms;
    // A reading held up (a slow network, a busy server) says little of when the database read it: the last is kept.
    // The first is taken all the same: off by half its round trip at most, where this machine's clock, kept, may be off by minutes, and unsaid.
    if (typeof ms === 'number' && Number.isFinite(ms) && (after - before < CLOCK_READ_WITHIN_MS || !this.clock.read)) this.clock = { dbMs: ms, at: (before + after) / 2, read: true };
  }

  /** The schema version the database is at. */
  schemaVersion(): Promise<number> {
    return schemaVersion(this.pool);
  }

  transaction<T>(work: (tx: StoreTx) => Promise<T>): Promise<T> {
    return inTransaction(this.pool, (db) => work(new PgTx(db)));
  }

  async claimDue(options: ClaimOptions): Promise<CheckRow[]> {
    this.owners.add(options.owner);
    let tookOver = 0;
    const count = (taken: { rows: CheckRow[]; tookOver: number }) => ((tookOver += taken.tookOver), taken.rows);
    // One transaction: the server gone between the chart's work and the service's would leave the chart's
    // leased to this worker, which never got it, and no worker would take it until those leases ran out.
    const rows = await inTransaction(this.pool, (db) => {
      // Counted afresh at each run: one run again after a deadlock would count what the rolled-back run took.
      tookOver = 0;
      return claimInTurn(options, async (work, limit) =>
        count(work === 'chart' ? await this.claim(db, `state IN ${CHART_WORK_SQL}`, [], limit, options) : await this.claim(db, 'state = ANY($6)', [SERVICE_WORK_STATES], limit, options)),
      );
    });
    if (tookOver > 0) options.tookOver?.(tookOver);
    return rows;
  }

  /** Leases up to `limit` due checks in the states `which` names (its parameters from $6), the most overdue first. */
  private async claim(db: Queryable, which: string, params: unknown[], limit: number, options: { now: string; owner: string; leaseMs: number }): Promise<{ rows: CheckRow[]; tookOver: number }> {
    const until = new Date(Date.parse(options.now) + options.leaseMs).toISOString();
    // One statement: rows another instance is claiming (or a transaction is changing) are skipped, not waited for.
    // A row another worker still had leased (free: its lease ran out, or its lock is gone) is counted as taken over.
    const { rows } = await db.query<{ row: unknown; taken_over: boolean }>(
      `WITH due AS (
         SELECT key, lease_owner IS NOT NULL AND lease_owner <> $3 AS taken_over FROM checks
         WHERE due_at <= $1 AND ${LEASE_FREE} AND ${which}
         ORDER BY due_at LIMIT $2
         FOR UPDATE SKIP LOCKED
       )
       UPDATE checks SET lease_owner = $3, lease_until = $4, lease_lock = $5, leased_at = now() FROM due WHERE checks.key = due.key
       RETURNING checks.row, due.taken_over`,
      [options.now, limit, options.owner, until, this.live?.key ?? null, ...params],
    );
    return { rows: rows.map((r) => CheckRow.parse(r.row)).sort((a, b) => Date.parse(a.dueAt ?? '') - Date.parse(b.dueAt ?? '')), tookOver: rows.filter((r) => r.taken_over).length };
  }

  async beginWork(): Promise<number> {
    if (this.live) return 0;
    if (this.closed) throw new Error('the job store is closed');
    const live = await LiveLock.take(this.url, (key) => void this.holdUnder(key));
    if (this.closed) {
      // Closed while the lock was being taken: close() did not see it, and it would hold the process open.
      await live.close();
      throw new Error('the job store is closed');
    }
    this.live = live;
    // A database out of reach keeps the last reading, carried on: the next read once it answers.
    this.clockTimer = setInterval(() => void this.readClock().catch(() => undefined), CLOCK_READ_MS).unref();
    const { rowCount } = await this.query(`UPDATE checks SET lease_owner = NULL, lease_until = NULL, lease_lock = NULL, leased_at = NULL WHERE ${LEASE_ORPHANED}`);
    return rowCount ?? 0;
  }

  /**
   * The live lock held again after it was lost on every connection: the leases this instance took
   * meanwhile carry no lock, and those it held before carry the key it lost, which its own claims
   * meanwhile took again as an orphan's. Each is put under `key`, so another instance takes them at
   * once if this one dies, not when they run out (two minutes, kept up while a step runs). One
   * another instance took meanwhile has another owner and stays its.
   */
  private async holdUnder(key: number): Promise<void> {
    if (this.owners.size === 0) return;
    // The database gone again: the leases stay as they are, plain ones running out as before.
    await this.query('UPDATE checks SET lease_lock = $1 WHERE lease_owner = ANY($2) AND lease_lock IS DISTINCT FROM $1', [key, [...this.owners]]).catch(() => undefined);
  }

  async release(key: string, owner: string): Promise<void> {
    await this.query('UPDATE checks SET lease_owner = NULL, lease_until = NULL, lease_lock = NULL, leased_at = NULL WHERE key = $1 AND lease_owner = $2', [key, owner]);
  }

  async nextDueAt(): Promise<string | undefined> {
    const { rows } = await this.query<{ next: Date | null }>(
      `SELECT MIN(GREATEST(due_at, CASE WHEN ${LEASE_ORPHANED} THEN NULL ELSE lease_until END)) AS next FROM checks WHERE due_at IS NOT NULL AND state = ANY($1)`,
      [WORKABLE_STATES],
    );
    return rows[0]?.next?.toISOString() ?? undefined;
  }

  async listChecks(filter: CheckFilter = {}): Promise<CheckRow[]> {
    const states = filter.states ?? [];
    const params: unknown[] = [filter.limit ?? null];
    const clauses: string[] = [];
    if (states.length > 0) clauses.push(`state = ANY($${params.push(states)})`);
    if (filter.changedAfter !== undefined) clauses.push(`updated_at > $${params.push(filter.changedAfter)}::timestamptz`);
    const where = clauses.length > 0 ? `WHERE ${clauses.join(' AND ')}` : '';
    const { rows } = await this.query<{ row: unknown }>(`SELECT row FROM checks ${where} ORDER BY updated_at DESC, key LIMIT $1`, params);
    return rows.map((r) => CheckRow.parse(r.row));
  }

  async listAppointments(status?: AppointmentStatus): Promise<AppointmentRow[]> {
    const { rows } = status
      ? await this.query<{ row: unknown }>('SELECT row FROM appointments WHERE status = $1 ORDER BY updated_at DESC', [status])
      : await this.query<{ row: unknown }>('SELECT row FROM appointments ORDER BY updated_at DESC');
    return rows.map((r) => AppointmentRow.parse(r.row));
  }

  async listMessages(filter: { status?: MessageStatus; kind?: MessageKind; limit?: number } = {}): Promise<MessageRow[]> {
    const { rows } = await this.query<PgMessageRecord>(
      `SELECT * FROM messages WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR kind = $2) ORDER BY id DESC LIMIT $3`,
      [filter.status ?? null, filter.kind ?? null, filter.limit ?? null],
    );
    return rows.map(pgMessageFrom);
  }

  async getMessage(id: number): Promise<MessageRow | undefined> {
    const { rows } = await this.query<PgMessageRecord>('SELECT * FROM messages WHERE id = $1', [id]);
    return rows[0] && pgMessageFrom(rows[0]);
  }

  async counts(now: string): Promise<StoreCounts> {
    const tally = async (sql: string, params: string[] = []) => Object.fromEntries((await this.query<{ k: string; n: number }>(sql, params)).rows.map((r) => [r.k, r.n]));
    const due = await this.query<{ n: number; oldest: Date | null }>(
      `SELECT COUNT(*)::integer AS n, MIN(due_at) AS oldest FROM checks
       WHERE due_at <= $1 AND ${LEASE_FREE} AND state = ANY($2)`,
      [now, WORKABLE_STATES],
    );
    // Visits still to come somewhere: one whose day is over waits for nothing a person can do, and an alert on it would not clear.
    const waiting = await tally(
      `SELECT status AS k, COUNT(*)::integer AS n FROM appointments WHERE status IN ('awaiting-insurance', 'awaiting-correction') AND date_of_service >= $1 GROUP BY status`,
      [earliestDateAnywhere(new Date(now))],
    );
    const forAPerson = await this.query<{ n: number }>(`SELECT COUNT(*)::integer AS n FROM checks c WHERE c.state IN ${FOR_A_PERSON_SQL} AND NOT ${dismissedSql(ROW_SQL, 'c')}`);
    return {
      checks: await tally('SELECT state AS k, COUNT(*)::integer AS n FROM checks GROUP BY state'),
      messages: await tally(`SELECT kind || ':' || status AS k, COUNT(*)::integer AS n FROM messages GROUP BY kind, status`),
      awaitingInsurance: waiting['awaiting-insurance'] ?? 0,
      awaitingCorrection: waiting['awaiting-correction'] ?? 0,
      forAPerson: forAPerson.rows[0]?.n ?? 0,
      due: due.rows[0]?.n ?? 0,
      oldestDueAt: due.rows[0]?.oldest?.toISOString() ?? undefined,
    };
  }

  takeRateToken(bucket: string, perSecond: number, now: string): Promise<number> {
    return inTransaction(this.pool, async (db) => {
      await db.query('INSERT INTO rate_buckets (bucket, tokens, at_ms) VALUES ($1, $2, $3) ON CONFLICT (bucket) DO NOTHING', [bucket, perSecond, Date.parse(now)]);
      const { rows } = await db.query<{ tokens: number; atMs: number }>('SELECT tokens, at_ms AS "atMs" FROM rate_buckets WHERE bucket = $1 FOR UPDATE', [bucket]);
      const next = takeToken(rows[0], perSecond, now);
      await db.query('UPDATE rate_buckets SET tokens = $2, at_ms = $3 WHERE bucket = $1', [bucket, next.bucket.tokens, next.bucket.atMs]);
      return next.waitMs;
    });
  }

  /**
   * One batch, in a transaction of its own: see JobStore.prune. Several instances may prune at once,
   * and messages and workers change what is looked at meanwhile: a row another transaction holds
   * (a message's lock, or its row lock) is left for the next run, and one is deleted only as it is
   * when the lock is taken (the conditions read again by the DELETE).
   */
  prune(options: PruneBatch & { kind: Pruned }): Promise<PruneDone> {
    return inTransaction(this.pool, (db) => PG_PRUNING[options.kind](db, options));
  }

  /** A statement of its own, outside a transaction: the server out of reach fails it as it fails a transaction, StoreUnavailableError. */
  private query<R extends QueryResultRow>(text: string, values?: unknown[]): Promise<QueryResult<R>> {
    return this.pool.query<R>(text, values).catch((err: unknown) => {
      throw storeError(err);
    });
  }

  async ping(): Promise<void> {
    await this.query('SELECT 1');
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.clockTimer);
    // The live lock let go whatever ending the pool throws: held on, it kept this instance looking alive, its leases from the others.
    await closeEachOrThrow([
      { name: 'the pool', close: () => this.pool.end() },
      { name: 'the live lock', close: () => this.live?.close() },
    ]);
  }

  async extendLease(options: { key: string; owner: string; now: string; leaseMs: number }): Promise<boolean> {
    const until = new Date(Date.parse(options.now) + options.leaseMs).toISOString();
    const { rowCount } = await this.query('UPDATE checks SET lease_until = $3 WHERE key = $1 AND lease_owner = $2', [options.key, options.owner, until]);
    return (rowCount ?? 0) > 0;
  }
}

/** How often a working instance reads the database's clock again: a change of it (the database's host stepped by NTP) is followed within this. */
const CLOCK_READ_MS = 60_000;
/** A reading whose round trip took longer is not taken: the database's time then lies anywhere in it. */
const CLOCK_READ_WITHIN_MS = 1000;

/** A lease no other worker holds at $1: none, run out, or taken by an instance that is gone. */
const LEASE_FREE = `(lease_until IS NULL OR lease_until <= $1 OR ${LEASE_ORPHANED})`;

/** One transaction's view of the store, on the connection that holds it. */
class PgTx implements StoreTx {
  constructor(private readonly db: PoolClient) {}

  async addMessage(message: NewMessage): Promise<{ message: MessageRow; duplicate: boolean }> {
    // A concurrent insert of the same key waits for the other transaction, then finds its row.
    const dedupeKey = Buffer.from(message.dedupeKey, 'utf8');
    for (;;) {
      const inserted = await this.db.query<PgMessageRecord>(
        `INSERT INTO messages (kind, dedupe_key, received_at, raw, status, detail, answer) VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (kind, dedupe_key) DO NOTHING RETURNING *`,
        [message.kind, dedupeKey, message.receivedAt, Buffer.from(message.raw, 'utf8'), message.status, message.detail ?? null, message.answer ?? null],
      );
      if (inserted.rows[0]) return { message: pgMessageFrom(inserted.rows[0]), duplicate: false };
      const found = await this.findMessage(message.kind, message.dedupeKey);
      if (found) return { message: found, duplicate: true };
      // The earlier one was pruned (another instance's prune committed between the two statements): this one is new.
    }
  }

  async findMessage(kind: MessageKind, dedupeKey: string): Promise<MessageRow | undefined> {
    const { rows } = await this.db.query<PgMessageRecord>('SELECT * FROM messages WHERE kind = $1 AND dedupe_key = $2', [kind, Buffer.from(dedupeKey, 'utf8')]);
    return rows[0] && pgMessageFrom(rows[0]);
  }

  async deadLettersNaming(prefix: string): Promise<MessageRow[]> {
    const { rows } = await this.db.query<PgMessageRecord>("SELECT * FROM messages WHERE status = 'dead' AND kind = 'fhir-notification' AND starts_with(detail, $1)", [prefix]);
    return rows.map(pgMessageFrom);
  }

  async updateMessage(id: number, change: Partial<Pick<MessageRow, 'status' | 'detail' | 'answer'>>): Promise<void> {
    await this.db.query('UPDATE messages SET status = COALESCE($2, status), detail = COALESCE($3, detail), answer = COALESCE($4, answer) WHERE id = $1', [
      id,
      change.status ?? null,
      change.detail ?? null,
      change.answer ?? null,
    ]);
  }

  async getPatient(patientKey: string): Promise<PatientInsuranceRecord | undefined> {
    await lockKey(this.db, 'patient', patientKey);
    const { rows } = await this.db.query<{ record: unknown }>('SELECT record FROM patients WHERE patient_key = $1', [patientKey]);
    return rows[0] && PatientInsuranceRecord.parse(rows[0].record);
  }

  async putPatient(patientKey: string, record: PatientInsuranceRecord): Promise<void> {
    await this.db.query('INSERT INTO patients (patient_key, record) VALUES ($1, $2) ON CONFLICT (patient_key) DO UPDATE SET record = excluded.record', [
      patientKey,
      jsonText(record),
    ]);
  }

  async getAppointment(key: string): Promise<AppointmentRow | undefined> {
    await lockKey(this.db, 'appointment', key);
    const { rows } = await this.db.query<{ row: unknown }>('SELECT row FROM appointments WHERE key = $1', [key]);
    return rows[0] && AppointmentRow.parse(rows[0].row);
  }

  async putAppointment(row: AppointmentRow): Promise<void> {
    const valid = AppointmentRow.parse(row);
    await this.db.query(
      `INSERT INTO appointments (key, patient_key, date_of_service, status, row, updated_at) VALUES ($1, $2, $3, $4, $5, $6)
       ON CONFLICT (key) DO UPDATE SET patient_key = excluded.patient_key, date_of_service = excluded.date_of_service,
         status = excluded.status, row = excluded.row, updated_at = excluded.updated_at`,
      [valid.key, valid.patientKey, valid.dateOfService, valid.status, jsonText(valid), valid.updatedAt],
    );
    await this.db.query('DELETE FROM appointment_checks WHERE appointment_key = $1', [valid.key]);
    await this.db.query('INSERT INTO appointment_checks (appointment_key, check_key) SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING', [valid.key, valid.checkKeys]);
  }

  async appointmentsOfPatient(patientKey: string, except?: string): Promise<AppointmentRow[]> {
    const { rows } = await this.db.query<{ row: unknown }>('SELECT row FROM appointments WHERE patient_key = $1 AND key IS DISTINCT FROM $2 ORDER BY date_of_service, key', [
      patientKey,
      except ?? null,
    ]);
    return rows.map((r) => AppointmentRow.parse(r.row));
  }

  async appointmentsHolding(checkKey: string): Promise<AppointmentRow[]> {
    const { rows } = await this.db.query<{ row: unknown }>(
      `SELECT a.row FROM appointment_checks l JOIN appointments a ON a.key = l.appointment_key WHERE l.check_key = $1 AND a.status = 'booked'`,
      [checkKey],
    );
    return rows.map((r) => AppointmentRow.parse(r.row));
  }

  async appointmentsVerifying(coverage: string): Promise<AppointmentRow[]> {
    const { rows } = await this.db.query<{ row: unknown }>(
      `SELECT DISTINCT ON (a.key) a.row FROM checks c JOIN appointment_checks l ON l.check_key = c.key JOIN appointments a ON a.key = l.appointment_key
       WHERE c.row->'check'->'source'->>'coverage' = $1 AND a.status = 'booked'`,
      [coverage],
    );
    return rows.map((r) => AppointmentRow.parse(r.row));
  }

  async getCheck(key: string): Promise<CheckRow | undefined> {
    await lockKey(this.db, 'check', key);
    return checkWhere(this.db, 'key = $1', [key]);
  }

  async putCheck(row: CheckRow): Promise<void> {
    const valid = CheckRow.parse(row);
    await this.db.query(
      `INSERT INTO checks (key, state, row, correlation_id, coverage_fingerprint, result_at, due_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
       ON CONFLICT (key) DO UPDATE SET state = excluded.state, row = excluded.row, correlation_id = excluded.correlation_id,
         coverage_fingerprint = excluded.coverage_fingerprint, result_at = excluded.result_at, due_at = excluded.due_at,
         updated_at = excluded.updated_at`,
      [valid.key, valid.state, jsonText(valid), valid.correlationId ?? null, valid.coverageFingerprint, valid.resultAt ?? null, valid.dueAt ?? null, valid.updatedAt],
    );
  }

  async sentUnder(externalId: string): Promise<CheckRow | undefined> {
    const { rows } = await this.db.query<{ key: string }>(`SELECT key FROM checks WHERE state = 'submitted' AND row->>'externalId' = $1`, [externalId]);
    if (!rows[0]) return undefined;
    // Locked like getCheck, and read again: its send may have been answered meanwhile.
    await lockKey(this.db, 'check', rows[0].key);
    return checkWhere(this.db, `key = $1 AND state = 'submitted' AND row->>'externalId' = $2`, [rows[0].key, externalId]);
  }

  async checksOfPatient(patientKey: string, memberIds: readonly string[], states: readonly CheckState[]): Promise<CheckOfPlan[]> {
    // What a patient's history says of their plans (CheckOfPlan): neither the body nor the request's people cross the wire.
    // The row read once for its fields (json_to_record): each path into a json row parses all of it again, body and all.
    const { rows } = await this.db.query<CheckOfPlanRecord>(
      `SELECT key, state, f.written IS NOT NULL AS written, f."planDroppedAt" AS plan_dropped_at, f."dueAt" AS due_at, f."resultAt" AS result_at,
         f."check"->>'dateOfService' AS date_of_service,
         f."check"#>>'{source,kind}' AS source_kind, f."check"#>>'{patient,identifiers,0,system}' AS patient_system,
         f."check"#>>'{coverage,payer,id}' AS payer_id, f."check"#>>'{coverage,payer,name}' AS payer_name,
         f."check"#>>'{coverage,period,start}' AS period_start, f."check"#>>'{coverage,period,end}' AS period_end,
         f."check"#>>'{subscriber,memberId}' AS member_id
       FROM checks, json_to_record(row) AS f(written json, "planDroppedAt" text, "dueAt" text, "resultAt" text, "check" jsonb)
       WHERE row->>'patientKey' = $1 AND row->'check'->'subscriber'->>'memberId' = ANY($2) AND state = ANY($3)`,
      [patientKey, memberIds, states],
    );
    return rows.map(checkOfPlanFrom);
  }

  async checkByCorrelationId(correlationId: string): Promise<CheckRow | undefined> {
    // Locked like getCheck: find the key, lock it, and read again in case the id moved meanwhile.
    for (;;) {
      const { rows } = await this.db.query<{ key: string }>('SELECT key FROM checks WHERE correlation_id = $1', [correlationId]);
      if (!rows[0]) return undefined;
      await lockKey(this.db, 'check', rows[0].key);
      const row = await checkWhere(this.db, 'key = $1 AND correlation_id = $2', [rows[0].key, correlationId]);
      if (row) return row;
    }
  }

  async freshResults(coverageFingerprint: string, since: string): Promise<CheckRow[]> {
    const { rows } = await this.db.query<{ row: unknown }>(
      `SELECT row FROM checks WHERE coverage_fingerprint = $1 AND result_at >= $2 AND state IN ('result-stored', 'written', 'cancelled') ORDER BY result_at DESC`,
      [coverageFingerprint, since],
    );
    return rows.map((r) => CheckRow.parse(r.row)).filter(hasCompletedResult);
  }

  async verifying(coverageFingerprint: string): Promise<CheckRow[]> {
    const { rows } = await this.db.query<{ row: unknown }>(
      `SELECT row FROM checks WHERE coverage_fingerprint = $1 AND (state IN ('received', 'submitted', 'awaiting-result') OR (state = 'cancelled' AND (result_at IS NULL OR result_at < (row->>'submittedAt')::timestamptz)))`,
      [coverageFingerprint],
    );
    return rows.map((r) => CheckRow.parse(r.row));
  }

  async getMeta(key: string): Promise<string | undefined> {
    const { rows } = await this.db.query<{ value: string }>('SELECT value FROM meta WHERE key = $1', [key]);
    return rows[0]?.value;
  }

  async setMeta(key: string, value: string): Promise<void> {
    await this.db.query('INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value', [key, value]);
  }
}

async function checkWhere(db: Queryable, where: string, params: unknown[]): Promise<CheckRow | undefined> {
  const { rows } = await db.query<{ row: unknown }>(`SELECT row FROM checks WHERE ${where}`, params);
  return rows[0] && CheckRow.parse(rows[0].row);
}

/** The messages table as PostgreSQL returns it: a bigint id as text, the raw text and dedupe key as bytes. */
type PgMessageRecord = Omit<MessageRecord, 'id' | 'raw' | 'dedupe_key'> & { id: string; raw: Buffer; dedupe_key: Buffer };

/**
 * A document as a json column takes it. `json` keeps a \u0000 escape as written, but every `->>`
 * on the document (the expression indexes, each query's filters) fails on one anywhere in it
 * ("cannot be converted to text"): a NUL a service result or a chart's resource carried (a broken
 * payer page, a hostile sender) would keep its check, patient or appointment out of the store for
 * good. It is kept as U+FFFD, the character for one that could not be kept. Each escape is read
 * from the left, so an escaped backslash before "u0000" (a text that says \u0000) stays as it is.
 */
function jsonText(value: unknown): string {
  const text = JSON.stringify(value);
  return text.includes('\\u0000') ? text.replace(/\\\\|\\u0000/g, (escape) => (escape === '\\u0000' ? '\\ufffd' : escape)) : text;
}

function pgMessageFrom(r: PgMessageRecord): MessageRow {
  return messageFrom({ ...r, id: Number(r.id), raw: r.raw.toString('utf8'), dedupe_key: r.dedupe_key.toString('utf8') });
}

/**
 * A field of a check row's JSON as text, as the expression indexes name it (checks_patient); dates and
 * instants kept as text compare as JavaScript compares them, code point by code point, not by the database's locale.
 */
const ROW_SQL: CheckRowSql = {
  field: (t, path) => `(${t}.row${path.slice(0, -1).map((step) => `->'${step}'`).join('')}->>'${path[path.length - 1] ?? ''}')`,
  asText: (expression) => `(${expression} COLLATE "C")`,
};

/** A page of keys from `after` ([at, key] as the last page ended), and where the next begins: none once a page is short. */
async function pagedKeys(db: Queryable, sql: string, batch: PruneBatch, from: string, bound: string): Promise<{ keys: string[]; after?: string }> {
  const [at, key] = batch.after === undefined ? [from, ''] : (JSON.parse(batch.after) as [string, string]);
  const { rows } = await db.query<{ key: string; at: Date | string }>(sql, [bound, at, key, batch.limit]);
  const last = rows[rows.length - 1];
  const atText = (value: Date | string) => (value instanceof Date ? value.toISOString() : value);
  return { keys: rows.map((r) => r.key), ...(rows.length === batch.limit && last && { after: JSON.stringify([atText(last.at), last.key]) }) };
}

/** Those of `keys` no other transaction holds (lockKey's lock), now held by this one: the others wait for the next run. */
async function lockedNow(db: Queryable, namespace: string, keys: string[]): Promise<string[]> {
  const { rows } = await db.query<{ key: string }>(`SELECT key FROM unnest($1::text[]) AS key WHERE pg_try_advisory_xact_lock(hashtextextended($2 || ':' || key, 0))`, [keys, namespace]);
  return rows.map((r) => r.key);
}

const PG_PRUNING: Record<Pruned, (db: Queryable, batch: PruneBatch) => Promise<PruneDone>> = {
  async messages(db, batch) {
    const { rowCount } = await db.query(
      `DELETE FROM messages WHERE id IN (
         SELECT id FROM messages WHERE status = 'handled' AND received_at COLLATE "C" < $1 ORDER BY received_at COLLATE "C" LIMIT $2 FOR UPDATE SKIP LOCKED)`,
      [batch.before, batch.limit],
    );
    const pruned = rowCount ?? 0;
    return { pruned, ...(pruned === batch.limit && { after: 'more' }) };
  },
  async checks(db, batch) {
    const day = batch.before.slice(0, 10);
    const page = await pagedKeys(
      db,
      `SELECT key, updated_at AS at FROM checks WHERE state IN ${RESTING_STATES_SQL} AND due_at IS NULL AND updated_at < $1
         AND (updated_at, key) > ($2::timestamptz, $3) ORDER BY updated_at, key LIMIT $4`,
      batch,
      '-infinity',
      batch.before,
    );
    const keys = await lockedNow(db, 'check', page.keys);
    // The page's conditions read again as the row is locked, then the cutoff's: the same for what goes and what is cut.
    const pastCutoff = `c.key = ANY($1) AND c.state IN ${RESTING_STATES_SQL} AND c.due_at IS NULL AND c.updated_at < $2 AND ${doneBeforeSql(ROW_SQL, 'c', { before: '$2', day: '$3' })}`;
    const { rows } = await db.query<{ key: string }>(
      `DELETE FROM checks c WHERE ${pastCutoff} AND NOT ${planLatestSql(ROW_SQL, 'c')} AND NOT ${endingLeftSql(ROW_SQL, 'c')} RETURNING c.key`,
      [keys, batch.before, day],
    );
    const gone = rows.map((r) => r.key);
    if (gone.length > 0) await db.query('DELETE FROM appointment_checks WHERE check_key = ANY($1)', [gone]);
    // What stays of those (each plan's latest) needs its state, plan and the result's status and ids, not the benefits of a 10 to 30 KB result.
    const trimmed = await db.query(
      `UPDATE checks c SET row = (c.row::jsonb #- '{result,result}')::json WHERE ${pastCutoff}
         AND ${statusOfKindSql("c.row->'result'->>'status'", ['completed', 'partial'])} AND json_typeof(c.row->'result'->'result') <> 'null'`,
      [keys, batch.before, day],
    );
    return { pruned: gone.length, ...(trimmed.rowCount ? { trimmed: trimmed.rowCount } : {}), ...(page.after !== undefined && { after: page.after }) };
  },
  async appointments(db, batch) {
    const day = batch.before.slice(0, 10);
    const page = await pagedKeys(
      db,
      `SELECT key, date_of_service AS at FROM appointments WHERE date_of_service < $1 AND (date_of_service, key) > ($2, $3) ORDER BY date_of_service, key LIMIT $4`,
      batch,
      '',
      day,
    );
    const keys = await lockedNow(db, 'appointment', page.keys);
    // A cancellation that overtook its booking names no visit (''): it stays the retention period from when it came, as its booking may come late.
    const { rows } = await db.query<{ key: string }>(
      `DELETE FROM appointments a WHERE a.key = ANY($1) AND a.date_of_service < $2 AND (a.date_of_service <> '' OR a.updated_at < $3)
         AND NOT EXISTS (SELECT 1 FROM appointment_checks l JOIN checks c ON c.key = l.check_key WHERE l.appointment_key = a.key)
       RETURNING a.key`,
      [keys, day, batch.before],
    );
    const gone = rows.map((r) => r.key);
    if (gone.length > 0) await db.query('DELETE FROM appointment_checks WHERE appointment_key = ANY($1)', [gone]);
    return { pruned: gone.length, ...(page.after !== undefined && { after: page.after }) };
  },
};
