import type { ClientBase, Pool, PoolClient } from 'pg';
import { StoreUnavailableError } from './job-store';

/**
 * Transactions on PostgreSQL as the job store runs them: READ COMMITTED, each entity a transaction
 * reads locked for the rest of it (lockKey), and a transaction that loses a race to another
 * instance run again rather than failed.
 */

export type Queryable = Pick<ClientBase, 'query'>;

/**
 * Errors a second run settles: a deadlock between two instances locking the same keys in
 * another order, and a serialization failure. Not a unique key another row holds (23505): each
 * insert names the key it may meet as its conflict (ON CONFLICT), under the entity's lock, so
 * one that still meets another row's key (a check given a correlationId another check holds)
 * meets it again at every run: it fails at once, saying which key (see duplicateKey).
 */
const RETRYABLE = new Set(['40P01', '40001']);
const ATTEMPTS = 5;

export async function inTransaction<T>(pool: Pool, work: (db: PoolClient) => Promise<T>): Promise<T> {
  try {
    return await attempts(pool, work);
  } catch (err) {
    throw storeError(err);
  }
}

/** What a failed statement or transaction is thrown as: the server out of reach is StoreUnavailableError, a unique key another row holds said as such, anything else itself. */
export function storeError(err: unknown): unknown {
  if (connectionLost(err)) return new StoreUnavailableError(err);
  return sqlStateOf(err) === UNIQUE_VIOLATION ? duplicateKey(err as Error) : err;
}

const UNIQUE_VIOLATION = '23505';

/**
 * A unique key's refusal, naming the key (its index, not the value: node-postgres keeps that in
 * `detail`, which may be a patient's) and that it was not tried again; the SQLSTATE kept.
 */
function duplicateKey(err: Error): Error {
  const constraint = (err as { constraint?: unknown }).constraint;
  const key = typeof constraint === 'string' ? `unique key ${constraint}` : 'a unique key';
  return Object.assign(new Error(`job store: ${key} refused the change, another row holding its value already; not tried again, as it would be refused again`, { cause: err }), { code: UNIQUE_VIOLATION });
}

async function attempts<T>(pool: Pool, work: (db: PoolClient) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const db = await pool.connect();
    let broken: Error | undefined;
    try {
      await db.query('BEGIN');
      const result = await work(db);
      await db.query('COMMIT');
      return result;
    } catch (err) {
      // A query that timed out has no answer yet: the connection would give it to the next one.
      if (err instanceof Error && err.message === 'Query read timeout') broken = err;
      else {
        await db.query('ROLLBACK').catch((rollback: unknown) => {
          // A connection that cannot roll back is not given back to the pool.
          broken = rollback instanceof Error ? rollback : new Error('rollback failed');
        });
      }
      if (attempt >= ATTEMPTS || !RETRYABLE.has(sqlStateOf(err))) throw err;
    } finally {
      db.release(broken);
    }
    await new Promise((resolve) => setTimeout(resolve, Math.random() * 10 * attempt));
  }
}

/**
 * Holds `namespace:key` until the transaction ends, whether or not a row exists yet, so two
 * instances reading and then writing one patient, appointment or check take turns.
 */
export async function lockKey(db: Queryable, namespace: string, key: string): Promise<void> {
  await db.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [`${namespace}:${key}`]);
}

/** Connection errors of the socket and of node-postgres, thrown without a SQLSTATE. */
const SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);
const LOST = /^(Connection terminated|Client has encountered a connection error|timeout exceeded when trying to connect|Query read timeout)/;

/**
 * The server out of reach or gone from under the transaction: class 08 (connection exception),
 * 57P01 to 57P03 (a shutdown ended the session, or the server is still starting), a socket that
 * failed, a query that timed out without an answer.
 */
function connectionLost(err: unknown): err is Error {
  if (!(err instanceof Error)) return false;
  const state = sqlStateOf(err);
  return /^08|^57P0[123]$/.test(state) || SOCKET_CODES.has(state) || LOST.test(err.message);
}

function sqlStateOf(err: unknown): string {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? code : '';
}
