import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import * as entry from '../../src/index';
import { projectRoot } from '../../src/mapping-files';
import { openJobStore } from '../../src/sync/open-store';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { postgresForTests } from '../support/postgres';

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

/** An embedder running several instances opens the PostgreSQL store as serve does, from the package's entry, and hands it over. */
describe('the package entry, on PostgreSQL', () => {
  const postgres = postgresForTests();

  it('opens a postgres:// store that createEligibilitySync takes, and leaves it to its opener', async () => {
    const store = await entry.openJobStore(await postgres.createDatabase(), dataDir);
    expect(store).toBeInstanceOf(entry.PgJobStore);
    const sync = entry.createEligibilitySync({ store, dataDir, service: { baseUrl: 'http://127.0.0.1:1', apiKey: 'k' }, fhir: { baseUrl: 'http://127.0.0.1:1/fhir' }, logger: entry.createLogger({ level: 'silent' }) });
    try {
      const acks = await sync.receiveHl7(readFileSync(path.join(projectRoot, 'fixtures', 'hl7', 'molarpms-siu-s12-two-insurances.hl7'), 'utf8'));
      expect(acks.map((a) => a.code)).toEqual(['AA']);
      expect((await store.listChecks({})).map((c) => c.check.coverage.order).sort()).toEqual(['primary', 'secondary']);
      await sync.stop();
      // The sync closes only what it opened: the store handed to it still answers.
      await expect(store.ping()).resolves.toBeUndefined();
    } finally {
      await store.close();
    }
  });
});
