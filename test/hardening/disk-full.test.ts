import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { generateWebhookSecret, startSandbox, type Sandbox } from '../../src/sandbox';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import { createLogger } from '../../src/service/logger';
import { frame } from '../../src/service/mllp-framing';
import { MllpListener } from '../../src/service/mllp-listener';
import type { JobStore, StoreTx } from '../../src/sync/job-store';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { client, msa } from '../service/mllp-client';
import { booking } from '../support/bookings';
import { startSyncInstance, until } from '../sync/harness';

/**
 * The store's disk full: a message that cannot be stored gets no ACK at all (never an AA), the
 * connection is dropped so the sender sends it again, the reason is logged, and once there is room
 * the resend is stored and verified. Once with a store that fails as SQLite does (SQLITE_FULL),
 * once with SQLite on a real 4 MiB tmpfs filled to the last byte (needs root to mount; said when not run).
 */
const SQLITE_FULL = () => Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });

/**
 * A store whose changes fail as SQLite's do on a full disk while `full` is true: a transaction that
 * only reads, and a claim, are answered all the same.
 */
function fillable(store: JobStore) {
  const state = { full: false };
  const refuse = () => Promise.reject(SQLITE_FULL());
  const changes = new Set<PropertyKey>(['addMessage', 'updateMessage', 'putPatient', 'putAppointment', 'putCheck', 'setMeta']);
  const filled = (tx: StoreTx) => new Proxy(tx, { get: (target, key) => (state.full && changes.has(key) ? refuse : Reflect.get(target, key, target)) });
  const wrapped = new Proxy(store, {
    get(target, key, receiver) {
      if (key === 'transaction') return <T>(work: (tx: StoreTx) => Promise<T>) => target.transaction((tx) => work(filled(tx)));
      const value = Reflect.get(target, key, receiver) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { state, store: wrapped };
}

/** A tmpfs of its own, or why there is none. */
function mountTmpfs(): { dir: string; unmount(): void } | string {
  const dir = mkdtempSync(path.join(tmpdir(), 'elig-full-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', dir], { stdio: 'pipe' });
    return { dir, unmount: () => (execFileSync('umount', [dir]), rmSync(dir, { recursive: true, force: true })) };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    return `mount -t tmpfs failed (${err instanceof Error ? err.message.split('\n')[0] : String(err)})`;
  }
}

/** Writes a file until the disk has no byte left. */
function fillDisk(file: string): void {
  const fd = openSync(file, 'w');
  const chunk = Buffer.alloc(16 * 1024, 1);
  try {
    for (;;) writeSync(fd, chunk);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
    for (let size = chunk.length / 2; size >= 1; size = Math.floor(size / 2)) {
      try {
        for (;;) writeSync(fd, chunk.subarray(0, size));
      } catch {
        // Full at this size; try a smaller one.
      }
    }
  } finally {
    closeSync(fd);
  }
}

/** Sends one message on a connection of its own: its ACK code, or undefined when the connection closed without one. */
async function sendOne(port: number, text: string): Promise<string | undefined> {
  const c = await client(port);
  c.socket.write(frame(text));
  const answered = await Promise.race([c.waitFor(1, 10_000).then((acks) => acks[0]), c.closed.then(() => undefined)]);
  c.socket.destroy();
  return answered && msa(answered).code;
}

describe('the store disk full', () => {
  let sandbox: Sandbox;
  let fhir: FhirServer;
  beforeAll(async () => {
    sandbox = await startSandbox({ seed: true, timing: { asyncCompletionMs: 200, webhookBackoffMs: 100 } });
    fhir = await startFhirServer({ validate: true });
  });
  afterAll(async () => {
    await sandbox.close();
    await fhir.close();
  });

  /** The sync with `store` behind an MLLP listener wired as serve wires it; the warnings it logs. */
  async function syncOn(store: JobStore, dataDir: string) {
    const logs: string[] = [];
    const logger = createLogger({ level: 'warn', destination: { write: (l: string) => logs.push(l) } as unknown as NodeJS.WritableStream });
    const secret = generateWebhookSecret();
    const instance = await startSyncInstance({ store, dataDir, sandbox, fhir, secret, logger, webhook: false, settings: { maxAttempts: 500 } });
    const mllp = new MllpListener({ log: logger, handler: (m) => instance.sync.receiveHl7(m), onDeadLetter: (l) => instance.sync.deadLetterHl7(l) });
    const { port } = await mllp.start();
    return {
      port,
      logs,
      /** A FHIR poll (its errors are the store's, said by its watch). */
      poll: () => instance.sync.pollAppointments().catch(() => undefined),
      health: () => instance.sync.health(),
      async close() {
        await mllp.stop();
        await instance.close();
      },
    };
  }

  /** Sends bookings until one is refused; each answered one must be AA and stored. Returns the refused ones' texts. */
  async function sendUntilRefused(port: number, store: JobStore, texts: string[]): Promise<string[]> {
    for (const [i, text] of texts.entries()) {
      const code = await sendOne(port, text);
      if (code === undefined) return texts.slice(i);
      expect(code).toBe('AA');
      expect((await store.listMessages({ kind: 'hl7' })).some((m) => m.raw === text)).toBe(true);
    }
    throw new Error(`all ${texts.length} bookings were stored: the disk never filled`);
  }

  /** The store's watch said the outage once, however many messages, claims and reads met it, and once that it was over. */
  function expectOneOutage(logs: string[]) {
    const said = logs.join('').split('\n').filter(Boolean).map((line) => (JSON.parse(line) as { msg: string }).msg);
    expect(said.filter((msg) => msg.startsWith('the job store'))).toEqual([
      'the job store is out of reach: checks, messages and webhooks wait for it, and nothing more is said until it answers',
      'the job store answers again',
    ]);
  }

  async function expectStoredOnceAndWritten(port: number, store: JobStore, texts: string[], refused: string[]) {
    for (const text of refused) expect(await sendOne(port, text)).toBe('AA');
    const raws = (await store.listMessages({ kind: 'hl7' })).map((m) => m.raw);
    for (const text of texts) expect(raws.filter((r) => r === text)).toHaveLength(1);
    await until('every booking written', async () => (await store.listChecks({ states: ['written'] })).length === texts.length, 30_000);
  }

  it('dates its outage by the clock a store shared by instances gives (JobStore.now, the database\'s on PostgreSQL), as the rest of the sync does', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'elig-full-'));
    const sqlite = SqliteJobStore.open(dataDir);
    const { state, store } = fillable(sqlite);
    // The database's clock an hour behind this host's.
    const behind = new Proxy(store, { get: (target, key) => (key === 'now' ? () => new Date(Date.now() - 3_600_000) : Reflect.get(target, key, target)) });
    const sync = await syncOn(behind, dataDir);
    try {
      expect(await sendOne(sync.port, booking('C', 0))).toBe('AA');
      state.full = true;
      await sendUntilRefused(sync.port, behind, [booking('C', 1), booking('C', 2)]);
      const since = /^failing since (\S+): /.exec((await sync.health()).store)?.[1];
      expect(Date.now() - Date.parse(since ?? '')).toBeGreaterThan(3_500_000);
      // What it stored is dated so too.
      const [message] = await sqlite.listMessages({ kind: 'hl7' });
      expect(Date.now() - Date.parse(message?.receivedAt ?? '')).toBeGreaterThan(3_500_000);
    } finally {
      state.full = false;
      await sync.close();
      await sqlite.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('a store failing with SQLITE_FULL: no ACK, the connection dropped, the reason logged; the resend stored once room is back', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'elig-full-'));
    const sqlite = SqliteJobStore.open(dataDir);
    const { state, store } = fillable(sqlite);
    const sync = await syncOn(store, dataDir);
    try {
      const texts = Array.from({ length: 4 }, (_, i) => booking('W', i));
      expect(await sendOne(sync.port, texts[0] as string)).toBe('AA');
      state.full = true;
      const refused = await sendUntilRefused(sync.port, store, texts.slice(1));
      expect(refused).toHaveLength(3);
      // A FHIR poll reads its cursor in a transaction the full disk answers: the store is not back for a change.
      await sync.poll();
      expect(await sendOne(sync.port, refused[0] as string)).toBeUndefined();
      // By the store's watch, with the reason; a message turned away is not a dead letter (it would be answered AR).
      const logs = sync.logs.join('');
      expect(logs).toMatch(/"err":"database or disk is full","msg":"the job store is out of reach/);
      expect(logs).not.toMatch(/dead letter could not be kept/);
      // Nothing says it was kept when it was not.
      expect(sync.logs.join('')).not.toMatch(/message kept as a dead letter/);
      // /healthz says so, though the store still answers its read: a balancer and an alert see what the log says.
      expect(await sync.health()).toMatchObject({ ok: false, store: expect.stringMatching(/^failing since .+: database or disk is full$/) });
      state.full = false;
      // Room back, /healthz tries the store with a change of its own: nothing need be sent to an instance a balancer took out.
      expect(await sync.health()).toMatchObject({ ok: true, store: 'ok' });
      await expectStoredOnceAndWritten(sync.port, store, texts, refused);
      expectOneOutage(sync.logs);
    } finally {
      await sync.close();
      await sqlite.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  const disk = mountTmpfs();
  if (typeof disk === 'string') process.stdout.write(`disk full on a real tmpfs: NOT RUN: ${disk}\n`);
  (typeof disk === 'string' ? it.skip : it)('SQLite on a real full tmpfs: never an AA for a message not stored; all stored and written once there is room', async () => {
    if (typeof disk === 'string') return;
    const store = SqliteJobStore.open(disk.dir);
    const sync = await syncOn(store, disk.dir);
    const filler = path.join(disk.dir, 'filler');
    try {
      // A Z-segment of 300 kB each, so commits must grow the WAL rather than reuse it.
      const texts = Array.from({ length: 30 }, (_, i) => `${booking('R', i)}\rZPD|${'x'.repeat(300_000)}`);
      expect(await sendOne(sync.port, texts[0] as string)).toBe('AA');
      fillDisk(filler);
      const refused = await sendUntilRefused(sync.port, store, texts.slice(1));
      rmSync(filler);
      const sent = texts.slice(0, texts.length - refused.length + 1);
      await expectStoredOnceAndWritten(sync.port, store, sent, refused.slice(0, 1));
      expectOneOutage(sync.logs);
    } finally {
      await sync.close();
      await store.close();
      disk.unmount();
    }
  }, 60_000);
});
