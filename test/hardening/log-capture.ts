import { appendFileSync } from 'node:fs';
import { ChildProcess } from 'node:child_process';
import * as path from 'node:path';

/**
 * Jest setupFiles: every line the code under test may log is copied into a file per worker, for
 * log-scan.ts to search for patient data and secrets once the run is over. Copied are what the
 * test process writes to stdout and stderr, every pino destination (the harnesses log into arrays,
 * which never reach a stream), the in-process CLI's stderr and the stderr of child processes
 * (`dental-elig serve` and the bin tests). Only copied: what the tests see is unchanged.
 */
const dir = process.env.DENTAL_ELIG_LOG_CAPTURE_DIR;

if (dir) {
  const file = path.join(dir, `worker-${process.env.JEST_WORKER_ID ?? '0'}.log`);
  const record = (source: string, chunk: unknown) => {
    const text = typeof chunk === 'string' ? chunk : Buffer.isBuffer(chunk) || chunk instanceof Uint8Array ? Buffer.from(chunk).toString('utf8') : '';
    if (text !== '') appendFileSync(file, `${source}\t${text.replace(/\n(?!$)/g, `\n${source}\t`)}${text.endsWith('\n') ? '' : '\n'}`);
  };
  const tee = (stream: NodeJS.WriteStream, source: string) => {
    const write = stream.write.bind(stream) as (...args: unknown[]) => boolean;
    stream.write = ((chunk: unknown, ...rest: unknown[]) => {
      record(source, chunk);
      return write(chunk, ...rest);
    }) as typeof stream.write;
  };
  tee(process.stdout, 'stdout');
  tee(process.stderr, 'stderr');

  jest.mock('pino', () => {
    const real = jest.requireActual<typeof import('pino')>('pino');
    const actual = (real as unknown as { default?: typeof real }).default ?? real;
    const wrapped = (options: unknown, destination?: { write(line: string): unknown }) => {
      const out = destination ?? process.stdout;
      return actual(options as never, { write: (line: string) => (record('pino', line), out.write(line)) } as never);
    };
    return Object.assign(wrapped, actual, { default: wrapped, pino: wrapped });
  });

  jest.mock('../../src/cli/main', () => {
    const real = jest.requireActual<typeof import('../../src/cli/main')>('../../src/cli/main');
    return {
      ...real,
      runCli: (argv: string[], io: Parameters<typeof real.runCli>[1]) =>
        real.runCli(argv, { ...io, stderr: { write: (s: string) => (record('cli-stderr', s), io.stderr.write(s)) } }),
    };
  });

  // Child processes are shared by every test file of the worker: patch the prototype once.
  const marker = Symbol.for('dental-elig.log-capture');
  const proto = ChildProcess.prototype as unknown as Record<symbol, unknown> & { spawn: (...args: unknown[]) => unknown };
  if (!proto[marker]) {
    proto[marker] = true;
    const spawn = proto.spawn;
    proto.spawn = function (this: ChildProcess, ...args: unknown[]) {
      const result = spawn.apply(this, args);
      this.stderr?.on('data', (d: Buffer) => record('child-stderr', d));
      return result;
    };
  }
}
