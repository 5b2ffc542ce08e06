import { Worker } from 'node:worker_threads';
import { SQLITE_MODULE } from './sqlite-driver';

/**
 * Checkpoints the store's WAL (copies it into the database file, so the WAL can start over) from a
 * thread of its own, with a connection of its own. SQLite's automatic checkpoint runs inside
 * whichever COMMIT crosses 1,000 pages, on the event loop: 10 to 30 ms of page writes and two
 * fsyncs every few hundred messages, during which no socket was read. A PASSIVE checkpoint never
 * waits for the writer nor makes it wait, and syncs the WAL before and the database after, as the
 * automatic one does.
 *
 * The store bumps a shared counter as it commits; the thread looks at it every CHECK_MS and
 * checkpoints when it moved, so an idle store costs nothing but a timer. Should the thread fail,
 * the store's connection goes back to checkpointing itself (see onFailure).
 *
 * Each checkpoint copies every page changed since the last one once, however often it changed,
 * and syncs two files: at 50 ms the store measure spent 0.1 to 0.2 ms of CPU per check more than
 * at 250 ms. Not much longer: when the store's connection checkpoints past its backstop, it copies
 * on the event loop what the thread has not copied yet, up to CHECK_MS of commits.
 */
const CHECK_MS = 250;

const SOURCE = `
  const { parentPort, workerData } = require('node:worker_threads');
  const Database = require(workerData.sqlite);
  const db = new Database(workerData.file);
  db.pragma('busy_timeout = 5000');
  const commits = new Int32Array(workerData.commits);
  let seen = 0;
  let timer;
  const look = () => {
    const now = Atomics.load(commits, 0);
    if (now !== seen) {
      seen = now;
      db.pragma('wal_checkpoint(PASSIVE)');
    }
    timer = setTimeout(look, workerData.checkMs);
  };
  look();
  parentPort.on('message', () => {
    clearTimeout(timer);
    db.close();
    parentPort.close();
  });
`;

export class WalCheckpointer {
  private readonly commits = new Int32Array(new SharedArrayBuffer(4));
  private readonly worker: Worker;
  private readonly exited: Promise<void>;

  /** Starts the thread on `file`; `onFailure` runs once if it fails (to checkpoint some other way). */
  constructor(file: string, onFailure: () => void) {
    this.worker = new Worker(SOURCE, {
      eval: true,
      workerData: { sqlite: require.resolve(SQLITE_MODULE), file, commits: this.commits.buffer, checkMs: CHECK_MS },
    });
    // A store left open must not keep the process alive for this thread's sake.
    this.worker.unref();
    this.exited = new Promise<void>((resolve) => this.worker.once('exit', () => resolve()));
    this.worker.once('error', onFailure);
  }

  /** Called after each commit: cheap enough for every one (no message to the thread). */
  committed(): void {
    Atomics.add(this.commits, 0, 1);
  }

  /** Stops the thread once its checkpoint under way is done and its connection closed. */
  async close(): Promise<void> {
    // Until it has closed, the thread is what close() waits for: it must keep the process up.
    this.worker.ref();
    this.worker.postMessage('close');
    await this.exited;
  }
}
