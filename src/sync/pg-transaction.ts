import type { ClientBase, Pool, PoolClient } from 'pg';

/**
 * Transactions on PostgreSQL as the job store runs them: READ COMMITTED, each entity a transaction
 * reads locked for the rest of it (lockKey), and a transaction that loses a race to another
 * instance run again rather than failed.
 */

export type Queryable = Pick<ClientBase, 'query'>;

/**
 * Errors a second run settles: a deadlock between two instances locking the same keys in
 * another order, a serialization failure, and a unique key another instance inserted first
 * (the second run reads it and goes on from there).
 */
const RETRYABLE = new Set(['40P01', '40001', '23505']);
const ATTEMPTS = 5;

export async function inTransaction<T>(pool: Pool, work: (db: PoolClient) => Promise<T>): Promise<T> {
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

function sqlStateOf(err: unknown): string {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' ? code : '';
}
