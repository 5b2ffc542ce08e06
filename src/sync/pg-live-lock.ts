import { randomInt } from 'node:crypto';
import { Client } from 'pg';

/**
 * An instance's sign of life to the others sharing a PostgreSQL store: a session advisory lock
 * (`LIVE_NAMESPACE`, key) held on connections of its own. PostgreSQL drops it with the
 * connections when the process dies, a kill -9 too, so the leases taken under its key are free at
 * once rather than when they run out (a host gone without a word is found by TCP keepalive, and
 * its leases still end when they run out, whichever comes first).
 *
 * The lock is held in shared mode on two connections, so that one of them ending while the
 * process lives (an administrator's pg_terminate_backend, a proxy or firewall closing it) leaves
 * the lock held, and the checks in this instance's hands with it: were it held on one, another
 * instance would take them, and send them a second time, in the moment before it was taken again.
 * A key is drawn with the exclusive lock, which no other instance can take while one connection
 * holds the shared one, so no two live instances share a key. Lost on both connections while the
 * process lives (the network, a restart of the server), it is taken again; meanwhile `key` is
 * undefined and this instance's new leases are plain ones, put under the key once it is held again
 * (`retaken`). Another instance may take those it held when it lost both; after a restart of the
 * server, not for RESTART_GRACE_SECONDS.
 */
export class LiveLock {
  /** The connections holding the lock, LIVE_CONNECTIONS of them while it is fully held. */
  private readonly holders = new Set<Client>();
  private held: number | undefined;
  /** The key last held: taken again after every connection was lost, so the leases under it are this instance's again. */
  private lastKey = randomKey();
  private filling: Promise<void> | undefined;
  /** The connection a fill is making and taking the lock on: closed with the rest, or a database that stopped answering would hold close() and the process until its timeouts. */
  private opening: { client: Client; abandon: () => void } | undefined;
  private closed = false;
  private retry: NodeJS.Timeout | undefined;
  /** Whether the lock was held once: held again since, it was lost on every connection. */
  private takenBefore = false;

  private constructor(
    private readonly url: string,
    private readonly retaken: (key: number) => void,
  ) {}

  /**
   * Takes a lock under a key no live instance holds. `retaken` is told the key each time the lock is
   * held again after it was lost on every connection: the leases taken meanwhile carry none.
   */
  static async take(url: string, retaken: (key: number) => void = () => undefined): Promise<LiveLock> {
    const lock = new LiveLock(url, retaken);
    try {
      await lock.fill();
    } catch (err) {
      // One connection may hold it already: ended, so the process is not held open by it.
      await lock.close();
      throw err;
    }
    return lock;
  }

  /** The key this instance's leases carry, while the lock is held. */
  get key(): number | undefined {
    return this.held;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retry);
    this.held = undefined;
    const holders = [...this.holders, ...(this.opening ? [this.opening.client] : [])];
    this.holders.clear();
    this.opening?.abandon();
    await Promise.all(holders.map((client) => client.end().catch(() => undefined)));
    // A retake under way ends on the connection closed under it: closed means nothing of it is left.
    await this.filling?.catch(() => undefined);
  }

  /** Holds the lock on every connection it is to be held on; one filling at a time. */
  private fill(): Promise<void> {
    this.filling ??= this.fillEach().finally(() => (this.filling = undefined));
    return this.filling;
  }

  private async fillEach(): Promise<void> {
    while (!this.closed && this.holders.size < LIVE_CONNECTIONS) {
      const client = await this.connect();
      try {
        const drawn = this.held === undefined;
        const key = this.held ?? (await draw(client, this.lastKey));
        // With the key held already, a shared lock refused means another instance drew it after this one lost every connection.
        if (this.held !== undefined && !(await tryLock(client, 'pg_try_advisory_lock_shared', key))) throw new Error('the live lock was taken by another instance');
        // Closed while this connection was being made (a retake): it would hold the lock, and the process open, for good.
        if (this.closed) throw new Error('closed');
        this.holders.add(client);
        this.held = this.lastKey = key;
        if (drawn && this.takenBefore) this.retaken(key);
        this.takenBefore = true;
      } catch (err) {
        await client.end().catch(() => undefined);
        if (this.closed) return;
        throw err;
      } finally {
        this.opening = undefined;
      }
    }
  }

  private async connect(): Promise<Client> {
    // A database that does not answer fails the attempt, which is tried again later, rather than holding it for good.
    const client = new Client({ connectionString: this.url, connectionTimeoutMillis: 10_000, query_timeout: 10_000, keepAlive: true, keepAliveInitialDelayMillis: 10_000, application_name: 'dental-elig live' });
    // Ending the connection is how the lock is lost: reported on the client, never thrown at the process.
    client.on('error', () => this.lost(client));
    client.on('end', () => this.lost(client));
    try {
      // pg never settles a connect whose client was ended meanwhile: close() abandons it instead, and a
      // connect that had not reached the socket yet, and completes after, is ended then.
      await new Promise<void>((resolve, reject) => {
        this.opening = { client, abandon: () => reject(new Error('closed')) };
        client.connect().then(() => (this.closed ? void client.end().catch(() => undefined) : resolve()), reject);
      });
      // These connections do nothing but hold the lock: a database's idle_session_timeout (PostgreSQL 14 on) would end both at once.
      await client.query(`SELECT set_config('idle_session_timeout', '0', false) WHERE current_setting('server_version_num')::int >= 140000`);
    } catch (err) {
      this.opening = undefined;
      await client.end().catch(() => undefined);
      throw err;
    }
    return client;
  }

  private lost(client: Client): void {
    if (this.closed || !this.holders.delete(client)) return;
    client.end().catch(() => undefined);
    if (this.holders.size === 0) this.held = undefined;
    this.retake(RETAKE_FIRST_MS);
  }

  private retake(waitMs: number): void {
    if (this.closed || this.retry !== undefined) return;
    this.retry = setTimeout(() => {
      this.fill().then(
        () => {
          this.retry = undefined;
          // A connection lost while this retake was under way.
          if (this.holders.size < LIVE_CONNECTIONS) this.retake(RETAKE_FIRST_MS);
        },
        () => {
          this.retry = undefined;
          this.retake(Math.min(waitMs * 2, RETAKE_MAX_MS));
        },
      );
    }, waitMs);
    this.retry.unref();
  }
}

/** A key no live instance holds, taken shared on `client`: the exclusive lock first, which no other instance has while one holds it shared. */
async function draw(client: Client, wanted: number): Promise<number> {
  let key = wanted;
  // Another live instance drew the same key: draw again rather than wait for it.
  while (!(await tryLock(client, 'pg_try_advisory_lock', key))) key = randomKey();
  await client.query('SELECT pg_advisory_lock_shared($1, $2)', [LIVE_NAMESPACE, key]);
  await client.query('SELECT pg_advisory_unlock($1, $2)', [LIVE_NAMESPACE, key]);
  return key;
}

async function tryLock(client: Client, fn: 'pg_try_advisory_lock' | 'pg_try_advisory_lock_shared', key: number): Promise<boolean> {
  const { rows } = await client.query<{ taken: boolean }>(`SELECT ${fn}($1, $2) AS taken`, [LIVE_NAMESPACE, key]);
  return rows[0]?.taken === true;
}

/** The first key of every instance's lock ('elig'); the second is the instance's own. */
export const LIVE_NAMESPACE = 0x656c6967;
/** Connections each holding the lock: one may end while the process lives, and the lock stays. */
const LIVE_CONNECTIONS = 2;
const RETAKE_FIRST_MS = 500;
/**
 * The longest between tries at the lock: its leases meanwhile are plain ones, taken up only when they
 * run out if this instance dies before it holds it again, while the worker tries the store within 5 s.
 */
const RETAKE_MAX_MS = 5000;

/** A positive int4, so pg_locks' objid (an oid) reads back as the same integer. */
const randomKey = () => randomInt(1, 2 ** 31);

/**
 * How long after the server starts a lease taken before it is not taken for orphaned: a restart
 * drops every instance's lock at once, and each takes it again within RETAKE_MAX_MS of the
 * server's return, while the check it holds is still in its hands.
 */
const RESTART_GRACE_SECONDS = 60;

/**
 * Whether a lease was taken under a live lock that is gone (the process that held it died):
 * SQL over `checks`. The locks are read once per statement.
 */
export const LEASE_ORPHANED = `(lease_lock IS NOT NULL AND NOT lease_lock = ANY(ARRAY(
  SELECT objid::integer FROM pg_locks
  WHERE locktype = 'advisory' AND classid = ${LIVE_NAMESPACE} AND objsubid = 2 AND granted
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())))
  AND (leased_at IS NULL OR leased_at >= pg_postmaster_start_time() OR pg_postmaster_start_time() < now() - interval '${RESTART_GRACE_SECONDS} seconds'))`;
