import type { Pool } from 'pg';
import { schemaRefusal } from './job-store';
import { LIVE_NAMESPACE } from './pg-live-lock';
import { inTransaction } from './pg-transaction';

/**
 * The PostgreSQL job store's schema, one migration per version. Each check, appointment and
 * patient is one JSON document (`row`, `record`) as the SQLite store keeps it; the columns beside
 * it are what queries select, lock and order by. Times that are compared are timestamptz;
 * `json` (not jsonb) keeps a document as it was written, but for a NUL, which no query could read
 * (pg-job-store's jsonText keeps U+FFFD in its place); a message's raw
 * text and dedupe key are bytea because PostgreSQL text cannot hold the NUL a broken sender may put in them.
 */
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE messages (
     id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
     kind text NOT NULL,
     dedupe_key text NOT NULL,
     received_at text NOT NULL,
     raw bytea NOT NULL,
     status text NOT NULL,
     detail text,
     answer text,
     UNIQUE (kind, dedupe_key)
   );
   CREATE INDEX messages_status ON messages (status, id);
   CREATE TABLE patients (
     patient_key text PRIMARY KEY,
     record json NOT NULL
   );
   CREATE TABLE appointments (
     key text PRIMARY KEY,
     patient_key text NOT NULL,
     date_of_service text COLLATE "C" NOT NULL,
     status text NOT NULL,
     row json NOT NULL,
     updated_at timestamptz NOT NULL
   );
   CREATE INDEX appointments_patient ON appointments (patient_key);
   CREATE TABLE appointment_checks (
     appointment_key text NOT NULL,
     check_key text NOT NULL,
     PRIMARY KEY (check_key, appointment_key)
   );
   CREATE INDEX appointment_checks_appointment ON appointment_checks (appointment_key);
   CREATE TABLE checks (
     key text PRIMARY KEY,
     state text NOT NULL,
     row json NOT NULL,
     correlation_id text,
     coverage_fingerprint text NOT NULL,
     result_at timestamptz,
     due_at timestamptz,
     lease_owner text,
     lease_until timestamptz,
     updated_at timestamptz NOT NULL
   );
   CREATE INDEX checks_due ON checks (due_at) WHERE due_at IS NOT NULL;
   CREATE UNIQUE INDEX checks_correlation ON checks (correlation_id) WHERE correlation_id IS NOT NULL;
   CREATE INDEX checks_coverage ON checks (coverage_fingerprint, result_at);
   CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL);
   CREATE TABLE rate_buckets (bucket text PRIMARY KEY, tokens double precision NOT NULL, at_ms double precision NOT NULL);`,
  // The live lock (src/sync/pg-live-lock.ts) of the instance whose worker holds the lease.
  `ALTER TABLE checks ADD COLUMN lease_lock integer;`,
  // A dedupe key is read from the sender's MSH, which may carry a NUL as the raw text may.
  `ALTER TABLE messages ALTER COLUMN dedupe_key TYPE bytea USING convert_to(dedupe_key, 'UTF8');`,
  // When a lease was taken, by the server's clock: one taken before the server last started may be an instance's still taking its live lock again.
  `ALTER TABLE checks ADD COLUMN leased_at timestamptz;`,
  // A webhook no check has the correlation id of finds the send under way by its externalId (sentUnder), not by reading every check.
  `CREATE INDEX IF NOT EXISTS checks_submitted ON checks ((row->>'externalId')) WHERE state = 'submitted';`,
  // Nothing to change in the tables: patient records may now hold a plan's period (coverages[].period) and a merge's
  // tombstone (mergedInto), which no earlier version reads, so a version of their own keeps those versions off this database.
  `SELECT 1;`,
  // Nor here: checks may now hold their plan's dates (check.coverage.period), which no earlier version reads.
  `SELECT 1;`,
  // A FHIR Coverage changed finds the appointments its checks serve by the index (appointmentsVerifying), not by reading every check:
  // moved to another patient, it is the first patient's checks that are to go. Only checks read from a FHIR Coverage have one:
  // an HL7 booking writes no entry.
  `CREATE INDEX IF NOT EXISTS checks_source_coverage ON checks ((row->'check'->'source'->>'coverage')) WHERE (row->'check'->'source'->>'coverage') IS NOT NULL;`,
  // A plan the PMS drops for a patient with no visit to come finds the check that wrote its Coverage by the patient and the plan's
  // member id (checksOfPatient), not among the patient's years of checks. Unreleased, so changed in place (a database made with the
  // patient alone finds the same checks, reading the others).
  `CREATE INDEX IF NOT EXISTS checks_patient ON checks ((row->>'patientKey'), (row->'check'->'subscriber'->>'memberId'));`,
  // Pruning (prune) finds the work finished before the retention period by these, not by reading every row: handled messages
  // by when they came, checks done with by their last change, appointments by their visit.
  `CREATE INDEX IF NOT EXISTS messages_received ON messages (status, received_at COLLATE "C");
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
export const PG_SCHEMA_VERSION = MIGRATIONS.length;

/**
 * Brings the database to PG_SCHEMA_VERSION, in one transaction under an advisory lock, so
 * instances starting together migrate once and none sees a half-made schema. Gives the version it
 * was at (0 for a database new to it).
 */
export async function migrate(pool: Pool): Promise<number> {
  return inTransaction(pool, async (db) => {
    await db.query(`SELECT pg_advisory_xact_lock(hashtextextended('dental-elig:migrate', 0))`);
    await db.query('CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())');
    const from = await schemaVersion(db);
    const refusal = schemaRefusal(from, MIGRATIONS.length, true);
    if (refusal) throw new Error(refusal);
    await refuseBesideOlderInstances(db, from);
    for (let version = from; version < MIGRATIONS.length; version++) {
      await db.query(MIGRATIONS[version] as string);
      await db.query('INSERT INTO schema_migrations (version) VALUES ($1)', [version + 1]);
    }
    return from;
  });
}

/**
 * Instances of the version before, still working the database, hold their live locks (an instance
 * of this version takes its own only after the migration); those from before the live lock
 * (schema 1) are not seen. No upgrade goes on beside them: each changes what they read (a dedupe
 * key turned bytea fails every message and webhook of theirs; a record holding what they do not
 * know fails each message about that patient) or how they lease.
 */
async function refuseBesideOlderInstances(db: Pick<Pool, 'query'>, from: number): Promise<void> {
  if (from === 0 || from === MIGRATIONS.length) return;
  const { rows } = await db.query<{ live: number }>(
    `SELECT count(DISTINCT objid)::integer AS live FROM pg_locks
     WHERE locktype = 'advisory' AND classid = $1 AND objsubid = 2 AND granted
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    [LIVE_NAMESPACE],
  );
  const live = rows[0]?.live ?? 0;
  if (live > 0) {
    throw new Error(
      `job store schema version ${from} is older than this program's (${MIGRATIONS.length}), and ${live} instance${live === 1 ? '' : 's'} of the version before still work${live === 1 ? 's' : ''} it: stop every instance, then start this version, which upgrades it`,
    );
  }
}

/** Refuses a database this program reads without upgrading (the jobs commands): one with no job store, or one at another version. */
export async function expectSchema(pool: Pool): Promise<void> {
  const { rows } = await pool.query<{ found: string | null }>(`SELECT to_regclass('schema_migrations')::text AS found`);
  if (!rows[0]?.found) throw new Error('no job store in this database; serve creates it');
  const refusal = schemaRefusal(await schemaVersion(pool), MIGRATIONS.length, false);
  if (refusal) throw new Error(refusal);
}

/** The version the database is at (the number of migrations applied). */
export async function schemaVersion(db: Pick<Pool, 'query'>): Promise<number> {
  const { rows } = await db.query<{ version: number }>('SELECT COALESCE(MAX(version), 0)::integer AS version FROM schema_migrations');
  return rows[0]?.version ?? 0;
}
