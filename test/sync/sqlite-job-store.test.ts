import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import Database from 'better-sqlite3';
import { checksFromBundle } from '../../src/adapters/fhir/in';
import { loadClinicRouting } from '../../src/adapters/clinic-routing';
import type { CheckRow } from '../../src/sync/job-store';
import { fingerprints } from '../../src/sync/schedule';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { chartOf } from './harness';

/** The store's contract on a real SQLite file: what commits, what rolls back, who may take a check. */
const NOW = '2026-11-23T10:00:00.000Z';
const [check] = checksFromBundle({ resourceType: 'Bundle', type: 'collection', entry: chartOf('self').map((resource) => ({ resource })) }, {
  routing: loadClinicRouting(),
  receivedAt: NOW,
});

function row(key: string, change: Partial<CheckRow> = {}): CheckRow {
  if (!check) throw new Error('fixture gave no check');
  return {
    key,
    state: 'received',
    check: { ...check, idempotencyKey: key },
    patientKey: 'fhir|Patient/pat-ellen',
    ...fingerprints(check),
    round: 0,
    externalId: `ext-${key}`,
    attempts: 0,
    dueAt: NOW,
    createdAt: NOW,
    updatedAt: NOW,
    ...change,
  };
}

let dir: string;
let store: SqliteJobStore;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'elig-store-'));
  store = SqliteJobStore.open(dir);
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('SqliteJobStore', () => {
  it('runs in WAL mode with synchronous=FULL, at the current schema version', () => {
    const db = new Database(path.join(dir, 'dental-elig.sqlite'), { readonly: true });
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    db.close();
    expect(store.schemaVersion).toBe(2);
  });

  it('commits a transaction whole, and rolls back a failed one whole', async () => {
    await store.transaction(async (tx) => {
      await tx.putCheck(row('elig_a'));
      await tx.addMessage({ kind: 'hl7', dedupeKey: 'A|B|1', receivedAt: NOW, raw: 'MSH|...', status: 'handled' });
    });
    await expect(
      store.transaction(async (tx) => {
        await tx.putCheck(row('elig_b'));
        await tx.addMessage({ kind: 'hl7', dedupeKey: 'A|B|2', receivedAt: NOW, raw: 'MSH|...', status: 'handled' });
        throw new Error('disk full');
      }),
    ).rejects.toThrow('disk full');
    expect((await store.listChecks()).map((c) => c.key)).toEqual(['elig_a']);
    expect((await store.listMessages()).map((m) => m.dedupeKey)).toEqual(['A|B|1']);
  });

  it('keeps one message per kind and dedupe key, and says when a message is a repeat', async () => {
    const first = await store.transaction((tx) => tx.addMessage({ kind: 'webhook', dedupeKey: 'msg_1', receivedAt: NOW, raw: '{}', status: 'received' }));
    const again = await store.transaction((tx) => tx.addMessage({ kind: 'webhook', dedupeKey: 'msg_1', receivedAt: NOW, raw: '{}', status: 'received' }));
    const other = await store.transaction((tx) => tx.addMessage({ kind: 'hl7', dedupeKey: 'msg_1', receivedAt: NOW, raw: 'x', status: 'received' }));
    expect([first.duplicate, again.duplicate, other.duplicate]).toEqual([false, true, false]);
    expect(again.message.id).toBe(first.message.id);
  });

  it('leases due checks to one worker until the lease runs out, then to another', async () => {
    await store.transaction(async (tx) => {
      await tx.putCheck(row('elig_due'));
      await tx.putCheck(row('elig_later', { dueAt: '2026-11-24T00:00:00.000Z' }));
      await tx.putCheck(row('elig_done', { state: 'needs-attention', dueAt: NOW }));
    });
    const a = await store.claimDue({ now: NOW, limit: 10, owner: 'a', leaseMs: 60_000 });
    expect(a.map((c) => c.key)).toEqual(['elig_due']);
    expect(await store.claimDue({ now: NOW, limit: 10, owner: 'b', leaseMs: 60_000 })).toEqual([]);
    const later = '2026-11-23T10:01:00.001Z';
    expect((await store.claimDue({ now: later, limit: 10, owner: 'b', leaseMs: 60_000 })).map((c) => c.key)).toEqual(['elig_due']);
    await store.release('elig_due', 'a'); // not a's any more: changes nothing
    expect(await store.claimDue({ now: later, limit: 10, owner: 'c', leaseMs: 60_000 })).toEqual([]);
  });

  it('refuses a second check with the same correlation id', async () => {
    await store.transaction((tx) => tx.putCheck(row('elig_1', { correlationId: 'corr-1' })));
    await expect(store.transaction((tx) => tx.putCheck(row('elig_2', { correlationId: 'corr-1' })))).rejects.toThrow(/UNIQUE/);
    expect((await store.transaction((tx) => tx.checkByCorrelationId('corr-1')))?.key).toBe('elig_1');
  });

  it('survives being reopened: what was committed is there', async () => {
    await store.transaction((tx) => tx.putCheck(row('elig_kept', { state: 'awaiting-result', correlationId: 'corr-9' })));
    await store.close();
    store = SqliteJobStore.open(dir);
    expect((await store.listChecks()).map((c) => [c.key, c.state, c.correlationId])).toEqual([['elig_kept', 'awaiting-result', 'corr-9']]);
  });

  it('refuses a file from a newer version of the program', async () => {
    await store.close();
    const db = new Database(path.join(dir, 'dental-elig.sqlite'));
    db.pragma('user_version = 99');
    db.close();
    expect(() => SqliteJobStore.open(dir)).toThrow(/schema version 99 is newer/);
    store = SqliteJobStore.open(mkdtempSync(path.join(tmpdir(), 'elig-store-')));
  });
});
