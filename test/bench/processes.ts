import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import * as path from 'node:path';
import { projectRoot } from '../../src/mapping-files';
import { DEFAULT_API_KEY, DEFAULT_CUSTOMER_ID } from '../../src/sandbox';
import { WEBHOOK_PATH } from '../../src/verification/webhook';
import { benchNodeFlags } from './measure';

/** A `dental-elig` command running as a child process, as an operator starts it. */
export interface Running {
  child: ChildProcess;
  pid: number;
  /** The address of its `listening: <what> <address>` line. */
  listening: Record<string, string>;
  /** Where its standard error (the JSON logs) went. */
  logFile: string;
  stop(): Promise<void>;
}

/**
 * Starts `dental-elig <args>` from the compiled CLI (`npm run build` first) and resolves once it
 * has printed every `listening:` line asked for. Its logs go to a file, not to a pipe nobody
 * reads, which would stall it.
 */
export async function startCli(args: string[], options: { env: NodeJS.ProcessEnv; logFile: string; waitFor: string[] }): Promise<Running> {
  const child = spawn(process.execPath, [...benchNodeFlags(), path.join(projectRoot, 'bin', 'dental-elig.js'), ...args], {
    env: options.env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stderr?.pipe(createWriteStream(options.logFile));
  const listening: Record<string, string> = {};
  await new Promise<void>((resolve, reject) => {
    let text = '';
    const exited = (code: number | null) => reject(new Error(`dental-elig ${args[0]} exited (${code}) before listening: ${tail(options.logFile)}`));
    child.once('exit', exited);
    child.stdout?.on('data', (chunk: Buffer) => {
      text += chunk.toString('utf8');
      for (const [, what, address] of text.matchAll(/^listening: (\S+) (\S+)$/gm)) listening[what as string] = address as string;
      if (options.waitFor.every((w) => w in listening)) {
        child.off('exit', exited);
        resolve();
      }
    });
  });
  const kept = process.env.BENCH_STDOUT_DIR;
  if (kept) child.stdout?.pipe(createWriteStream(path.join(kept, `${args[0]}-${child.pid}.out`)));
  else child.stdout?.resume();
  return {
    child,
    pid: child.pid as number,
    listening,
    logFile: options.logFile,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

/** The last lines of a log, to say why a child failed. */
export function tail(file: string, lines = 5): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/** A port free right now on loopback, for a process that must be told its port before another can be given its URL. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Clock ticks per second of /proc/<pid>/stat's utime and stime (USER_HZ; 100 on Linux). */
const USER_HZ = 100;

/** A process's resident memory and CPU time so far, from /proc. */
export function usage(pid: number): { rssBytes: number; cpuMs: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rssKb = Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? NaN);
  // Fields after the command name (which may hold spaces), counted from field 3: utime is 14, stime 15.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return { rssBytes: rssKb * 1024, cpuMs: (ticks * 1000) / USER_HZ };
}

/** Samples a process's peak RSS until stopped; the CPU time is read at both ends. */
export function sampleUsage(pid: number, everyMs = 50): { stop(): { peakRssBytes: number; cpuMs: number } } {
  const start = usage(pid);
  let peak = start.rssBytes;
  const timer = setInterval(() => {
    try {
      peak = Math.max(peak, usage(pid).rssBytes);
    } catch {
      // The process is gone; the last reading stands.
    }
  }, everyMs);
  return {
    stop: () => {
      clearInterval(timer);
      const end = usage(pid);
      return { peakRssBytes: Math.max(peak, end.rssBytes), cpuMs: end.cpuMs - start.cpuMs };
    },
  };
}

/** `dental-elig serve` with the sandbox and the FHIR server it talks to, each a process of its own. */
export interface Stack {
  fhir: Running;
  sandbox: Running;
  serve: Running;
  mllpPort: number;
  httpPort: number;
  /** Stops serve first, then what it talks to. */
  stop(): Promise<void>;
}

export interface StackOptions {
  /** Where the processes' logs, serve's config and its data dir go. */
  dir: string;
  /** The webhook secret the sandbox signs with and serve checks. */
  secret: string;
  concurrency: number;
  /** The sandbox's latency for every request, ± jitter, and its time to an asynchronous result. */
  latencyMs: number;
  jitterMs: number;
  asyncDelayMs: number;
}

/**
 * The three processes an operator runs against a verification service and a chart, from the
 * compiled CLI (`npm run build` first): serve knows the sandbox and the FHIR server only by URL,
 * and the sandbox delivers webhooks to serve's HTTP port.
 */
export async function startStack(options: StackOptions): Promise<Stack> {
  const { dir, secret } = options;
  const httpPort = await freePort();
  const env = { PATH: process.env.PATH, HOME: process.env.HOME };
  const running: Running[] = [];
  const stop = async () => {
    for (const r of running.reverse()) await r.stop();
  };
  try {
    const fhir = await startCli(['fhir-server', '--port', '0'], { env, logFile: path.join(dir, 'fhir.log'), waitFor: ['fhir'] });
    running.push(fhir);
    const sandbox = await startCli(
      [
        'sandbox',
        '--port',
        '0',
        '--webhook-url',
        `http://127.0.0.1:${httpPort}${WEBHOOK_PATH}`,
        '--latency-ms',
        `${options.latencyMs}`,
        '--latency-jitter-ms',
        `${options.jitterMs}`,
        '--async-delay-ms',
        `${options.asyncDelayMs}`,
      ],
      { env: { ...env, DENTAL_ELIG_SANDBOX_WEBHOOK_SECRET: secret }, logFile: path.join(dir, 'sandbox.log'), waitFor: ['sandbox'] },
    );
    running.push(sandbox);
    const configFile = path.join(dir, 'serve.json');
    writeFileSync(configFile, JSON.stringify({ settings: { concurrency: options.concurrency } }));
    const serve = await startCli(['serve', '--config', configFile, '--data-dir', path.join(dir, 'data'), '--mllp-port', '0', '--http-port', `${httpPort}`], {
      env: {
        ...env,
        // As the README says to run it: glibc's arenas for its threads otherwise keep what was freed in them,
        // and V8 from Node 24 on lets the young generation grow to 128 MB.
        MALLOC_ARENA_MAX: '2',
        NODE_OPTIONS: '--max-semi-space-size=16',
        DENTAL_ELIG_BASE_URL: sandbox.listening.sandbox,
        DENTAL_ELIG_API_KEY: DEFAULT_API_KEY,
        DENTAL_ELIG_CUSTOMER_ID: DEFAULT_CUSTOMER_ID,
        DENTAL_ELIG_WEBHOOK_SECRET: secret,
        DENTAL_ELIG_FHIR_URL: fhir.listening.fhir,
      },
      logFile: path.join(dir, 'serve.log'),
      waitFor: ['mllp', 'http'],
    });
    running.push(serve);
    return { fhir, sandbox, serve, mllpPort: Number(serve.listening.mllp?.split(':').pop()), httpPort, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
