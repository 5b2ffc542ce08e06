import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import Database from 'better-sqlite3';
import { openJobStore } from '../../src/sync/open-store';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { jobStoreContract } from './job-store-contract';

/** The SQLite store on a real file in a temporary folder, opened as the service opens it. */
jobStoreContract('SqliteJobStore', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'elig-store-'));
  return {
    open: () => openJobStore(undefined, dir),
    remove: async () => rmSync(dir, { recursive: true, force: true }),
  };
});

describe('SqliteJobStore', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'elig-store-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('runs in WAL mode with synchronous=FULL, at the current schema version', async () => {
    const store = SqliteJobStore.open(dir);
    const db = new Database(path.join(dir, 'dental-elig.sqlite'), { readonly: true });
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    db.close();
    expect(store.schemaVersion).toBe(3);
    await store.close();
  });

  it('migrates a file of schema version 1 to the current one, keeping its data', async () => {
    const store = SqliteJobStore.open(dir);
    await store.transaction((tx) => tx.setMeta('poll-cursor', 'kept'));
    await store.close();
    const db = new Database(path.join(dir, 'dental-elig.sqlite'));
    db.exec('DROP TABLE rate_buckets');
    db.pragma('user_version = 1');
    db.close();
    const reopened = SqliteJobStore.open(dir);
    expect(reopened.schemaVersion).toBe(3);
    expect(await reopened.transaction((tx) => tx.getMeta('poll-cursor'))).toBe('kept');
    expect(await reopened.takeRateToken('portal', 1, '2026-11-23T10:00:00.000Z')).toBe(0);
    await reopened.close();
  });

  it('refuses a file from a newer version of the program', async () => {
    await SqliteJobStore.open(dir).close();
    const db = new Database(path.join(dir, 'dental-elig.sqlite'));
    db.pragma('user_version = 99');
    db.close();
    expect(() => SqliteJobStore.open(dir)).toThrow(/schema version 99 is newer/);
  });
});
