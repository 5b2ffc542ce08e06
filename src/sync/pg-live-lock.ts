import { randomInt } from 'node:crypto';
import { Client } from 'pg';

/**
 * An instance's sign of life to the others sharing a PostgreSQL store: a session advisory lock
 * (`LIVE_NAMESPACE`, key) held on a connection of its own. PostgreSQL drops it with the
 * connection when the process dies, a kill -9 too, so the leases taken under its key are free at
 * once rather than when they run out (a host gone without a word is found by TCP keepalive, and
 * its leases still end when they run out, whichever comes first). Lost while the process lives
 * (the connection dropped, the server restarted), it is taken again; meanwhile `key` is undefined
 * and this instance's new leases are plain ones. Another instance may take those it held when
 * only its connection dropped; after a restart of the server, not for RESTART_GRACE_SECONDS.
 */
export class LiveLock {
  private client: Client | undefined;
  private held: number | undefined;
  private closed = false;
  private retry: NodeJS.Timeout | undefined;

  private constructor(private readonly url: string) {}

  /** Takes a lock under a key no live instance holds. */
  static async take(url: string): Promise<LiveLock> {
    const lock = new LiveLock(url);
    await lock.connect(randomKey());
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
    await this.client?.end().catch(() => undefined);
  }

  private async connect(wanted: number): Promise<void> {
    // A database that does not answer fails the attempt, which is tried again later, rather than holding it for good.
    const client = new Client({ connectionString: this.url, connectionTimeoutMillis: 10_000, query_timeout: 10_000, keepAlive: true, keepAliveInitialDelayMillis: 10_000, application_name: 'dental-elig live' });
    // Ending the connection is how the lock is lost: reported on the client, never thrown at the process.
    client.on('error', () => this.lost(client));
    client.on('end', () => this.lost(client));
    await client.connect();
    try {
      let key = wanted;
      // Another live instance drew the same key: draw again rather than wait for it.
      while (!(await client.query<{ taken: boolean }>('SELECT pg_try_advisory_lock($1, $2) AS taken', [LIVE_NAMESPACE, key])).rows[0]?.taken) key = randomKey();
      // Closed while this connection was being made (a retake): it would hold the lock, and the process open, for good.
      if (this.closed) {
        await client.end().catch(() => undefined);
        return;
      }
      this.client = client;
      this.held = key;
    } catch (err) {
      await client.end().catch(() => undefined);
      throw err;
    }
  }

  private lost(client: Client): void {
    if (this.closed || client !== this.client) return;
    const key = this.held;
    this.client = undefined;
    this.held = undefined;
    client.end().catch(() => undefined);
    this.retake(key ?? randomKey(), RETAKE_FIRST_MS);
  }

  private retake(key: number, waitMs: number): void {
    this.retry = setTimeout(() => {
      if (this.closed) return;
      this.connect(key).catch(() => this.retake(key, Math.min(waitMs * 2, RETAKE_MAX_MS)));
    }, waitMs);
    this.retry.unref();
  }
}

/** The first key of every instance's lock ('elig'); the second is the instance's own. */
export const LIVE_NAMESPACE = 0x656c6967;
const RETAKE_FIRST_MS = 500;
const RETAKE_MAX_MS = 30_000;

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
