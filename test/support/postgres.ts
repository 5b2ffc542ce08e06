import { execFile } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { Client } from 'pg';
import { freePort } from './free-port';

/**
 * A throwaway PostgreSQL cluster for a test file: initdb into a temporary folder, started with
 * pg_ctl on 127.0.0.1 at a port the OS gave out, stopped and removed by stop(). As root (CI, these
 * machines) the server runs as the postgres user, which PostgreSQL insists on. Durability is
 * switched off: the data is thrown away, and the cluster starts in about a second.
 */

const run = promisify(execFile);

/** PG_BIN, or the newest version Debian's postgresql package installed (.ci/run installs it). */
function binaries(): string {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((v) => existsSync(path.join(root, v, 'bin', 'initdb'))) : [];
  const newest = versions.sort((x, y) => Number(y) - Number(x))[0];
  if (!newest) throw new Error(`no PostgreSQL under ${root}: apt-get install postgresql (as .ci/run does), or set PG_BIN`);
  return path.join(root, newest, 'bin');
}

export interface TestPostgres {
  /** postgres://… of the cluster's own `postgres` database. */
  url: string;
  /** A new empty database, for one test's store. */
  createDatabase(): Promise<string>;
  /**
   * Stops the server and starts it again on the same port: at once, as a crash or a failover would
   * (`immediate`, the default), or as an administrator's restart does, each session ended (`fast`).
   */
  restart(mode?: 'immediate' | 'fast'): Promise<void>;
  stop(): Promise<void>;
}

export async function startPostgres(): Promise<TestPostgres> {
  const bin = binaries();
  const dir = mkdtempSync(path.join(tmpdir(), 'elig-pg-'));
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    chownSync(dir, Number(stdout.trim()), Number(gid.trim()));
  }
  const pg = (tool: string, args: string[]) => (asRoot ? run('runuser', ['-u', 'postgres', '--', path.join(bin, tool), ...args]) : run(path.join(bin, tool), args));
  const data = path.join(dir, 'data');
  const stop = async () => {
    await pg('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  };
  let port = 0;
  try {
    await pg('initdb', ['-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync', '--no-instructions', '-E', 'UTF8', '--locale=C']);
    // The port is free when asked, not necessarily when the server binds it: a few tries.
    for (let attempt = 1; port === 0; attempt++) {
      const candidate = await freePort();
      const settings = [`-p ${candidate}`, `-k ${dir}`, '-c listen_addresses=127.0.0.1', '-c fsync=off', '-c synchronous_commit=off', '-c full_page_writes=off', '-c deadlock_timeout=100ms'];
      try {
        await pg('pg_ctl', ['-D', data, '-l', path.join(dir, 'server.log'), '-w', '-o', settings.join(' '), 'start']);
        port = candidate;
      } catch (err) {
        if (attempt >= 3) throw err;
      }
    }
  } catch (err) {
    await stop();
    throw err;
  }
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  let databases = 0;
  return {
    url,
    async createDatabase() {
      const name = `store_${++databases}`;
      const client = new Client({ connectionString: url });
      await client.connect();
      try {
        await client.query(`CREATE DATABASE ${name}`);
      } finally {
        await client.end();
      }
      return `postgres://postgres@127.0.0.1:${port}/${name}`;
    },
    restart: async (mode = 'immediate') => {
      // The cluster commits without waiting for its WAL (synchronous_commit=off, for speed): what committed is written
      // first, or an immediate restart may drop the last commits, which a server that waits for its WAL keeps.
      const client = new Client({ connectionString: url });
      await client.connect();
      try {
        await client.query('CHECKPOINT');
      } finally {
        await client.end();
      }
      await pg('pg_ctl', ['-D', data, '-l', path.join(dir, 'server.log'), '-m', mode, '-w', 'restart']);
    },
    stop,
  };
}

/** A cluster for the test file (or describe block) this is called in: started before its tests, stopped after them. */
export function postgresForTests(): Pick<TestPostgres, 'createDatabase' | 'restart'> {
  let postgres: TestPostgres | undefined;
  beforeAll(async () => {
    postgres = await startPostgres();
  }, 60_000);
  afterAll(async () => {
    await postgres?.stop();
  });
  const started = () => {
    if (!postgres) throw new Error('the test cluster is not started: call postgresForTests() at the top of a file or describe block');
    return postgres;
  };
  return {
    createDatabase: () => started().createDatabase(),
    restart: (mode) => started().restart(mode),
  };
}
