import { closeSync, fdatasync, fsyncSync, openSync } from 'node:fs';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';

/**
 * Makes SQLite commits durable off the event loop. The store runs with synchronous=NORMAL, where a
 * WAL-mode COMMIT only write()s its frames into the WAL; synchronous=FULL adds an fsync of the WAL
 * after each commit, which better-sqlite3 makes on the event loop (1.5 to 5 ms on the benchmark's
 * machine, during which no socket is read). This makes that same sync of the WAL in libuv's
 * thread pool instead: a transaction is answered only once an fdatasync of the WAL begun after its
 * COMMIT has returned, so what is answered is on disk, as with FULL, while the loop goes on with
 * the next batch (and syncs it too, at the same time: see the constructor). fdatasync flushes the
 * file's data and its size, all a WAL needs to be read back; Linux syncs a file whatever
 * descriptor names it. SQLite itself still syncs the WAL and the database at checkpoints.
 *
 * A failed sync may have lost pages that later syncs will not write again, so after one the store
 * is broken: every later transaction fails (no ACK, the sender resends) until the process restarts
 * and SQLite recovers from what is on disk, as PostgreSQL does on a failed fsync.
 */
export class WalSync {
  private fd: number | undefined;
  private readonly running = new Set<Promise<void>>();
  /** Commits made while `concurrency` syncs run: they share the sync that starts when one returns. */
  private waiting: { done: Promise<void>; resolve: () => void; reject: (err: unknown) => void } | undefined;
  private failure: Error | undefined;
  /** The answer to the last sync() call: the next waits for it. */
  private earlier: Promise<void> = Promise.resolve();
  private readonly counters = { syncs: 0, commits: 0, syncMs: 0 };

  /**
   * `concurrency`: syncs under way at once. Each commit starts its own while fewer run, so a
   * connection waits one sync, not the end of another's first. Concurrent fdatasyncs of one file
   * share the disk's cache flush: in the hl7-ingest benchmark four at once each took as long as
   * one alone (2.5 to 3.5 ms there), and one at a time, commits queueing behind each other, gave
   * 20 to 40% fewer messages a second. Four is also libuv's thread pool: more would only queue.
   */
  constructor(
    private readonly walFile: string,
    private readonly concurrency = 4,
  ) {}

  /** Opens the WAL (SQLite created it when the database opened in WAL mode) and syncs its folder entry once. */
  open(): void {
    // Read-write, though nothing is written through it: Windows flushes only a file open for writing.
    this.fd = openSync(this.walFile, 'r+');
    // Windows cannot open a folder, and makes a new file's entry durable with the file.
    if (process.platform === 'win32') return;
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
   * Resolves when everything committed before this call is on disk, in the order of the calls: a
   * commit is answered only after every earlier one, as a later one may rest on what they wrote
   * and a failed sync may have lost their pages while a later sync of the same file succeeds.
   */
  sync(): Promise<void> {
    this.counters.commits++;
    const own = this.running.size < this.concurrency ? this.start() : this.join();
    // Its failure is reported through `answered`, maybe after it happens: not an unhandled rejection.
    own.catch(() => undefined);
    const answered = this.earlier.then(() => own).then(() => this.check());
    this.earlier = answered.catch(() => undefined);
    return answered;
  }

  /**
   * Resolves when every sync asked for so far has returned, in the order of the calls as sync()
   * does, without a sync of its own: for a commit that wrote nothing that must last, whose
   * answer may rest on what earlier commits wrote.
   */
  synced(): Promise<void> {
    const answered = this.earlier.then(() => this.check());
    this.earlier = answered.catch(() => undefined);
    return answered;
  }

  /** Syncs so far, the commits they covered and the time they took: what bounds a store's commit rate. */
  stats(): { syncs: number; commits: number; syncMs: number } {
    return { ...this.counters };
  }

  /** Waits for the syncs under way, then closes the WAL. */
  async close(): Promise<void> {
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
    const fd = this.fd;
    // Forgotten first: a descriptor whose close failed is gone all the same (Linux, POSIX after EIO), and closing it again could close another file's.
    this.fd = undefined;
    if (fd !== undefined) closeSync(fd);
  }

  private join(): Promise<void> {
    if (!this.waiting) {
      let resolve: () => void = () => undefined;
      let reject: (err: unknown) => void = () => undefined;
      const done = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
      this.waiting = { done, resolve, reject };
    }
    return this.waiting.done;
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
    this.running.add(done);
    const settled = () => {
      this.running.delete(done);
      const waiting = this.waiting;
      this.waiting = undefined;
      // Everything waiting was committed before now: a sync begun now covers it.
      if (waiting) this.start().then(waiting.resolve, waiting.reject);
    };
    done.then(settled, settled);
    return done;
  }
}
