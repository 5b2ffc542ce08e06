import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { frame } from '../../src/service/mllp-framing';
import { serve, type Serving } from '../../src/service/serve';
import { loadServeConfig } from '../../src/service/serve-config';
import { client, type Client } from '../service/mllp-client';

/**
 * `serve` as the CLI runs it, in this process: the sandbox and the embedded FHIR server in-process,
 * the job store in a temporary data dir, MLLP and HTTP on OS-assigned loopback ports. Its logs go
 * where serve puts them (and through the log scan); `warn` keeps the volume down.
 */
export interface ServeUnderTest {
  serving: Serving;
  dataDir: string;
  close(): Promise<void>;
}

export async function startServe(env: NodeJS.ProcessEnv = {}): Promise<ServeUnderTest> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'elig-harden-'));
  const config = loadServeConfig({ DENTAL_ELIG_LOG_LEVEL: 'warn', ...env }, { dataDir, mllpPort: 0, httpPort: 0 });
  const quiet = { write: () => true } as unknown as NodeJS.WritableStream;
  const serving = await serve(config, { line: () => {}, destination: quiet });
  return {
    serving,
    dataDir,
    async close() {
      await serving.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** What one connection got: every ACK frame, and how it ended. */
export interface Sent {
  /** Each ACK read as UTF-8. */
  acks: string[];
  /** Each ACK's bytes, for a test that reads them in the character set they were written in. */
  raw: Buffer[];
  /** The connection was reset or failed instead of being closed after the last answer. */
  error: Error | undefined;
}

/**
 * Writes `messages` pipelined on one connection (honouring backpressure), half-closes, and waits
 * for the listener to answer everything and close.
 */
export async function sendAll(port: number, messages: readonly (string | Buffer)[], timeoutMs: number): Promise<Sent> {
  // An ACK echoes the sender's MSH: to a megabyte of MSH-12 it is a megabyte too.
  const c: Client = await client(port, 'utf8', 64 << 20);
  let error: Error | undefined;
  c.socket.on('error', (err) => (error = err));
  for (const m of messages) {
    if (!c.socket.write(frame(m))) await new Promise((resolve) => c.socket.once('drain', resolve));
  }
  c.socket.end();
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutMs)));
  const ended = await Promise.race([c.closed.then(() => 'closed' as const), timedOut]);
  clearTimeout(timer);
  if (ended === 'timeout') {
    c.socket.destroy();
    throw new Error(`connection not closed within ${timeoutMs} ms: ${c.acks.length} ACKs for ${messages.length} messages`);
  }
  return { acks: c.acks, raw: c.raw, error };
}

/** The resident set size in MiB, for the figures the load tests print. */
export const rssMiB = () => Math.round(process.memoryUsage().rss / 2 ** 20);
