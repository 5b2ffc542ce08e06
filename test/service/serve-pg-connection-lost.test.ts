import { Client as PgClient } from 'pg';
import { frame } from '../../src/service/mllp-framing';
import { startServe, type ServeUnderTest } from '../hardening/serve-under-test';
import { booking } from '../support/bookings';
import { postgresForTests } from '../support/postgres';
import { until } from '../sync/harness';
import { client, msa } from './mllp-client';

/**
 * A booking arriving as serve's connection to PostgreSQL is lost (a restart of the server, a
 * failover, an administrator ending it): the message was not stored through no fault of its own,
 * so it is not kept as a dead letter for a person and answered AR, which an original-mode sender
 * takes as final, but left unanswered, as when the database is down, so the sender sends it again.
 */
const postgres = postgresForTests();
let serve: ServeUnderTest | undefined;
afterEach(async () => {
  await serve?.close();
  serve = undefined;
});

it('gives no ACK and keeps no dead letter for a message whose transaction lost its connection, and takes it when sent again', async () => {
  const url = await postgres.createDatabase();
  serve = await startServe({ DENTAL_ELIG_STORE: url });
  const db = new PgClient({ connectionString: url });
  await db.connect();
  try {
    // The booking's transaction waits on the messages table, and its connection is ended while it waits.
    await db.query('BEGIN');
    await db.query('LOCK TABLE messages IN ACCESS EXCLUSIVE MODE');
    // PostgreSQL reads pg_stat_activity once in a transaction and shows that copy until it ends: this one, holding the
    // lock, would never see a connection opened after its first look. Each look reads it afresh.
    const activity = async (sql: string) => {
      await db.query('SELECT pg_stat_clear_snapshot()');
      return db.query(sql);
    };
    // serve's idle pooled connections are ended, so the booking comes on one opened after that first look, as it does
    // whenever the worker has the pooled one in hand as the booking arrives. Each is waited for until it has gone, so the
    // pool has dropped it before the booking asks for one (a booking on a connection ending would get no ACK at once).
    await activity("SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'dental-elig' AND state = 'idle'");
    const sender = await client(serve.serving.mllp.port);
    const message = booking('LOST', 1);
    sender.socket.write(frame(message));
    // Blocked in its INSERT, or while parsing it (pg_stat_activity still shows the BEGIN before it).
    await until('the booking waiting on the lock', async () => {
      const { rowCount } = await activity('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pg_blocking_pids(pid) @> ARRAY[pg_backend_pid()]');
      return (rowCount ?? 0) > 0;
    }).catch(async (err: unknown) => {
      // What serve's connections were doing then is what to look at (SQL text only: parameters are not shown).
      const { rows } = await activity("SELECT state, wait_event_type, wait_event, left(query, 100) AS query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()");
      throw new Error(`${(err as Error).message}; the database's other connections: ${JSON.stringify(rows)}`);
    });
    await db.query('ROLLBACK');

    await Promise.race([sender.closed, sender.waitFor(1, 10_000)]).catch(() => undefined);
    expect(sender.acks.map((ack) => msa(ack).code)).toEqual([]);
    const again = await client(serve.serving.mllp.port);
    again.socket.write(frame(message));
    expect((await again.waitFor(1)).map((ack) => msa(ack).code)).toEqual(['AA']);
    again.socket.end();
    const { rows } = await db.query<{ status: string }>('SELECT status FROM messages');
    expect(rows.map((r) => r.status)).toEqual(['handled']);
  } finally {
    await db.end();
  }
}, 90_000);
