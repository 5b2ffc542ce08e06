import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { checkRow } from './job-store-contract';
import { startHarness, until, type Harness } from './harness';

/** serve on SQLite times its checks by this machine's clock: one stepped back since they were stored is said at start. */
describe('a start on a store whose changes are dated ahead of the clock', () => {
  let dataDir: string;
  let h: Harness | undefined;
  beforeEach(() => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'elig-clock-'));
  });
  afterEach(async () => {
    await h?.close();
    h = undefined;
    rmSync(dataDir, { recursive: true, force: true });
  });

  const storedAt = async (updatedAt: Date) => {
    const store = SqliteJobStore.open(dataDir);
    // Written, nothing due: the start only reads when it was changed.
    await store.transaction((tx) => tx.putCheck(checkRow('elig_stored', { state: 'written', updatedAt: updatedAt.toISOString() })));
    await store.close();
  };
  const clockLines = () => (h?.logs ?? []).filter((line) => line.includes("dated ahead of this machine's clock"));

  it('warns once when the newest change is an hour ahead, saying by how much, and not what the check is', async () => {
    await storedAt(new Date(Date.now() + 3_600_000));
    h = await startHarness({ dataDir });
    expect(clockLines()).toHaveLength(1);
    const line = JSON.parse(clockLines()[0] ?? '{}') as { level: number; aheadMs: number; key?: unknown };
    expect(line.level).toBe(40);
    expect(line.aheadMs).toBeGreaterThan(3_500_000);
    expect(line.key).toBeUndefined();
  });

  it('warns once when the clock steps back an hour while it runs, saying by how much, and not at each look after', async () => {
    h = await startHarness({ dataDir });
    expect(clockLines()).toEqual([]);
    // This machine's wall clock set back an hour, its monotonic clock and its timers going on as they were.
    const timers = ['hrtime', 'nextTick', 'performance', 'queueMicrotask', 'setImmediate', 'clearImmediate', 'setInterval', 'clearInterval', 'setTimeout', 'clearTimeout'] as const;
    jest.useFakeTimers({ doNotFake: [...timers], advanceTimers: true, now: Date.now() - 3_600_000 });
    try {
      await until('the step said', async () => clockLines().length > 0);
      const line = JSON.parse(clockLines()[0] ?? '{}') as { level: number; aheadMs: number };
      expect(line.level).toBe(40);
      expect(line.aheadMs).toBeGreaterThan(3_500_000);
      // Looked at each second: a few looks later, still said once.
      await new Promise((resolve) => setTimeout(resolve, 3000));
      expect(clockLines()).toHaveLength(1);
    } finally {
      jest.useRealTimers();
    }
  });

  it('says nothing of a store changed a moment ago', async () => {
    await storedAt(new Date(Date.now() - 1000));
    h = await startHarness({ dataDir });
    expect(clockLines()).toEqual([]);
  });
});
