import fs from 'node:fs';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { Database } from '../../src/sync/sqlite-driver';
import { openJobStore } from '../../src/sync/open-store';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { checkRow, jobStoreContract, NOW } from './job-store-contract';
import { nextCloseFails, nobodyHolds, until } from './harness';

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
    expect(store.schemaVersion).toBe(17);
    await store.close();
  });

  it('is readable by its owner alone, folder, file, WAL and shared memory: it holds patient data and dead letters as they arrived', async () => {
    // The data dir as serve's default makes it, two folders that are not there yet, under an umask that leaves files readable to all.
    const dataDir = path.join(dir, '.dental-elig', 'data');
    const umask = process.umask(0o022);
    try {
      const store = SqliteJobStore.open(dataDir);
      await store.transaction((tx) => tx.putCheck(checkRow('elig_private')));
      const file = path.join(dataDir, 'dental-elig.sqlite');
      const modes = [path.join(dir, '.dental-elig'), dataDir, file, `${file}-wal`, `${file}-shm`].map((p) => (statSync(p).mode & 0o777).toString(8));
      await store.close();
      expect(modes).toEqual(['700', '700', '600', '600', '600']);
    } finally {
      process.umask(umask);
    }
  });

  it('migrates a file of schema version 1 to the current one, keeping its data', async () => {
    const store = SqliteJobStore.open(dir);
    await store.transaction((tx) => tx.setMeta('poll-cursor', 'kept'));
    await store.close();
    const db = new Database(path.join(dir, 'dental-elig.sqlite'));
    db.exec('DROP TABLE rate_buckets; DROP TABLE check_results');
    db.pragma('user_version = 1');
    db.close();
    expect(store.upgradedFrom).toBeUndefined();
    const reopened = SqliteJobStore.open(dir);
    expect(reopened.schemaVersion).toBe(17);
    // Said as the sync starts: the point past which a rollback needs the copy kept before.
    expect(reopened.upgradedFrom).toBe(1);
    expect(await reopened.transaction((tx) => tx.getMeta('poll-cursor'))).toBe('kept');
    expect(await reopened.takeRateToken('portal', 1, '2026-11-23T10:00:00.000Z')).toBe(0);
    await reopened.close();
  });

  it('migrates a file of schema version 3, whose rows hold their verification body, to one that keeps the body in a table of its own', async () => {
    const body = { correlationId: 'corr-1', status: 'Completed', result: { plan: { name: 'PPO', maximums: [1500, 0.5] } } };
    const store = SqliteJobStore.open(dir);
    await store.transaction(async (tx) => {
      await tx.putCheck(checkRow('elig_written', { state: 'written', correlationId: 'corr-1', result: body, resultAt: NOW }));
      await tx.putCheck(checkRow('elig_null', { state: 'result-stored', result: null, resultAt: NOW }));
      await tx.putCheck(checkRow('elig_waiting', { state: 'awaiting-result', correlationId: 'corr-2' }));
    });
    const before = await store.listChecks();
    await store.close();
    // Version 3 as it was: the body inside the row's JSON, no result column.
    const db = new Database(path.join(dir, 'dental-elig.sqlite'));
    db.exec(`UPDATE checks SET row = json_set(row, '$.result', json((SELECT result FROM check_results r WHERE r.key = checks.key)))
               WHERE key IN (SELECT key FROM check_results);
             DROP TABLE check_results;`);
    db.pragma('user_version = 3');
    expect((db.prepare("SELECT row FROM checks WHERE key = 'elig_written'").get() as { row: string }).row).toContain('"maximums":[1500,0.5]');
    db.close();

    const reopened = SqliteJobStore.open(dir);
    expect(reopened.schemaVersion).toBe(17);
    expect(await reopened.listChecks()).toEqual(before);
    expect((await reopened.transaction((tx) => tx.checkByCorrelationId('corr-1')))?.result).toEqual(body);
    await reopened.close();
    const migrated = new Database(path.join(dir, 'dental-elig.sqlite'), { readonly: true });
    const rows = migrated.prepare('SELECT key, row, result FROM checks LEFT JOIN check_results USING (key) ORDER BY key').all() as { key: string; row: string; result: string | null }[];
    migrated.close();
    expect(rows.map((r) => [r.key, 'result' in JSON.parse(r.row), r.result === null ? null : JSON.parse(r.result)])).toEqual([
      ['elig_null', false, null],
      ['elig_waiting', false, null],
      ['elig_written', false, body],
    ]);
  });

  it('writes back the verification body of a check it read, and one changed since, as stored', async () => {
    const store = SqliteJobStore.open(dir);
    const first = { correlationId: 'corr-1', status: 'Completed', result: { plan: { name: 'PPO' } } };
    await store.transaction((tx) => tx.putCheck(checkRow('elig_1', { state: 'result-stored', result: first, resultAt: NOW })));
    // A step keeps the body it read...
    await store.transaction(async (tx) => {
      const current = await tx.getCheck('elig_1');
      if (current) await tx.putCheck({ ...current, state: 'written', written: { requestId: 'req-1', responseId: 'res-1' } });
    });
    expect(await store.transaction((tx) => tx.getCheck('elig_1'))).toEqual(expect.objectContaining({ state: 'written', result: first }));
    // ...and a re-verification replaces it with another.
    const second = { correlationId: 'corr-2', status: 'Failed', result: { title: 'portal down' } };
    await store.transaction(async (tx) => {
      const current = await tx.getCheck('elig_1');
      if (current) await tx.putCheck({ ...current, state: 'result-stored', result: second });
    });
    expect((await store.transaction((tx) => tx.getCheck('elig_1')))?.result).toEqual(second);
    // ...and a row put without one has none.
    await store.transaction(async (tx) => {
      const current = await tx.getCheck('elig_1');
      if (current) await tx.putCheck({ ...checkRow('elig_1'), updatedAt: current.updatedAt });
    });
    await store.close();
    const reopened = SqliteJobStore.open(dir);
    expect(await reopened.transaction((tx) => tx.getCheck('elig_1'))).not.toHaveProperty('result');
    await reopened.close();
  });

  describe('checks read again without parsing them again, never out of date', () => {
    const body = { correlationId: 'corr-1', status: 'Completed', result: { plan: { name: 'PPO' } } };

    it('reads what another connection committed since, body and all', async () => {
      const store = SqliteJobStore.open(dir);
      await store.transaction((tx) => tx.putCheck(checkRow('elig_1', { state: 'result-stored', result: body, resultAt: NOW })));
      expect((await store.transaction((tx) => tx.getCheck('elig_1')))?.result).toEqual(body);
      // The CLI, say: the same row's JSON, another body.
      const other = new Database(path.join(dir, 'dental-elig.sqlite'));
      other.prepare("UPDATE check_results SET result = json_set(result, '$.status', 'Failed') WHERE key = 'elig_1'").run();
      other.close();
      expect((await store.transaction((tx) => tx.getCheck('elig_1')))?.result).toEqual({ ...body, status: 'Failed' });
      await store.close();
    });

    it('forgets what a work that failed wrote, though its row reads the same', async () => {
      const store = SqliteJobStore.open(dir);
      await store.transaction((tx) => tx.putCheck(checkRow('elig_1', { state: 'result-stored', result: body, resultAt: NOW })));
      const failing = store.transaction(async (tx) => {
        const current = await tx.getCheck('elig_1');
        if (current) await tx.putCheck({ ...current, result: { ...body, status: 'Failed' } });
        throw new Error('the step failed after writing');
      });
      // In the same batch: it commits, the failed one is rolled back to its savepoint.
      const reading = store.transaction((tx) => tx.getCheck('elig_1'));
      await expect(failing).rejects.toThrow('the step failed after writing');
      expect((await reading)?.result).toEqual(body);
      expect((await store.transaction((tx) => tx.getCheck('elig_1')))?.result).toEqual(body);
      await store.close();
    });

    it('hands out a copy: a caller replacing a field changes nothing stored', async () => {
      const store = SqliteJobStore.open(dir);
      await store.transaction((tx) => tx.putCheck(checkRow('elig_1')));
      const read = await store.transaction((tx) => tx.getCheck('elig_1'));
      if (read) read.state = 'dead';
      expect((await store.transaction((tx) => tx.getCheck('elig_1')))?.state).toBe('received');
      await store.close();
    });

    it('refuses to write a row that is not a check row, naming the field', async () => {
      const store = SqliteJobStore.open(dir);
      await expect(store.transaction((tx) => tx.putCheck({ ...checkRow('elig_1'), attempts: -1 }))).rejects.toThrow(/attempts/);
      expect(await store.transaction((tx) => tx.getCheck('elig_1'))).toBeUndefined();
      // A row built from one read, as a step builds it: its fields and a request replaced in it are checked too.
      await store.transaction((tx) => tx.putCheck(checkRow('elig_1')));
      const read = await store.transaction((tx) => tx.getCheck('elig_1'));
      if (!read) throw new Error('the check was not stored');
      await expect(store.transaction((tx) => tx.putCheck({ ...read, round: 0.5 }))).rejects.toThrow(/round/);
      await expect(store.transaction((tx) => tx.putCheck({ ...read, check: { ...read.check, dateOfService: 'soon' } }))).rejects.toThrow(/dateOfService/);
      expect(await store.transaction((tx) => tx.getCheck('elig_1'))).toEqual(read);
      await store.close();
    });
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

    it('answers a transaction that wrote nothing, a claim and a release without a sync of their own, but not before the syncs under way', async () => {
      const store = SqliteJobStore.open(dir);
      await store.transaction((tx) => tx.putCheck(checkRow('elig_1')));
      const held = heldSyncs();
      expect(await store.transaction((tx) => tx.getMeta('k'))).toBeUndefined();
      expect((await store.claimDue({ now: NOW, limit: 5, owner: 'w1', leaseMs: 60_000 })).map((c) => c.key)).toEqual(['elig_1']);
      await store.release('elig_1', 'w1');
      expect(held).toHaveLength(0);
      // A write asks for a sync; a read made after it is answered only once that sync has returned.
      const write = store.transaction((tx) => tx.setMeta('k', 'v'));
      await until('the sync of the write asked for', async () => held.length === 1);
      let answered = false;
      const read = store.transaction((tx) => tx.getMeta('k')).then((value) => ((answered = true), value));
      await new Promise((r) => setTimeout(r, 50));
      expect([answered, held.length]).toEqual([false, 1]);
      held.shift()?.();
      expect(await read).toBe('v');
      await write;
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

  it("keeps what a batch's savepoints would undo in memory, not in a temporary file", async () => {
    const store = SqliteJobStore.open(dir);
    // Pages already in the file: a savepoint copies each one it changes before changing it.
    await store.transaction(async (tx) => {
      for (let i = 0; i < 40; i++) await tx.setMeta(`k${i}`, 'x'.repeat(4000));
    });
    // SQLite's temporary files are unlinked once open; the process's descriptors still name them.
    const temporaryFiles = () =>
      fs.readdirSync('/proc/self/fd').flatMap((fd) => {
        try {
          return [fs.readlinkSync(`/proc/self/fd/${fd}`)];
        } catch {
          return [];
        }
      }).filter((target) => target.includes('etilqs_'));
    const seen: string[] = [];
    // Two in one batch, each in a SAVEPOINT: the second rewrites some 160 KB of those pages.
    const first = store.transaction((tx) => tx.setMeta('other', 'v'));
    const second = store.transaction(async (tx) => {
      for (let i = 0; i < 40; i++) await tx.setMeta(`k${i}`, 'y'.repeat(4000));
      seen.push(...temporaryFiles());
    });
    await Promise.all([first, second]);
    expect(seen).toEqual([]);
    await store.close();
  });

  it('gives back at once the checks a process that is gone held, and lets no second worker work the file while one does', async () => {
    const gone = SqliteJobStore.open(dir);
    await gone.transaction(async (tx) => {
      await tx.putCheck(checkRow('elig_held'));
      await tx.putCheck(checkRow('elig_free'));
    });
    expect(await gone.beginWork()).toBe(0);
    expect((await gone.claimDue({ now: NOW, limit: 1, owner: 'gone', leaseMs: 3_600_000 })).map((c) => c.key)).toEqual(['elig_held']);
    // A second store on the file while the first works it: refused, the lease kept.
    const second = SqliteJobStore.open(dir);
    await expect(second.beginWork()).rejects.toThrow(/dental-elig\.sqlite: another process is working it \(one process works a SQLite store; several instances share PostgreSQL\)$/);
    expect((await second.claimDue({ now: NOW, limit: 10, owner: 'second', leaseMs: 60_000 })).map((c) => c.key)).toEqual(['elig_free']);
    await second.close();
    await gone.close();

    // Both closed with a check leased, as a process killed would leave them.
    const next = SqliteJobStore.open(dir);
    expect(await next.beginWork()).toBe(2);
    expect((await next.claimDue({ now: NOW, limit: 10, owner: 'next', leaseMs: 60_000 })).map((c) => c.key).sort()).toEqual(['elig_free', 'elig_held']);
    // Called again in the process that works the file, it takes nothing from the worker there.
    expect(await next.beginWork()).toBe(0);
    expect(await next.claimDue({ now: NOW, limit: 10, owner: 'other', leaseMs: 60_000 })).toEqual([]);
    await next.close();
  });

  it('closes the file and lets go of the work lock when closing the WAL fails, and says so once', async () => {
    const store = SqliteJobStore.open(dir);
    await store.beginWork();
    await store.transaction((tx) => tx.setMeta('k', 'kept'));
    // Closing the WAL fails.
    nextCloseFails();
    await expect(store.close()).rejects.toThrow('EIO: i/o error, close');
    jest.restoreAllMocks();
    expect(nobodyHolds(path.join(dir, 'dental-elig.sqlite'))).toBe(true);
    const next = SqliteJobStore.open(dir);
    expect(await next.beginWork()).toBe(0);
    expect(await next.transaction((tx) => tx.getMeta('k'))).toBe('kept');
    await next.close();
    // What was closed stays closed: called again, nothing is closed twice.
    await store.close();
  });

  it('upgrades no file another process works: a serve of the version before goes on with the schema it knows', async () => {
    const working = SqliteJobStore.open(dir);
    await working.transaction((tx) => tx.putCheck(checkRow('elig_1')));
    await working.beginWork();
    // The file as version 6 left it, worked by that version's serve.
    const db = new Database(path.join(dir, 'dental-elig.sqlite'));
    db.exec('DROP INDEX checks_submitted');
    db.pragma('user_version = 6');
    db.close();

    expect(() => SqliteJobStore.open(dir)).toThrow(/dental-elig\.sqlite: another process is working it \(stop it before this version upgrades the store from schema version 6\)$/);
    expect(working.schemaVersion).toBe(6);
    expect((await working.listChecks()).map((c) => c.key)).toEqual(['elig_1']);
    await working.close();

    const upgraded = SqliteJobStore.open(dir);
    expect(upgraded.schemaVersion).toBe(17);
    expect(await upgraded.beginWork()).toBe(0);
    await upgraded.close();
  });

  it('refuses a file from a newer version of the program', async () => {
    await SqliteJobStore.open(dir).close();
    const db = new Database(path.join(dir, 'dental-elig.sqlite'));
    db.pragma('user_version = 99');
    db.close();
    expect(() => SqliteJobStore.open(dir)).toThrow(/schema version 99 is newer/);
    // Refused, and let go: the file is left to the program that knows it.
    expect(nobodyHolds(path.join(dir, 'dental-elig.sqlite'))).toBe(true);
  });
});
