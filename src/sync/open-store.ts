import * as path from 'node:path';
import type { JobStore } from './job-store';
import { PgJobStore } from './pg-job-store';
import { SqliteJobStore } from './sqlite-job-store';

/**
 * The job store a location names: nothing, a folder or a file → the SQLite store (a relative path
 * is under the data dir); a postgres:// or postgresql:// URL → PostgreSQL, shared by every
 * instance given the same URL. The URL may carry a password, so no message here repeats it.
 * `create: false` (the jobs commands) opens only a store that is already there, at this program's
 * schema version: a reader neither creates nor upgrades one.
 */
export async function openJobStore(location: string | undefined, dataDir: string, options: { create?: boolean } = {}): Promise<JobStore> {
  const where = location?.trim() ?? '';
  const problem = storeLocationProblem(where);
  if (problem) throw new Error(`job store: ${problem}`);
  if (isPostgresUrl(where)) return PgJobStore.open(where, options);
  return SqliteJobStore.open(path.resolve(dataDir, where), options);
}

/** What is wrong with a store location openJobStore would refuse, without repeating it; undefined when it can be opened. */
export function storeLocationProblem(location: string): string | undefined {
  const where = location.trim();
  if (isPostgresUrl(where)) return URL.canParse(where) ? undefined : 'the postgres:// URL is not a valid URL';
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(where)) return 'only postgres:// and postgresql:// URLs or a file path are understood';
  return undefined;
}

const isPostgresUrl = (location: string) => /^postgres(ql)?:\/\//i.test(location);
