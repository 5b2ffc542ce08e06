import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';

/**
 * A SQLite job store on a real file, in a folder of its own for each test, closed and removed after
 * it. Called where hooks may be (a describe, or a file's top level); the store is the one the
 * running test has.
 */
export function storePerTest(prefix: string): () => SqliteJobStore {
  let dir = '';
  let store: SqliteJobStore | undefined;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), prefix));
    store = SqliteJobStore.open(dir);
  });
  afterEach(async () => {
    await store?.close();
    store = undefined;
    rmSync(dir, { recursive: true, force: true });
  });
  return () => {
    if (!store) throw new Error('the job store is there only while a test runs');
    return store;
  };
}
