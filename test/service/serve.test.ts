import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { serve } from '../../src/service/serve';
import { loadServeConfig } from '../../src/service/serve-config';
import { bookingFor } from '../support/bookings';
import { until } from '../sync/harness';

/** serve on its in-process sandbox, as README's "The sync service" runs it with nothing but a data dir. */
describe('serve on the in-process sandbox', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(path.join(tmpdir(), 'elig-serve-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('gives the sandbox the bearer token its webhooks must carry when webhookScheme is bearer', async () => {
    const configFile = path.join(dir, 'config.json');
    // A webhook deadline far past the test's wait: only a delivered webhook completes the check in time.
    writeFileSync(configFile, JSON.stringify({ webhookScheme: 'bearer', settings: { webhookDeadlineMs: 120_000 } }));
    const config = loadServeConfig({ DENTAL_ELIG_WEBHOOK_TOKEN: 'a-static-token', DENTAL_ELIG_LOG_LEVEL: 'silent' }, { configFile, dataDir: dir, mllpPort: 0, httpPort: 0 });
    const serving = await serve(config, { line: () => {} });
    try {
      await serving.sync.receiveHl7(bookingFor('B1', 'SBX-COMPLETE'));
      const [check] = await until('the asynchronous check to be written', async () => {
        const written = await serving.sync.store.listChecks({ states: ['written'] });
        return written.length === 1 && written;
      });
      expect(check?.mode).toBe('async');
    } finally {
      await serving.close();
    }
  });

  it('says in its JSON log that it was asked to stop, and when it has', async () => {
    const lines: string[] = [];
    const destination = { write: (line: string) => lines.push(line) } as unknown as NodeJS.WritableStream;
    const serving = await serve(loadServeConfig({}, { dataDir: dir, mllpPort: 0, httpPort: 0 }), { line: () => {}, destination });
    await serving.close();
    const said = lines.map((line) => JSON.parse(line) as { msg: string; ms?: number });
    expect(said.slice(-2).map((l) => l.msg)).toEqual(['stopping: listeners close, checks in hand finish', 'stopped']);
    expect(said.at(-1)?.ms).toBeGreaterThanOrEqual(0);
  });
});
