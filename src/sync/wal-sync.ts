import { closeSync, fdatasync, fsyncSync, openSync } from 'node:fs';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';

/**
 * Makes SQLite commits durable off the event loop. The store runs with synchronous=NORMAL, where a
 * WAL-mode COMMIT only write()s its frames into the WAL; synchronous=FULL adds an fsync of the WAL
 * after each commit, which better-sqlite3 makes on the event loop (about 1.5 to 3 ms here, during
 * which no socket is read). This does that same sync of the WAL in libuv's thread pool instead:
 * a transaction is answered only once an fdatasync of the WAL that began after its COMMIT has
 * returned, so what is answered is on disk, as with FULL, while the loop goes on with the next
 * batch. fdatasync flushes the file's data and its size (all a WAL needs to be read back);
 * Linux syncs a file whatever descriptor names it. A sync also covers every commit before it, as
 * the WAL is written in order. SQLite itself still syncs the WAL and the database at checkpoints.
 *
 * A failed sync may have lost pages that later syncs will not write again, so after one the store
 * is broken: every later transaction fails (no ACK, the sender resends) until the process restarts
 * and SQLite recovers from what is on disk, as PostgreSQL does on a failed fsync.
 */
export class WalSync {
  private fd: number | undefined;
  /** The sync under way, and the one to start when it returns, for the commits made meanwhile. */
  private running: Promise<void> | undefined;
  private next: Promise<void> | undefined;
  private failure: Error | undefined;
  private readonly counters = { syncs: 0, commits: 0, syncMs: 0 };

  constructor(private readonly walFile: string) {}

  /** Opens the WAL (SQLite created it when the database opened in WAL mode) and syncs its folder entry once. */
  open(): void {
    this.fd = openSync(this.walFile, 'r');
    const dir = openSync(path.dirname(this.walFile), 'r');
    try {
      fsyncSync(dir);
    } finally {
      closeSync(dir);
    }
  }

  /** Throws once a sync has failed: nothing more may be answered as stored. */
  check(): void {
    if (this.failure) throw this.failure;
  }

  /**
   * Resolves when everything committed before this call is on disk. One sync runs at a time:
   * commits made while it runs share the next one, so a slow disk gets fewer, larger syncs.
   */
  sync(): Promise<void> {
    this.counters.commits++;
    if (!this.running) return (this.running = this.start());
    this.next ??= this.running.then(
      () => this.startNext(),
      () => this.startNext(),
    );
    return this.next;
  }

  /** Syncs so far, the commits they covered and the time they took: what bounds a store's commit rate. */
  stats(): { syncs: number; commits: number; syncMs: number } {
    return { ...this.counters };
  }

  /** Waits for the syncs under way, then closes the WAL. */
  async close(): Promise<void> {
    await Promise.allSettled([this.running, this.next]);
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }

  private startNext(): Promise<void> {
    this.next = undefined;
    return (this.running = this.start());
  }

  private start(): Promise<void> {
    const fd = this.fd;
    const began = performance.now();
    const done = new Promise<void>((resolve, reject) => {
      if (this.failure) return reject(this.failure);
      if (fd === undefined) return reject(new Error('job store: the WAL is not open'));
      this.counters.syncs++;
      fdatasync(fd, (err) => {
        this.counters.syncMs += performance.now() - began;
        if (!err) return resolve();
        this.failure ??= new Error(`job store: syncing the WAL to disk failed (${err.code ?? 'unknown error'}); restart the service`);
        reject(this.failure);
      });
    });
    const settled = () => {
      if (this.running === done) this.running = undefined;
    };
    done.then(settled, settled);
    return done;
  }
}
