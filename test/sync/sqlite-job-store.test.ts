import fs from 'node:fs';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import Database from 'better-sqlite3';
import { openJobStore } from '../../src/sync/open-store';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { jobStoreContract } from './job-store-contract';
import { until } from './harness';

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

  it('runs in WAL mode, at the current schema version', async () => {
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

  describe('durability: each commit synced to disk off the event loop before its transaction is answered', () => {
    afterEach(() => jest.restoreAllMocks());

    /** fdatasync held until released: what the store is waiting for while the disk syncs. */
    function heldSyncs() {
      const real = fs.fdatasync;
      const held: Array<() => void> = [];
      jest.spyOn(fs, 'fdatasync').mockImplementation(((fd: number, done: (err: NodeJS.ErrnoException | null) => void) => {
        held.push(() => real(fd, done));
      }) as typeof fs.fdatasync);
      return held;
    }

    it('answers a transaction only once a sync of the WAL begun after its COMMIT has returned; four sync at once, the next waits for one of them', async () => {
      const store = SqliteJobStore.open(dir);
      const held = heldSyncs();
      const answered: boolean[] = [];
      const commits: Promise<unknown>[] = [];
      // Each in a batch of its own: the next is sent once the last has asked for its sync.
      for (let i = 0; i < 5; i++) {
        commits.push(store.transaction((tx) => tx.setMeta('k', `v${i}`)).then(() => (answered[i] = true)));
        if (i < 4) await until(`sync ${i + 1} asked for`, async () => held.length === i + 1);
      }
      await until('the fifth committed', async () => {
        const reader = new Database(path.join(dir, 'dental-elig.sqlite'), { readonly: true });
        const value = (reader.prepare('SELECT value FROM meta WHERE key = ?').get('k') as { value: string }).value;
        reader.close();
        return value === 'v4';
      });
      // All five committed (another connection reads the last), none answered, the fifth waiting for a sync to start.
      await new Promise((r) => setTimeout(r, 50));
      expect([answered.filter(Boolean).length, held.length]).toEqual([0, 4]);
      held.shift()?.();
      await commits[0];
      // The first sync returned: one begins for the fifth, which waits for it, not for the first.
      await until('a sync for the fifth asked for', async () => held.length === 4);
      expect(answered[4]).toBeUndefined();
      while (held.length > 0) held.shift()?.();
      await Promise.all(commits);
      jest.restoreAllMocks();
      await store.close();
    });

    it('answers commits in the order they were made, whichever sync returns first', async () => {
      const store = SqliteJobStore.open(dir);
      const held = heldSyncs();
      const answered: string[] = [];
      const first = store.transaction((tx) => tx.setMeta('k', 'first')).then(() => answered.push('first'));
      await until('the first sync asked for', async () => held.length === 1);
      const second = store.transaction((tx) => tx.setMeta('k', 'second')).then(() => answered.push('second'));
      await until('the second sync asked for', async () => held.length === 2);
      held[1]?.();
      await new Promise((r) => setTimeout(r, 50));
      expect(answered).toEqual([]);
      held[0]?.();
      await Promise.all([first, second]);
      expect(answered).toEqual(['first', 'second']);
      jest.restoreAllMocks();
      await store.close();
    });

    it('after a failed sync fails that transaction and every later one, and says so to /healthz, until reopened', async () => {
      const store = SqliteJobStore.open(dir);
      await store.transaction((tx) => tx.setMeta('k', 'before'));
      jest.spyOn(fs, 'fdatasync').mockImplementation(((_fd: number, done: (err: NodeJS.ErrnoException | null) => void) => {
        done(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' }));
      }) as typeof fs.fdatasync);
      await expect(store.transaction((tx) => tx.setMeta('k', 'lost'))).rejects.toThrow(/syncing the WAL to disk failed \(EIO\); restart the service/);
      jest.restoreAllMocks();
      await expect(store.transaction((tx) => tx.setMeta('k', 'after'))).rejects.toThrow(/syncing the WAL to disk failed/);
      await expect(store.ping()).rejects.toThrow(/syncing the WAL to disk failed/);
      await store.close();
      const reopened = SqliteJobStore.open(dir);
      await reopened.transaction((tx) => tx.setMeta('k', 'again'));
      expect(await reopened.transaction((tx) => tx.getMeta('k'))).toBe('again');
      await reopened.close();
    });

    it('checkpoints the WAL into the database file from its own thread, as commits come', async () => {
      const store = SqliteJobStore.open(dir);
      const file = path.join(dir, 'dental-elig.sqlite');
      const before = statSync(file).size;
      for (let i = 0; i < 20; i++) await store.transaction((tx) => tx.setMeta(`k${i}`, 'x'.repeat(50_000)));
      // The store's own connection does not checkpoint (that would block the event loop): the file grows only by the thread.
      await until('the database file holds the commits', async () => statSync(file).size > before + 20 * 50_000, 5_000);
      await store.close();
    });
    it('keeps the WAL bounded under steady load: it starts over past 16 MB', async () => {
      const store = SqliteJobStore.open(dir);
      const wal = path.join(dir, 'dental-elig.sqlite-wal');
      const commits: Promise<void>[] = [];
      // 60 MB committed back to back, each in a batch of its own, none waiting for the last to be answered.
      for (let i = 0; i < 60; i++) {
        commits.push(store.transaction((tx) => tx.setMeta(`big${i}`, String(i).repeat(1 << 20))));
        await new Promise((r) => setImmediate(r));
      }
      await Promise.all(commits);
      // Past 16 MB by a few commits at most (a checkpoint the thread is making holds the store's back); without it, over 100 MB.
      expect(statSync(wal).size).toBeLessThan(40 << 20);
      await store.close();
    });
  });

  it('refuses a file from a newer version of the program', async () => {
    await SqliteJobStore.open(dir).close();
    const db = new Database(path.join(dir, 'dental-elig.sqlite'));
    db.pragma('user_version = 99');
    db.close();
    expect(() => SqliteJobStore.open(dir)).toThrow(/schema version 99 is newer/);
  });
});
