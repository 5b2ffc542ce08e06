import type BetterSqlite3 from 'better-sqlite3';

/**
 * better-sqlite3 as this Node runs it. From Node 22 on, version 13 (`better-sqlite3-napi` in
 * package.json's optionalDependencies, so that an install on Node 20, which 13 does not support,
 * leaves it out rather than fails): built on Node-API, with prebuilt binaries in its package.
 * Node 20 keeps version 12, built from source at install. 12 cannot serve Node 24: a statement it
 * collects there aborts the process (its ObjectWrap removes an environment cleanup hook where no
 * environment is current), in the worker thread that checkpoints the WAL and on the main thread.
 */
export const SQLITE_MODULE = Number(process.versions.node.split('.')[0]) >= 22 ? 'better-sqlite3-napi' : 'better-sqlite3';

export const Database = require(SQLITE_MODULE) as typeof BetterSqlite3;
export type Database = BetterSqlite3.Database;
export type Statement = BetterSqlite3.Statement;
