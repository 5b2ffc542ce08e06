import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client, Pool } from 'pg';
import type { PayerResolver } from '../../src/domain';
import type { CheckRow, JobStore, StoreTx } from '../../src/sync/job-store';
import { openJobStore } from '../../src/sync/open-store';
import { PgJobStore } from '../../src/sync/pg-job-store';
import { LIVE_NAMESPACE, LiveLock } from '../../src/sync/pg-live-lock';
import { PG_SCHEMA_VERSION } from '../../src/sync/pg-schema';
import { endDroppedPlans, scheduleAppointment } from '../../src/sync/schedule';
import type { WrittenEligibility } from '../../src/sync/write-back';
import { gate } from '../support/gate';
import { postgresForTests } from '../support/postgres';
import { switchableProxy } from '../support/switchable-proxy';
import { ingestWebhook } from '../../src/sync/ingest-webhook';
import { Worker } from '../../src/sync/worker';
import { ServiceError } from '../../src/verification/errors';
import { toOutcome } from '../../src/verification/outcome';
import { until } from './harness';
import { resultBody, RIG_OPTIONS, type WorkerRig } from './worker-rig';
import { throttledElsewhere } from './throttled-elsewhere';
import { keptOutages } from '../../src/sync/outage-record';
import { pruneFinished } from '../../src/sync/prune';
import { checkRow, jobStoreContract, NOW, rememberAppointment } from './job-store-contract';

/**
 * The PostgreSQL store on a throwaway cluster, a fresh database per test. Two stores on one
 * database are two instances of the service: each its own pool, sharing only the database.
 */
const postgres = postgresForTests();

jobStoreContract('PgJobStore', async () => {
  const url = await postgres.createDatabase();
  return { open: () => openJobStore(url, '/nonexistent'), remove: async () => undefined };
});

/** A part the test never reaches. */
const unused = (): never => {
  throw new Error('not used in this test');
};


/** Whether `promise` is still unsettled after `ms`. */
async function stillWaiting(promise: Promise<unknown>, ms = 200): Promise<boolean> {
  const pending = Symbol('pending');
  return (await Promise.race([promise.then(() => 'settled'), new Promise((r) => setTimeout(() => r(pending), ms))])) === pending;
}

/** Fails the claim of the service's work (the chart's is claimed first) with the error `failure` gives, while it gives one; restored by jest.restoreAllMocks(). */
function failClaimOfServiceWork(failure: () => Error | undefined): void {
  const query = Client.prototype.query;
  jest.spyOn(Client.prototype, 'query').mockImplementation(function (this: Client, ...args: unknown[]) {
    const err = typeof args[0] === 'string' && args[0].includes('state = ANY($6)') ? failure() : undefined;
    if (!err) return (query as (...a: unknown[]) => unknown).apply(this, args);
    const callback = args.find((arg) => typeof arg === 'function') as ((err: Error) => void) | undefined;
    if (!callback) return Promise.reject(err);
    process.nextTick(() => callback(err));
    return undefined;
  } as typeof query);
}

/** Holds back the connect of each live-lock connection until `held.open()`; `asked` says one is waiting. */
function holdLiveConnects() {
  const held = gate();
  const asked = gate();
  const connect = Client.prototype.connect as (this: Client) => Promise<Client>;
  jest.spyOn(Client.prototype, 'connect').mockImplementation(async function (this: Client & { connectionParameters: { application_name?: string } }) {
    if (this.connectionParameters.application_name === 'dental-elig live') {
      asked.open();
      await held.opened;
    }
    return connect.call(this);
  } as unknown as Client['connect']);
  return { held, asked };
}

/** The database as schema `version` left it: each later migration undone, the newest first. */
async function downTo(db: Client, version: number): Promise<void> {
  const undo: Record<number, string> = {
    2: 'ALTER TABLE checks DROP COLUMN lease_lock',
    3: `ALTER TABLE messages ALTER COLUMN dedupe_key TYPE text USING convert_from(dedupe_key, 'UTF8')`,
    4: 'ALTER TABLE checks DROP COLUMN leased_at',
    5: 'DROP INDEX checks_submitted',
    6: 'SELECT 1',
    7: 'SELECT 1',
    8: 'DROP INDEX checks_source_coverage',
    9: 'DROP INDEX checks_patient',
    10: 'DROP INDEX messages_received; DROP INDEX checks_finished; DROP INDEX appointments_day',
    11: `DROP INDEX checks_finished; CREATE INDEX checks_finished ON checks (updated_at, key) WHERE state IN ('cancelled', 'written') AND due_at IS NULL`,
    12: 'DROP INDEX checks_chart_due',
    13: 'SELECT 1',
    14: 'SELECT 1',
    15: 'SELECT 1',
  };
  for (let v = PG_SCHEMA_VERSION; v > version; v--) await db.query(undo[v] as string);
  await db.query('DELETE FROM schema_migrations WHERE version > $1', [version]);
}

/** A worker that only takes webhooks (ingestWebhook): it calls neither the service nor the chart. */
const webhookWorker = (store: JobStore) =>
  new Worker(RIG_OPTIONS, {
    store,
    client: { verify: unused, requestVerification: unused, getVerification: unused, listPayers: unused },
    resolver: unused,
    writer: unused,
    now: () => new Date(),
    log: { info: () => undefined, warn: () => undefined, error: () => undefined },
    emit: () => undefined,
  });

describe('PgJobStore with two instances on one database', () => {
  let url: string;
  let a: PgJobStore;
  let b: PgJobStore;
  beforeEach(async () => {
    url = await postgres.createDatabase();
    [a, b] = await Promise.all([PgJobStore.open(url), PgJobStore.open(url)]);
  });
  afterEach(async () => {
    await Promise.all([a.close(), b.close()]);
  });

  it('keeps a check whose result carries a NUL, which PostgreSQL cannot give as text, with U+FFFD in its place', async () => {
    // A payer's page with a NUL in a name, as the service passed it on; beside it a text that only says \u0000.
    const result = { ...(resultBody('completed-minimal') as object), correlationId: 'ver-nul', note: 'SMITH\u0000JR', quoted: 'C:\\u0000' };
    await a.transaction((tx) => tx.putCheck(checkRow('nul', { state: 'written', result, resultAt: NOW, correlationId: 'ver-nul' })));
    const [kept] = await b.listChecks({ states: ['written'] });
    expect(kept?.key).toBe('nul');
    expect(kept?.result).toMatchObject({ note: 'SMITH\uFFFDJR', quoted: 'C:\\u0000' });
    expect((await b.transaction((tx) => tx.checkByCorrelationId('ver-nul')))?.key).toBe('nul');
  });

  it("refuses at once, naming the key, a check given a correlationId another check holds, which no second run would take: its transaction runs once, not five times", async () => {
    await a.transaction((tx) => tx.putCheck(checkRow('elig_first', { state: 'awaiting-result', correlationId: 'corr-twice' })));
    let runs = 0;
    const refused = await b
      .transaction(async (tx) => {
        runs++;
        await tx.putCheck(checkRow('elig_second', { state: 'awaiting-result', correlationId: 'corr-twice' }));
      })
      .catch((err: unknown) => err);
    expect(runs).toBe(1);
    expect(refused).toMatchObject({ code: '23505', message: 'job store: unique key checks_correlation refused the change, another row holding its value already; not tried again, as it would be refused again' });
    expect(String(refused)).not.toContain('corr-twice');
    expect((await b.transaction((tx) => tx.checkByCorrelationId('corr-twice')))?.key).toBe('elig_first');
    expect(await b.transaction((tx) => tx.getCheck('elig_second'))).toBeUndefined();
  });

  it('creates the schema once when both start together, at the version this program writes', async () => {
    expect(await a.schemaVersion()).toBe(PG_SCHEMA_VERSION);
    const db = new Client({ connectionString: url });
    await db.connect();
    try {
      const { rows } = await db.query('SELECT version FROM schema_migrations ORDER BY version');
      expect(rows.map((r: { version: number }) => r.version)).toEqual(Array.from({ length: PG_SCHEMA_VERSION }, (_, i) => i + 1));
      await db.query('INSERT INTO schema_migrations (version) VALUES (99)');
    } finally {
      await db.end();
    }
    await expect(PgJobStore.open(url)).rejects.toThrow(/schema version 99 is newer than this program knows/);
  });

  it('is read by the jobs commands only at the version this program writes: they neither create nor upgrade it', async () => {
    const empty = await postgres.createDatabase();
    await expect(openJobStore(empty, '/nonexistent', { create: false })).rejects.toThrow('no job store in this database; serve creates it');
    const db = new Client({ connectionString: url });
    const nothing = new Client({ connectionString: empty });
    await Promise.all([db.connect(), nothing.connect()]);
    try {
      expect((await nothing.query(`SELECT to_regclass('schema_migrations') AS found`)).rows).toEqual([{ found: null }]);
      // The version before this one, as instances of it still running on the database keep it.
      await db.query('DELETE FROM schema_migrations WHERE version = $1', [PG_SCHEMA_VERSION]);
      await expect(openJobStore(url, '/nonexistent', { create: false })).rejects.toThrow(`job store schema version ${PG_SCHEMA_VERSION - 1} is older than this program's (${PG_SCHEMA_VERSION}); start serve of this version on it first`);
      expect(await a.schemaVersion()).toBe(PG_SCHEMA_VERSION - 1);
    } finally {
      await Promise.all([db.end(), nothing.end()]);
    }
  });

  it('prunes with both instances at once: each finished row deleted once, one a transaction holds left to the next run', async () => {
    const OLD = '2026-05-01T09:00:00.000Z';
    const keys = Array.from({ length: 400 }, (_, i) => `elig_${String(i).padStart(3, '0')}`);
    await a.transaction(async (tx) => {
      for (const key of keys) {
        const row = checkRow(key, { state: 'cancelled', dueAt: undefined, updatedAt: OLD });
        await tx.putCheck({ ...row, check: { ...row.check, dateOfService: '2026-05-01' } });
        await tx.putAppointment({ key: `apt-${key}`, patientKey: row.patientKey, dateOfService: '2026-05-01', status: 'booked', checkKeys: [key], basis: {}, updatedAt: OLD });
        await tx.addMessage({ kind: 'hl7', dedupeKey: key, receivedAt: OLD, raw: 'MSH|...', status: 'handled' });
      }
    });
    // A message's transaction holds one of the checks, as a booking reading it would.
    let letGo = () => undefined as void;
    const holding = new Promise<void>((resolve) => (letGo = resolve));
    let held = () => undefined as void;
    const holds = new Promise<void>((resolve) => (held = resolve));
    const holder = a.transaction(async (tx) => {
      await tx.getCheck('elig_007');
      held();
      await holding;
    });
    await holds;
    const cutoff = '2026-08-25T10:00:00.000Z';
    const both = await Promise.all([pruneFinished(a, cutoff, { limit: 50 }), pruneFinished(b, cutoff, { limit: 50 })]);
    const sum = (what: 'messages' | 'checks' | 'appointments', runs: Array<Record<typeof what, number>>) => runs.reduce((n, run) => n + run[what], 0);
    expect(sum('messages', both)).toBe(400);
    expect(sum('checks', both)).toBe(399);
    expect((await b.listChecks()).map((r) => r.key)).toEqual(['elig_007']);
    letGo();
    await holder;
    // What one left as the other held it (an appointment whose check was still going) goes at the next run, each row once in all.
    const later = await pruneFinished(b, cutoff);
    expect([sum('messages', [...both, later]), sum('checks', [...both, later]), sum('appointments', [...both, later])]).toEqual([400, 400, 400]);
    expect([await b.listChecks(), await b.listAppointments(), await b.listMessages()]).toEqual([[], [], []]);
  });

  it("takes a message whose earlier copy one instance's prune deletes while the other finds it there: as a new one, not a failure", async () => {
    const message = { kind: 'hl7' as const, dedupeKey: 'BSD|MSG-1', receivedAt: '2026-05-01T09:00:00.000Z', raw: 'MSH|...', status: 'handled' as const };
    await a.transaction((tx) => tx.addMessage(message));
    const db = new Client({ connectionString: url });
    await db.connect();
    try {
      // Each insert into messages waits, once it has met the earlier copy, until the test lets it go.
      await db.query(`CREATE FUNCTION gate() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_lock(4242); PERFORM pg_advisory_unlock(4242); RETURN NULL; END $$`);
      await db.query('CREATE TRIGGER gate AFTER INSERT ON messages FOR EACH STATEMENT EXECUTE FUNCTION gate()');
      await db.query('SELECT pg_advisory_lock(4242)');
      const again = a.transaction((tx) => tx.addMessage({ ...message, receivedAt: NOW, status: 'received' }));
      await until('the insert waiting at the gate', async () => (await db.query(`SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted`)).rows.length > 0);
      expect(await pruneFinished(b, '2026-08-25T10:00:00.000Z')).toMatchObject({ messages: 1 });
      await db.query('SELECT pg_advisory_unlock(4242)');
      expect(await again).toMatchObject({ duplicate: false, message: { receivedAt: NOW, status: 'received' } });
    } finally {
      await db.end();
    }
  });

  it('gives each due check to exactly one instance when both claim at once', async () => {
    const keys = Array.from({ length: 300 }, (_, i) => `elig_${String(i).padStart(3, '0')}`);
    await a.transaction(async (tx) => {
      for (const key of keys) await tx.putCheck(checkRow(key));
    });
    const claimed: string[] = [];
    const claimer = async (store: JobStore, owner: string) => {
      for (;;) {
        const rows = await store.claimDue({ now: NOW, limit: 7, owner, leaseMs: 60_000 });
        if (rows.length === 0) return;
        claimed.push(...rows.map((r) => r.key));
      }
    };
    await Promise.all([a, b].flatMap((store, i) => [1, 2, 3, 4].map((n) => claimer(store, `instance-${i}-worker-${n}`))));
    expect(claimed).toHaveLength(keys.length);
    expect([...claimed].sort()).toEqual(keys);
  });

  it('gives the checks of an instance that died to the other at once: its live lock went with its connections', async () => {
    await a.transaction(async (tx) => {
      for (const key of ['elig_1', 'elig_2']) await tx.putCheck(checkRow(key));
    });
    expect([await a.beginWork(), await b.beginWork()]).toEqual([0, 0]);
    expect((await a.claimDue({ now: NOW, limit: 10, owner: 'a', leaseMs: 60_000 })).map((c) => c.key)).toEqual(['elig_1', 'elig_2']);
    // Alive, its leases hold.
    expect(await b.claimDue({ now: NOW, limit: 10, owner: 'b', leaseMs: 60_000 })).toEqual([]);
    expect(await b.nextDueAt()).toBe('2026-11-23T10:01:00.000Z');
    await a.close(); // its connections end, as a process killed with SIGKILL leaves them, the leases still in the table
    expect(await b.nextDueAt()).toBe(NOW);
    expect((await b.counts(NOW)).due).toBe(2);
    expect((await b.claimDue({ now: NOW, limit: 1, owner: 'b', leaseMs: 60_000 })).map((c) => c.key)).toEqual(['elig_1']);
    // An instance starting now gives back what the dead one held, as the SQLite store does after a crash.
    const c = await PgJobStore.open(url);
    try {
      expect(await c.beginWork()).toBe(1);
      expect((await c.claimDue({ now: NOW, limit: 10, owner: 'c', leaseMs: 60_000 })).map((r) => r.key)).toEqual(['elig_2']);
    } finally {
      await c.close();
    }
  });

  it("leases nothing when the server goes between a claim's two kinds of work: the chart's is not left to a worker that never got it", async () => {
    await a.transaction(async (tx) => {
      await tx.putCheck(checkRow('elig_result', { state: 'result-stored' }));
      await tx.putCheck(checkRow('elig_send'));
    });
    expect([await a.beginWork(), await b.beginWork()]).toEqual([0, 0]);
    // The server ends the connection as the service's work is claimed, the chart's already taken.
    failClaimOfServiceWork(() => new Error('Connection terminated unexpectedly'));
    try {
      await expect(a.claimDue({ now: NOW, limit: 10, owner: 'a', leaseMs: 60_000 })).rejects.toThrow('Connection terminated');
    } finally {
      jest.restoreAllMocks();
    }
    // Both are due at once for the other instance, not when a's leases run out a minute on.
    expect((await b.claimDue({ now: NOW, limit: 10, owner: 'b', leaseMs: 60_000 })).map((c) => c.key).sort()).toEqual(['elig_result', 'elig_send']);
  });

  it('counts the checks a claim took over once when its transaction runs again after a deadlock', async () => {
    await a.transaction(async (tx) => {
      await tx.putCheck(checkRow('elig_result', { state: 'result-stored' }));
      await tx.putCheck(checkRow('elig_send'));
    });
    expect([await a.beginWork(), await b.beginWork()]).toEqual([0, 0]);
    expect(await a.claimDue({ now: NOW, limit: 10, owner: 'a', leaseMs: 60_000 })).toHaveLength(2);
    await a.close(); // killed: its leases stay in the table, its live lock gone
    // The service's work loses a deadlock once, the chart's already taken (and counted) in the run rolled back.
    let lost = false;
    failClaimOfServiceWork(() => (lost ? undefined : ((lost = true), Object.assign(new Error('deadlock detected'), { code: '40P01' }))));
    const said: number[] = [];
    try {
      const taken = await b.claimDue({ now: NOW, limit: 10, owner: 'b', leaseMs: 60_000, tookOver: (checks) => said.push(checks) });
      expect(taken.map((c) => c.key).sort()).toEqual(['elig_result', 'elig_send']);
    } finally {
      jest.restoreAllMocks();
    }
    expect(lost).toBe(true);
    expect(said).toEqual([2]);
  });

  it('lets a lease taken without a live lock (a store whose worker has not begun) run out first', async () => {
    await a.transaction((tx) => tx.putCheck(checkRow('elig_1')));
    expect((await a.claimDue({ now: NOW, limit: 10, owner: 'a', leaseMs: 60_000 })).map((c) => c.key)).toEqual(['elig_1']);
    await a.close();
    expect(await b.claimDue({ now: '2026-11-23T10:00:59.999Z', limit: 10, owner: 'b', leaseMs: 60_000 })).toEqual([]);
    expect(await b.nextDueAt()).toBe('2026-11-23T10:01:00.000Z');
    const taken = await b.claimDue({ now: '2026-11-23T10:01:00.000Z', limit: 10, owner: 'b', leaseMs: 60_000 });
    expect(taken.map((c) => c.key)).toEqual(['elig_1']);
  });

  describe('its live lock, held on two connections of its own', () => {
    let db: Client;
    beforeEach(async () => {
      db = new Client({ connectionString: url });
      await db.connect();
    });
    afterEach(async () => {
      await db.end();
    });
    /** The backends holding the live lock `key`. */
    const holders = async (key: number) =>
      (await db.query<{ pid: number }>(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND objsubid = 2 AND granted ORDER BY pid`, [LIVE_NAMESPACE, key])).rows.map((r) => r.pid);
    const leaseLock = async (key: string) => Number((await db.query(`SELECT lease_lock FROM checks WHERE key = $1`, [key])).rows[0].lease_lock);
    const claim = async (store: PgJobStore, owner: string) => (await store.claimDue({ now: NOW, limit: 1, owner, leaseMs: 60_000 })).map((c) => c.key);

    it('closes while it takes the lock again from a database that stopped answering, leaving no connection behind', async () => {
      const hop = await switchableProxy(Number(new URL(url).port));
      const through = new URL(url);
      through.port = String(hop.port);
      const lock = await LiveLock.take(through.toString());
      try {
        // Both connections cut; the database then takes connections and answers nothing, so the retake waits on one.
        hop.down = true;
        await until('both cut', async () => hop.open === 0);
        hop.frozen = true;
        hop.down = false;
        await until('a retake connecting', async () => hop.open > 0);
        await lock.close();
        // Not after its 10 s connect timeout: a process stopping here would be held open that long.
        await until('its connection closed', async () => hop.open === 0, 2000);
      } finally {
        await lock.close();
        await hop.close();
      }
    });

    it('keeps the leases of an instance one of whose lock connections ended, and takes the lock again on both', async () => {
      await a.transaction((tx) => tx.putCheck(checkRow('elig_1')));
      await a.beginWork();
      await b.beginWork();
      expect(await claim(a, 'a')).toEqual(['elig_1']);
      const key = await leaseLock('elig_1');
      const [first, second] = await holders(key);
      expect(second).toBeDefined();
      // One of A's lock connections ended by the server (an administrator, a proxy); its process lives on.
      await db.query('SELECT pg_terminate_backend($1)', [first]);
      await until('the connection is gone', async () => (await holders(key)).length === 1);
      // The lock is still held on the other: B leaves the check A is sending.
      expect(await claim(b, 'b')).toEqual([]);
      await until('the lock is taken again on a second connection', async () => (await holders(key)).length === 2);
      expect(await holders(key)).toContain(second);
      expect(await claim(b, 'b')).toEqual([]);

      // Both ended (the network between A and the database): A looks gone, and B takes the check.
      await db.query('SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = $1 AND classid = $2 AND objid = $3 AND objsubid = 2', ['advisory', LIVE_NAMESPACE, key]);
      await until('both are gone', async () => (await holders(key)).length === 0);
      expect(await claim(b, 'b')).toEqual(['elig_1']);
      // A takes the same key again, on two connections, and goes on with the next check.
      await until('the lock is taken again', async () => (await holders(key)).length === 2);
      await a.transaction((tx) => tx.putCheck(checkRow('elig_2')));
      expect(await claim(a, 'a')).toEqual(['elig_2']);
      expect(await leaseLock('elig_2')).toBe(key);
      expect(await claim(b, 'b')).toEqual([]);
    });

    it('marks with its live lock the checks it took while taking the lock again: they go to the other at once if it dies after', async () => {
      await a.transaction(async (tx) => {
        for (const key of ['elig_1', 'elig_2']) await tx.putCheck(checkRow(key));
      });
      await a.beginWork();
      await b.beginWork();
      expect(await claim(a, 'a')).toEqual(['elig_1']);
      const key = await leaseLock('elig_1');
      // Both of A's lock connections ended (the network, a restart of the server): it takes the lock again, held back here.
      const { held, asked } = holdLiveConnects();
      try {
        await db.query('SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = $1 AND classid = $2 AND objid = $3 AND objsubid = 2', ['advisory', LIVE_NAMESPACE, key]);
        await asked.opened;
        // Meanwhile A's worker goes on: leases without a lock, which no one takes before they run out; the check
        // it was sending among them, its lock gone (a worker leaves a check it holds already in hand, once).
        expect((await a.claimDue({ now: NOW, limit: 10, owner: 'a', leaseMs: 60_000 })).map((c) => c.key).sort()).toEqual(['elig_1', 'elig_2']);
        expect([await leaseLock('elig_1'), await leaseLock('elig_2')]).toEqual([0, 0]);
        held.open();
        await until('the lock is taken again', async () => (await holders(key)).length === 2);
      } finally {
        jest.restoreAllMocks();
      }
      await until('the checks A holds under its lock again', async () => (await leaseLock('elig_1')) === key && (await leaseLock('elig_2')) === key);
      // A dies with both in hand: B takes them at once, not a minute on when their leases run out.
      await a.close();
      expect((await b.claimDue({ now: NOW, limit: 10, owner: 'b', leaseMs: 60_000 })).map((c) => c.key).sort()).toEqual(['elig_1', 'elig_2']);
    });

    it('lets go of its live lock when ending its pool fails, and says so once', async () => {
      await a.transaction((tx) => tx.putCheck(checkRow('elig_1')));
      await a.beginWork();
      expect(await claim(a, 'a')).toEqual(['elig_1']);
      const key = await leaseLock('elig_1');
      const end = Pool.prototype.end as (this: Pool) => Promise<void>;
      jest.spyOn(Pool.prototype, 'end').mockImplementationOnce(async function (this: Pool) {
        await end.call(this);
        throw new Error('ending the pool failed');
      } as unknown as Pool['end']);
      await expect(a.close()).rejects.toThrow('ending the pool failed');
      jest.restoreAllMocks();
      expect(await holders(key)).toEqual([]);
      // A looks gone: B takes its check at once. Closed again, A says nothing more.
      await b.beginWork();
      expect(await claim(b, 'b')).toEqual(['elig_1']);
      await a.close();
    });

    it('keeps its lock connections through a database idle_session_timeout', async () => {
      await db.query(`ALTER DATABASE "${new URL(url).pathname.slice(1)}" SET idle_session_timeout = '500ms'`);
      await a.transaction((tx) => tx.putCheck(checkRow('elig_1')));
      await a.beginWork();
      expect(await claim(a, 'a')).toEqual(['elig_1']);
      const key = await leaseLock('elig_1');
      const before = await holders(key);
      expect(before).toHaveLength(2);
      await new Promise((r) => setTimeout(r, 1_500));
      // The same two backends: neither was ended and taken again meanwhile.
      expect(await holders(key)).toEqual(before);
      expect(await claim(b, 'b')).toEqual([]);
    });
  });

  it('leaves the leases of an instance taking its live lock again after PostgreSQL restarted, and takes those of one that died since', async () => {
    const db = () => new Client({ connectionString: url });
    const liveLocks = async () => {
      const client = db();
      try {
        await client.connect();
        return Number((await client.query(`SELECT COUNT(DISTINCT objid) AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND objsubid = 2 AND granted`, [LIVE_NAMESPACE])).rows[0].n);
      } catch {
        return -1; // the server not back yet
      } finally {
        await client.end().catch(() => undefined);
      }
    };
    // The first statement on a pool after a restart may meet a connection the server closed: the next one is a new connection.
    const claim = async (store: PgJobStore, owner: string) => {
      for (let attempt = 1; ; attempt++) {
        try {
          return (await store.claimDue({ now: NOW, limit: 10, owner, leaseMs: 60_000 })).map((c) => c.key);
        } catch (err) {
          if (attempt >= 5) throw err;
        }
      }
    };
    await a.transaction((tx) => tx.putCheck(checkRow('elig_1')));
    await a.beginWork();
    await b.beginWork();
    expect(await claim(a, 'a')).toEqual(['elig_1']);

    await postgres.restart();
    // Every live lock went with the server; A holds elig_1 and is taking its lock again: B leaves it.
    expect(await claim(b, 'b')).toEqual([]);
    await until('both locks taken again', async () => (await liveLocks()) === 2);
    expect(await claim(b, 'b')).toEqual([]);

    // A lease taken since the restart is an instance's that died, once its lock is gone: B takes it at once.
    await a.transaction((tx) => tx.putCheck(checkRow('elig_2')));
    expect(await claim(a, 'a')).toEqual(['elig_2']);
    await a.close();
    expect(await claim(b, 'b')).toEqual(['elig_2']);
  });

  describe('closed while its live lock is being taken', () => {
    const liveSessions = async (db: Client) =>
      Number((await db.query(`SELECT COUNT(*) AS n FROM pg_stat_activity WHERE application_name = 'dental-elig live' AND datname = current_database()`)).rows[0].n);
    let db: Client;
    beforeEach(async () => {
      db = new Client({ connectionString: url });
      await db.connect();
    });
    afterEach(async () => {
      jest.restoreAllMocks();
      // A connection left open would keep the test process alive: ended here, whatever the test found.
      await db.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'dental-elig live' AND datname = current_database()`);
      await db.end();
    });

    it('leaves no connection holding the lock when it closes while taking it again', async () => {
      await a.beginWork();
      const { held, asked } = holdLiveConnects();
      await db.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'dental-elig live' AND datname = current_database()`);
      await asked.opened; // the lock is being taken again
      await a.close();
      held.open();
      await new Promise((r) => setTimeout(r, 500));
      expect(await liveSessions(db)).toBe(0);
    });

    it('leaves no connection holding the lock when it closes while its worker begins', async () => {
      const { held, asked } = holdLiveConnects();
      const begun = a.beginWork();
      await asked.opened;
      await a.close();
      held.open();
      await expect(begun).rejects.toThrow('the job store is closed');
      expect(await liveSessions(db)).toBe(0);
    });
  });

  it('brings a database the first schema made up to date, keeping its checks and knowing its messages again', async () => {
    await a.transaction((tx) => tx.putCheck(checkRow('elig_old')));
    const message = { kind: 'hl7' as const, dedupeKey: 'PMS|BSD|MSG-1', receivedAt: NOW, raw: 'MSH|...', status: 'handled' as const };
    const { message: kept } = await a.transaction((tx) => tx.addMessage(message));
    const db = new Client({ connectionString: url });
    await db.connect();
    try {
      await downTo(db, 1);
    } finally {
      await db.end();
    }
    const upgraded = await PgJobStore.open(url);
    try {
      expect(await upgraded.schemaVersion()).toBe(PG_SCHEMA_VERSION);
      expect([a.upgradedFrom, upgraded.upgradedFrom]).toEqual([undefined, 1]);
      await upgraded.beginWork();
      expect((await upgraded.claimDue({ now: NOW, limit: 10, owner: 'u', leaseMs: 60_000 })).map((c) => c.key)).toEqual(['elig_old']);
      const again = await upgraded.transaction((tx) => tx.addMessage(message));
      expect([again.duplicate, again.message.id, again.message.dedupeKey]).toEqual([true, kept.id, message.dedupeKey]);
    } finally {
      await upgraded.close();
    }
  });

  it('upgrades no database an instance of the version before works', async () => {
    const db = new Client({ connectionString: url });
    await db.connect();
    try {
      // Schema 2 as it was, worked by an instance of that version: schema 3 turns the dedupe keys it reads into bytea.
      await downTo(db, 2);
      const older = await LiveLock.take(url);
      await expect(PgJobStore.open(url)).rejects.toThrow(
        `job store schema version 2 is older than this program's (${PG_SCHEMA_VERSION}), and 1 instance of the version before still works it: stop every instance, then start this version, which upgrades it`,
      );
      expect(await b.schemaVersion()).toBe(2);
      await older.close();
      const upgraded = await PgJobStore.open(url);
      expect(await upgraded.schemaVersion()).toBe(PG_SCHEMA_VERSION);
      await upgraded.close();

      // Schema 5 differs from 6 by what patient records may hold, which an instance of 5 refuses to read: no rolling upgrade.
      await downTo(db, 5);
      const beside = await LiveLock.take(url);
      await expect(PgJobStore.open(url)).rejects.toThrow('job store schema version 5 is older than this program');
      await beside.close();
      const afterwards = await PgJobStore.open(url);
      expect(await afterwards.schemaVersion()).toBe(PG_SCHEMA_VERSION);
      await afterwards.close();
    } finally {
      await db.end();
    }
  });

  it('applies two transactions on one patient in the order they took the patient, the second seeing the first', async () => {
    const first = gate();
    const holding = gate();
    const one = a.transaction(async (tx) => {
      await tx.getPatient('hl7|BSD|MR|1');
      holding.open();
      await first.opened;
      await rememberAppointment(tx, 'hl7|BSD|MR|1', 'APT-FIRST');
    });
    await holding.opened;
    const two = b.transaction((tx) => rememberAppointment(tx, 'hl7|BSD|MR|1', 'APT-SECOND'));
    const waited = await stillWaiting(two);
    first.open();
    await Promise.all([one, two]);
    expect(waited).toBe(true);
    const record = await b.transaction((tx) => tx.getPatient('hl7|BSD|MR|1'));
    expect(record?.appointments.map((x) => x.appointmentId)).toEqual(['APT-FIRST', 'APT-SECOND']);
  });

  /** A transaction at A that reads elig_1, holding its lock until `release()`, then writes `change` of it. */
  const heldAtA = async (change: (row: CheckRow) => CheckRow) => {
    const released = gate();
    const holding = gate();
    const done = a.transaction(async (tx) => {
      const row = await tx.getCheck('elig_1');
      holding.open();
      await released.opened;
      if (row) await tx.putCheck(change(row));
    });
    await holding.opened;
    return { release: released.open, done };
  };

  it('makes a webhook at one instance wait for a step on the same check at the other, then see it', async () => {
    await a.transaction((tx) => tx.putCheck(checkRow('elig_1', { state: 'awaiting-result', correlationId: 'corr-1' })));
    const step = await heldAtA((row) => ({ ...row, attempts: row.attempts + 1 }));
    const webhook = b.transaction(async (tx) => {
      const row = await tx.checkByCorrelationId('corr-1');
      if (row) await tx.putCheck({ ...row, state: 'result-stored', result: { correlationId: 'corr-1', status: 'Completed' } });
    });
    const waited = await stillWaiting(webhook);
    step.release();
    await Promise.all([step.done, webhook]);
    expect(waited).toBe(true);
    const row = await a.transaction((tx) => tx.getCheck('elig_1'));
    expect([row?.state, row?.attempts]).toEqual(['result-stored', 1]);
  });

  it("cancels the Coverage of a plan the PMS drops while the other instance's worker finishes dating it, between the drop reading the plan's checks and taking them", async () => {
    // An HL7 patient of one sender, booked with a plan twice: a visit over, and one the PMS then ended the plan before (its Coverage being dated).
    const ofHl7 = (key: string, change: Partial<CheckRow>): CheckRow => {
      const row = checkRow(key);
      const patient = { ...row.check.patient, identifiers: [{ system: 'SC', type: 'MR', value: 'P-77' }] };
      const source = { kind: 'hl7' as const, messageControlId: 'M-1', messageType: 'SIU^S12', sendingFacility: 'BSD-MAIN', receivedAt: NOW };
      return { ...row, patientKey: 'hl7|BSD-MAIN|SC|P-77', ...change, check: { ...row.check, ...change.check, patient, source } };
    };
    const written = { requestId: 'req', responseId: 'res' };
    const base = checkRow('elig_x').check;
    await a.transaction(async (tx) => {
      await tx.putCheck(ofHl7('elig_over', { state: 'written', written, dueAt: undefined, check: { ...base, dateOfService: '2026-10-01' } }));
      const ended = { ...base, dateOfService: '2026-12-01', coverage: { ...base.coverage, period: { end: '2026-11-30' } } };
      await tx.putCheck(ofHl7('elig_dated', { state: 'ending-coverage', written, dueAt: NOW, planDroppedAt: NOW, check: ended }));
    });
    const worker = new Worker(RIG_OPTIONS, {
      store: b,
      client: { verify: unused, requestVerification: unused, getVerification: unused, listPayers: unused },
      resolver: unused,
      writer: async () => ({ write: unused, endCoverage: async () => true }),
      now: () => new Date(),
      log: { info: () => undefined, warn: () => undefined, error: () => undefined },
      emit: () => undefined,
    });
    // The drop at a reads the plan's checks, then the worker at b finishes the dating before the drop takes them.
    const dropAt = new Date().toISOString();
    const record = { patient: base.patient, coverages: [], appointments: [], updatedAt: dropAt, messageControlId: 'M-2' };
    const taken = await a.transaction(async (tx) => {
      const racing: StoreTx = Object.create(tx, {
        checksOfPatient: {
          value: async (...args: Parameters<StoreTx['checksOfPatient']>) => {
            const rows = await tx.checksOfPatient(...args);
            worker.start();
            await until('the dating done at b', async () => (await b.transaction((other) => other.getCheck('elig_dated')))?.state === 'cancelled');
            await worker.stop();
            return rows;
          },
        },
      });
      return endDroppedPlans(racing, 'hl7|BSD-MAIN|SC|P-77', record, [base.subscriber.memberId], dropAt);
    });
    // Its Coverage, dated, is cancelled next, the dates it was given kept: the PMS's last word is the drop.
    expect(taken).toEqual(['elig_dated']);
    const dated = await a.transaction((tx) => tx.getCheck('elig_dated'));
    expect([dated?.state, dated?.planDroppedAt, dated?.check.coverage.period]).toEqual(['ending-coverage', dropAt, undefined]);
    expect((await a.transaction((tx) => tx.getCheck('elig_over')))?.planDroppedAt).toBe(dropAt);
  });

  it("names the pair one instance's worker writes for a visit the other cancels meanwhile, and looks for the pair of one whose write it did not have in hand", async () => {
    const book = (key: string, status: 'booked' | 'cancelled') => (tx: StoreTx) => {
      const { check } = checkRow(key);
      return scheduleAppointment(tx, { key: `apt-${key}`, patientKey: 'fhir|Patient/pat-ellen', dateOfService: check.dateOfService, status, checks: status === 'booked' ? [check] : [], basis: {} }, {
        now: new Date(),
        policy: RIG_OPTIONS.policy,
      });
    };
    const result = { ...(resultBody('completed-minimal') as object), correlationId: 'corr-w' };
    for (const key of ['elig_flying', 'elig_left']) {
      await a.transaction(book(key, 'booked'));
      await a.transaction(async (tx) => tx.putCheck({ ...((await tx.getCheck(key)) as CheckRow), state: 'result-stored', result, resultAt: new Date().toISOString(), correlationId: `corr-${key}`, dueAt: new Date(Date.now() + 60_000).toISOString() }));
    }
    await a.transaction(async (tx) => tx.putCheck({ ...((await tx.getCheck('elig_flying')) as CheckRow), dueAt: new Date().toISOString() }));
    const [writing, release] = [gate(), gate()];
    const looked: string[] = [];
    const worker = new Worker(RIG_OPTIONS, {
      store: b,
      client: { verify: unused, requestVerification: unused, getVerification: unused, listPayers: unused },
      resolver: unused,
      writer: async () => ({
        async write(check) {
          writing.open();
          await release.opened;
          return { requestId: `req-${check.idempotencyKey}`, responseId: `res-${check.idempotencyKey}` } as WrittenEligibility;
        },
        find: async (check) => (looked.push(check.idempotencyKey), undefined),
      }),
      now: () => new Date(),
      log: { info: () => undefined, warn: () => undefined, error: () => undefined },
      emit: () => undefined,
    });
    worker.start();
    try {
      await writing.opened;
      await a.transaction(book('elig_flying', 'cancelled'));
      await a.transaction(book('elig_left', 'cancelled'));
      release.open();
      const settled = (key: string) => until(`${key} settled`, async () => {
        const row = await a.transaction((tx) => tx.getCheck(key));
        return row?.dueAt === undefined && row;
      });
      expect(await settled('elig_flying')).toMatchObject({ state: 'written', written: { responseId: 'res-elig_flying' } });
      expect(await settled('elig_left')).toMatchObject({ state: 'cancelled', lastError: 'the appointment was cancelled' });
      expect(looked).toEqual(['elig_left']);
    } finally {
      await worker.stop();
    }
  });

  it('leaves no outage in the store when the service answers while the store is still keeping when it was found out', async () => {
    for (let i = 0; i < 3; i++) await a.transaction((tx) => tx.putCheck(checkRow(`elig_${i}`, { coverageFingerprint: `coverage-${i}` })));
    // The store slow to take when the service was found out, as a pool under load is: the service answers meanwhile.
    const kept = gate();
    const slowStore: JobStore = Object.create(b, {
      transaction: {
        writable: true,
        configurable: true,
        value: <T>(work: (tx: StoreTx) => Promise<T>) =>
          b.transaction((tx) =>
            work(Object.create(tx, { setMeta: { writable: true, configurable: true, value: async (key: string, value: string) => (value ? kept.opened : Promise.resolve()).then(() => tx.setMeta(key, value)) } })),
          ),
      },
    });
    let calls = 0;
    const infos: string[] = [];
    const worker = new Worker(RIG_OPTIONS, {
      store: slowStore,
      client: {
        // Five failures of three checks find it out; the probe after them is answered (a 400: the service is there).
        verify: async () => {
          throw new ServiceError({ operation: 'verify', status: ++calls <= 5 ? 503 : 400, problem: { title: calls <= 5 ? 'unavailable' : 'bad request' } });
        },
        requestVerification: unused,
        getVerification: unused,
        listPayers: unused,
      },
      resolver: () => ({ resolve: () => ({ status: 'resolved', name: 'Guardian', commonPayerId: '64246', supportsAsync: false, asyncPortals: [], syncPortals: ['portal-a'] }) }) as unknown as PayerResolver,
      writer: unused,
      now: () => new Date(),
      log: { info: (_fields, msg) => infos.push(msg), warn: () => undefined, error: () => undefined },
      emit: () => undefined,
    });
    worker.start();
    await until('the service answering again', async () => infos.some((msg) => /answers again/.test(msg)));
    kept.open();
    await worker.stop();
    // Kept after its end was read, it would be taken up by the next worker started, a day later say.
    await until('the outage forgotten', async () => (await a.transaction((tx) => tx.getMeta('service-out-since'))) === '');
  });

  it('has the instance still running send again the checks the other gave up for a 429 and stopped for good, once a send of its own is taken: those alone, and once', async () => {
    let rig: WorkerRig | undefined;
    try {
      const { throttled, unavailable } = await throttledElsewhere((started) => (rig = started), { first: a, second: b });
      expect(throttled.now.round).toBe(throttled.round + 1);
      expect(unavailable.now).toMatchObject({ state: 'needs-attention', round: unavailable.round });
      expect(await keptOutages(a)).toEqual({ portals: [] });
    } finally {
      await rig?.close();
    }
  });

  it("applies a webhook that came before its send's answer when that answer commits at the other instance while the webhook waits for the check", async () => {
    await a.transaction((tx) => tx.putCheck(checkRow('elig_1', { state: 'submitted' })));
    // The worker at a stores the service's answer to the send: the check awaits its result under the correlation id.
    const answer = await heldAtA((row) => ({ ...row, state: 'awaiting-result', correlationId: 'ver-1' }));
    const worker = webhookWorker(b);
    const body = { ...(resultBody('completed-minimal') as object), correlationId: 'ver-1', externalId: 'ext-elig_1' };
    const delivery = { webhookId: 'msg_1', rawBody: JSON.stringify(body), receivedAt: new Date(), outcome: toOutcome(body) };
    const webhook = ingestWebhook(b, worker, delivery, new Date());
    const waited = await stillWaiting(webhook);
    answer.release();
    await answer.done;
    expect([waited, (await webhook).status]).toEqual([true, 'applied']);
    const row = await a.transaction((tx) => tx.getCheck('elig_1'));
    expect([row?.state, row?.correlationId]).toEqual(['result-stored', 'ver-1']);
  });

  it('tells the outage watch of a webhook once, after its transaction committed, though PostgreSQL ran the transaction again (a serialization failure)', async () => {
    const keys = ['elig_m0', 'elig_m1', 'elig_m2', 'elig_m3', 'elig_m4'];
    await a.transaction(async (tx) => {
      for (const [i, key] of keys.entries()) await tx.putCheck(checkRow(key, { state: 'awaiting-result', mode: 'async', portalId: 'portal-m', correlationId: `ver-m${i}` }));
    });
    const worker = webhookWorker(b);
    // Each transaction's first run fails as a serialization failure does at its commit, and pg-transaction runs it again.
    let runs = 0;
    const retried = {
      transaction: <T>(work: (tx: StoreTx) => Promise<T>) => {
        let first = true;
        return b.transaction(async (tx) => {
          runs++;
          const done = await work(tx);
          if (!first) return done;
          first = false;
          throw Object.assign(new Error('could not serialize access due to read/write dependencies among transactions'), { code: '40001' });
        });
      },
    } as unknown as JobStore;
    const deliver = async (i: number) => {
      const body = { ...(resultBody('failed-site-maintenance') as object), correlationId: `ver-m${i}`, externalId: `ext-${keys[i]}` };
      const delivery = { webhookId: `msg_m${i}`, rawBody: JSON.stringify(body), receivedAt: new Date(), outcome: toOutcome(body) };
      expect((await ingestWebhook(retried, worker, delivery, new Date())).status).toBe('applied');
    };
    for (const i of [0, 1, 2]) await deliver(i);
    expect(runs).toBe(6);
    // Three answers saying the portal away, fewer than OUTAGE_AFTER: counted at each run, they were six, and found it out.
    expect(worker.service.portalOut('portal-m')).toBe(false);
    const retrying = await a.listChecks({ states: ['received'] });
    expect(retrying.map((row) => [row.key, row.round, row.lastError]).sort()).toEqual(keys.slice(0, 3).map((key) => [key, 1, 'SiteMaintenance: retrying later']));
    // The fifth finds it out, told after its step: the step holds its check for it all the same, as a send's answer's does.
    for (const i of [3, 4]) await deliver(i);
    expect(worker.service.portalOut('portal-m')).toBe(true);
    const finder = await a.transaction((tx) => tx.getCheck('elig_m4'));
    expect([finder?.state, finder?.round, finder?.attempts]).toEqual(['received', 1, 0]);
    expect(finder?.lastError).toMatch(/^SiteMaintenance; the verification service has not answered for payer portal portal-m since \d{4}-\d{2}-\d{2}.*; waiting for it, the wait using no attempt$/);
  });

  it('keeps one message when both instances receive it at once; the second answers from the first', async () => {
    const message = { kind: 'hl7' as const, dedupeKey: 'PMS|BSD|MSG-1', receivedAt: NOW, raw: 'MSH|...', status: 'received' as const };
    const committed = gate();
    const inserted = gate();
    const first = a.transaction(async (tx) => {
      const added = await tx.addMessage(message);
      inserted.open();
      await committed.opened;
      await tx.updateMessage(added.message.id, { status: 'handled', answer: '["AA"]' });
      return added;
    });
    await inserted.opened;
    const second = b.transaction((tx) => tx.addMessage(message));
    const waited = await stillWaiting(second);
    committed.open();
    const [one, two] = await Promise.all([first, second]);
    expect(waited).toBe(true);
    expect([one.duplicate, two.duplicate]).toEqual([false, true]);
    expect([two.message.id, two.message.answer]).toEqual([one.message.id, '["AA"]']);
    expect(await b.listMessages()).toHaveLength(1);
  });

  it('stores a message whose first receiver rolled back when the other instance receives it', async () => {
    const message = { kind: 'webhook' as const, dedupeKey: 'msg_1', receivedAt: NOW, raw: '{}', status: 'received' as const };
    const failed = gate();
    const inserted = gate();
    const first = a.transaction(async (tx) => {
      await tx.addMessage(message);
      inserted.open();
      await failed.opened;
      throw new Error('the chart could not be read');
    });
    await inserted.opened;
    const second = b.transaction((tx) => tx.addMessage(message));
    failed.open();
    await expect(first).rejects.toThrow('the chart could not be read');
    expect((await second).duplicate).toBe(false);
    expect(await a.listMessages()).toHaveLength(1);
  });

  it('creates a new check once when both instances schedule it at once; the later one makes the next round', async () => {
    const schedule = (store: PgJobStore) =>
      store.transaction(async (tx) => {
        const existing = await tx.getCheck('elig_new');
        await tx.putCheck(checkRow('elig_new', { round: existing ? existing.round + 1 : 0 }));
      });
    await Promise.all([schedule(a), schedule(b), schedule(a), schedule(b)]);
    expect((await a.listChecks()).map((c) => [c.key, c.round])).toEqual([['elig_new', 3]]);
  });

  it('runs again the transaction that lost a deadlock, so both commit', async () => {
    const aHolds = gate();
    const bHolds = gate();
    const runs = { a: 0, b: 0 };
    const crossing = (store: PgJobStore, name: 'a' | 'b', first: string, second: string, mine: typeof aHolds, theirs: typeof aHolds) =>
      store.transaction(async (tx) => {
        runs[name]++;
        await tx.getCheck(first);
        mine.open();
        await theirs.opened;
        await tx.getCheck(second);
        await tx.setMeta(name, `${first} then ${second}`);
      });
    await Promise.all([crossing(a, 'a', 'elig_x', 'elig_y', aHolds, bHolds), crossing(b, 'b', 'elig_y', 'elig_x', bHolds, aHolds)]);
    expect(runs.a + runs.b).toBe(3);
    expect(await a.transaction(async (tx) => [await tx.getMeta('a'), await tx.getMeta('b')])).toEqual(['elig_x then elig_y', 'elig_y then elig_x']);
  });

  it('fails only the transaction whose connection the server ends (PostgreSQL stopping), and goes on after it', async () => {
    const admin = new Client({ connectionString: url });
    await admin.connect();
    try {
      const cut = a.transaction(async (tx) => {
        await tx.setMeta('cut', 'before');
        const ended = await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'`);
        expect(ended.rowCount).toBe(1);
        // The server's goodbye reaches the connection while no query of the transaction runs.
        await new Promise((resolve) => setTimeout(resolve, 300));
        await tx.setMeta('cut', 'after');
      });
      await expect(cut).rejects.toThrow();
    } finally {
      await admin.end();
    }
    await a.transaction((tx) => tx.setMeta('cut', 'again'));
    expect(await b.transaction((tx) => tx.getMeta('cut'))).toBe('again');
  });

  it('fails a transaction whose database stops answering without a word, and goes on once it answers again', async () => {
    const target = new URL(url);
    const hop = await switchableProxy(Number(target.port));
    const through = new URL(url);
    through.port = String(hop.port);
    const c = await PgJobStore.open(through.toString(), { queryTimeoutMs: 500 });
    try {
      await c.transaction((tx) => tx.setMeta('silent', 'before'));
      hop.frozen = true;
      const started = Date.now();
      await expect(c.transaction((tx) => tx.setMeta('silent', 'lost'))).rejects.toThrow('Query read timeout');
      expect(Date.now() - started).toBeLessThan(3000);
      hop.frozen = false;
      // The connection that held the unanswered query is gone: the next one reads answers in order.
      await c.transaction((tx) => tx.setMeta('silent', 'after'));
      expect(await c.transaction((tx) => tx.getMeta('silent'))).toBe('after');
      expect(await b.transaction((tx) => tx.getMeta('silent'))).toBe('after');
    } finally {
      await c.close();
      await hop.close();
    }
  });

  it('shares a rate bucket between the instances', async () => {
    const waits = await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 === 0 ? a : b).takeRateToken('portal:DELTA', 5, NOW)));
    expect(waits.sort((x, y) => x - y)).toEqual([0, 0, 0, 0, 0, 200, 400, 600, 800, 1000]);
  });
});

describe('PgJobStore opening a database that asks for a password none was given for', () => {
  it('says where the password goes, and closes the connection rather than leaving it to the server', async () => {
    // A server that asks for SCRAM, as PostgreSQL does by default, and then waits, as PostgreSQL
    // waits up to its authentication_timeout (a minute) for an answer that never comes.
    const authentication = (code: number, data: string) => {
      const head = Buffer.alloc(9);
      head.write('R');
      head.writeInt32BE(8 + Buffer.byteLength(data), 1);
      head.writeInt32BE(code, 5);
      return Buffer.concat([head, Buffer.from(data)]);
    };
    const sockets: Socket[] = [];
    const server: Server = createServer((socket) => {
      sockets.push(socket);
      // The startup message, then the client's first SCRAM message: the second needs the password.
      socket.once('data', () => {
        socket.write(authentication(10, 'SCRAM-SHA-256\0\0'));
        socket.once('data', () => socket.write(authentication(11, 'r=nonce,s=c2FsdA==,i=4096')));
      });
    });
    const closed = new Promise<void>((resolve) => server.once('connection', (socket) => socket.once('close', () => resolve())));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const given = process.env.PGPASSWORD;
    delete process.env.PGPASSWORD;
    try {
      const url = `postgres://elig@127.0.0.1:${(server.address() as AddressInfo).port}/eligibility`;
      await expect(PgJobStore.open(url)).rejects.toThrow('the database asks for a password: set PGPASSWORD, or the whole URL in DENTAL_ELIG_STORE');
      await closed;
    } finally {
      if (given !== undefined) process.env.PGPASSWORD = given;
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe("PgJobStore's clock", () => {
  it("goes by the database's clock from a first reading that came slowly, not by this machine's an hour off", async () => {
    const url = new URL(await postgres.createDatabase());
    const target = { port: Number(url.port), host: url.hostname };
    // A hop that holds the answer to the clock's reading back a second and a half, as a database
    // under load or far away answers: the answers after it wait their turn behind it.
    const sockets = new Set<Socket>();
    const hop: Server = createServer((socket) => {
      sockets.add(socket);
      const upstream = connect(target.port, target.host);
      sockets.add(upstream);
      let reading = false;
      let passed = Promise.resolve();
      socket.on('data', (chunk: Buffer) => {
        if (chunk.includes('clock_timestamp')) reading = true;
        upstream.write(chunk);
      });
      upstream.on('data', (chunk: Buffer) => {
        const held = reading;
        reading = false;
        passed = passed.then(() => (held ? sleep(1500) : undefined)).then(() => void socket.write(chunk));
      });
      socket.on('error', () => upstream.destroy());
      upstream.on('error', () => socket.destroy());
      socket.on('close', () => upstream.destroy());
    });
    await new Promise<void>((resolve) => hop.listen(0, '127.0.0.1', resolve));
    const realNow = Date.now.bind(Date);
    const ahead = jest.spyOn(Date, 'now').mockImplementation(() => realNow() + 3_600_000);
    let store: PgJobStore | undefined;
    try {
      url.port = String((hop.address() as AddressInfo).port);
      store = await PgJobStore.open(url.toString());
      const db = new Client({ connectionString: url.toString() });
      await db.connect();
      const { rows } = await db.query<{ at: Date }>('SELECT clock_timestamp() AS at');
      await db.end();
      // Off by the reading's round trip at most, not by the hour this machine's clock is.
      expect(Math.abs(store.now().getTime() - (rows[0] as { at: Date }).at.getTime())).toBeLessThan(60_000);
    } finally {
      ahead.mockRestore();
      await store?.close();
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => hop.close(resolve));
    }
  });
});
