import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { openJobStore } from '../../src/sync/open-store';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';

/** Which store a location names; a PostgreSQL URL's own store is tested in pg-job-store.test.ts. */
let dataDir: string;
beforeEach(() => {
  dataDir = mkdtempSync(path.join(tmpdir(), 'elig-open-'));
});
afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

it('opens SQLite in the data dir when no location is given', async () => {
  const store = await openJobStore(undefined, dataDir);
  await store.close();
  expect(store).toBeInstanceOf(SqliteJobStore);
  expect(existsSync(path.join(dataDir, 'dental-elig.sqlite'))).toBe(true);
});

it('opens a relative SQLite file under the data dir, and an absolute one where it says', async () => {
  const relative = await openJobStore('stores/clinic.sqlite', dataDir);
  await relative.close();
  expect(existsSync(path.join(dataDir, 'stores', 'clinic.sqlite'))).toBe(true);
  const elsewhere = path.join(dataDir, 'abs', 'jobs.db');
  await (await openJobStore(elsewhere, '/nonexistent')).close();
  expect(existsSync(elsewhere)).toBe(true);
});

it('refuses other URLs without repeating them', async () => {
  await expect(openJobStore('mysql://admin:hunter2@db/elig', dataDir)).rejects.toThrow(/^job store: only postgres:\/\/ and postgresql:\/\/ URLs or a file path are understood$/);
  await expect(openJobStore('postgres://admin:hunter2@[db/elig', dataDir)).rejects.toThrow(/^job store: the postgres:\/\/ URL is not a valid URL$/);
});

it('fails to open a PostgreSQL store nobody serves, without the password in the message', async () => {
  const error = await openJobStore('postgresql://admin:hunter2@127.0.0.1:1/elig', dataDir).then(
    () => undefined,
    (err: Error) => err.message,
  );
  expect(error).toMatch(/ECONNREFUSED/);
  expect(error).not.toContain('hunter2');
});
