import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { runCli } from '../../src/cli/main';
import { nextCloseFails } from '../sync/harness';

/** `dental-elig serve` in-process, stopped by its signal as SIGTERM stops it. */
describe('dental-elig serve', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(path.join(tmpdir(), 'elig-cli-serve-'))));
  afterEach(() => {
    jest.restoreAllMocks();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Serve on the data dir until it says where it listens; `stop` signals it and gives its exit code. */
  async function startServe() {
    const signal = new AbortController();
    let stdout = '';
    let stderr = '';
    let listening: () => void = () => undefined;
    const exit = runCli(['serve', '--data-dir', dir, '--mllp-port', '0', '--http-port', '0'], {
      stdout: { write: (s: string) => ((stdout += s), listening()) },
      stderr: { write: (s: string) => (stderr += s) },
      stdin: Readable.from(['']),
      env: { DENTAL_ELIG_LOG_LEVEL: 'silent' },
      signal: signal.signal,
    });
    await Promise.race([
      new Promise<void>((resolve) => (listening = () => /^listening: http /m.test(stdout) && resolve())),
      exit.then((code) => {
        throw new Error(`exited ${code}: ${stderr}`);
      }),
    ]);
    return { stop: async () => (signal.abort(), exit), out: () => stdout, err: () => stderr };
  }

  it('exits 0 saying stopped when everything closed, and 1 naming the part that did not, never saying stopped', async () => {
    const clean = await startServe();
    expect([await clean.stop(), clean.out().endsWith('\nstopped\n'), clean.err()]).toEqual([0, true, '']);

    const failing = await startServe();
    // The store's WAL failing to close.
    nextCloseFails();
    expect(await failing.stop()).toBe(1);
    expect(failing.err()).toBe('dental-elig: serve: stopped with errors: closing the job store failed; see the log\n');
    expect(failing.out()).not.toMatch(/^stopped$/m);
  });

  it('names the config file\'s host when it is no address of this machine: a setting to fix (exit 2), not a failure of serve', async () => {
    const refusal = async (host: string) => {
      const config = path.join(dir, 'dental-elig.config.json');
      writeFileSync(config, JSON.stringify({ host }));
      let stderr = '';
      const code = await runCli(['--config', config, 'serve', '--data-dir', path.join(dir, 'data'), '--mllp-port', '0', '--http-port', '0'], {
        stdout: { write: () => true },
        stderr: { write: (s: string) => (stderr += s) },
        stdin: Readable.from(['']),
        env: { DENTAL_ELIG_LOG_LEVEL: 'silent' },
        signal: new AbortController().signal,
      });
      return [code, stderr];
    };
    // TEST-NET-1 (RFC 5737): an address no machine here has.
    expect(await refusal('192.0.2.1')).toEqual([2, 'dental-elig: host (config file): cannot listen on 192.0.2.1 (not an address of this machine)\n']);
    expect(await refusal('300.1.1.1')).toEqual([2, 'dental-elig: host (config file): cannot listen on 300.1.1.1 (no such host)\n']);
  });
});
