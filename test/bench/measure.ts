import { spawn } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { projectRoot } from '../../src/mapping-files';

/** The inputs of a fixture directory (expected outputs left out), as text. */
export function fixtureTexts(dir: string, ext: string): string[] {
  const folder = path.join(projectRoot, 'fixtures', dir);
  return readdirSync(folder)
    .filter((f) => f.endsWith(ext) && !f.includes('.expected.'))
    .sort()
    .map((f) => readFileSync(path.join(folder, f), 'utf8'));
}

/** What a measurement hands back to its benchmark: lines to print, and counts to check. */
export interface Measured {
  lines: string[];
  counts: Record<string, number>;
}

/**
 * Node flags for each process a benchmark starts: BENCH_CPU_PROF=<dir> makes each write a V8 CPU
 * profile there when it stops (open it in Chrome DevTools); BENCH_NODE_FLAGS adds flags of one's
 * own (e.g. --trace-gc). V8 traces go to standard output, which the `dental-elig` children's
 * is otherwise not kept: BENCH_STDOUT_DIR=<dir> keeps each in <dir>/<command>-<pid>.out.
 */
export function benchNodeFlags(): string[] {
  const dir = process.env.BENCH_CPU_PROF;
  return [...(dir ? ['--cpu-prof', `--cpu-prof-dir=${dir}`] : []), ...(process.env.BENCH_NODE_FLAGS?.split(' ').filter(Boolean) ?? [])];
}

/**
 * Runs a measurement module's `measure()` on the main thread of a Node process of its own, as
 * serve runs. Not in Jest's test context: code there reaches every global (Object, Array,
 * Promise, ...) through the context's interceptors, and zod parses ran 15 times slower than in a
 * plain Node context. Not in a worker thread either: R4 validation ran 1.7 times slower in one
 * than on a main thread. The child compiles the TypeScript sources with swc, as Jest does (.swcrc).
 */
export function measureInProcess(modulePath: string): Promise<Measured> {
  const source = `
    ${COMPILE_TS}
    require(${JSON.stringify(modulePath)}).measure().then(
      (measured) => process.send(measured, () => process.exit(0)),
      (err) => { console.error(err); process.exit(1); },
    );
  `;
  const child = spawn(process.execPath, [...benchNodeFlags(), '-e', source], { cwd: projectRoot, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise<Measured>((resolve, reject) => {
    let measured: Measured | undefined;
    child.once('message', (answer: Measured) => (measured = answer));
    child.once('error', reject);
    child.once('exit', (code) => (measured ? resolve(measured) : reject(new Error(`${path.basename(modulePath)} exited with ${code} before answering`))));
  });
}

/** Compiles required .ts files with swc, as Jest does: the start of a thread's or a child's source. */
const COMPILE_TS = `
    const { readFileSync } = require('node:fs');
    const { transformSync } = require('@swc/core');
    require.extensions['.ts'] = (module, filename) => {
      module._compile(transformSync(readFileSync(filename, 'utf8'), { filename, swcrc: true }).code, filename);
    };
`;

/** A worker thread that answers each call with `exportName(data)` of a TypeScript module, one call at a time. */
export interface Thread<I, O> {
  call(data: I): Promise<O>;
  close(): Promise<void>;
}

export function threadFor<I, O>(modulePath: string, exportName: string): Thread<I, O> {
  const source = `
    const { parentPort, workerData } = require('node:worker_threads');
    ${COMPILE_TS}
    const run = require(workerData.modulePath)[workerData.exportName];
    parentPort.on('message', (data) => run(data).then((answer) => parentPort.postMessage(answer)));
  `;
  const worker = new Worker(source, { eval: true, workerData: { modulePath, exportName } });
  let failed: ((err: Error) => void) | undefined;
  worker.on('error', (err) => failed?.(err));
  worker.on('exit', (code) => failed?.(new Error(`worker for ${path.basename(modulePath)} exited with ${code} before answering`)));
  return {
    call: (data) =>
      new Promise<O>((resolve, reject) => {
        failed = reject;
        worker.once('message', (answer: O) => {
          failed = undefined;
          resolve(answer);
        });
        worker.postMessage(data);
      }),
    close: async () => {
      failed = undefined;
      await worker.terminate();
    },
  };
}

export interface Comparison {
  /** Milliseconds per operation of the thing measured and of its baseline. */
  perOp: number;
  baselinePerOp: number;
  /** How many baselines one operation costs, over the whole run. */
  ratio: number;
  /** The same ratio round by round: a wide spread means the machine was busy with something else. */
  roundRatios: { min: number; median: number; max: number };
}

type Pass = () => unknown;

/**
 * Times an operation against its baseline in alternating rounds, each round one pass of each over
 * the same inputs. The machine is shared, so a neighbour's burst of work lands on both sides
 * instead of on whichever happened to run then. The first rounds only warm the JIT up.
 */
export async function compare(options: { rounds: number; warmupRounds: number; opsPerPass: number; pass: Pass; baseline: Pass }): Promise<Comparison> {
  const { rounds, warmupRounds, opsPerPass } = options;
  let measured = 0;
  let baseline = 0;
  const ratios: number[] = [];
  for (let round = 0; round < warmupRounds + rounds; round++) {
    const b = await timedPass(options.baseline);
    const m = await timedPass(options.pass);
    if (round < warmupRounds) continue;
    measured += m;
    baseline += b;
    ratios.push(m / b);
  }
  ratios.sort((a, b) => a - b);
  const ops = rounds * opsPerPass;
  return {
    perOp: measured / ops,
    baselinePerOp: baseline / ops,
    ratio: measured / baseline,
    roundRatios: { min: ratios[0] ?? NaN, median: ratios[Math.floor(ratios.length / 2)] ?? NaN, max: ratios[ratios.length - 1] ?? NaN },
  };
}

async function timedPass(pass: Pass): Promise<number> {
  const start = performance.now();
  await pass();
  return performance.now() - start;
}

/** One figure as a line, label left and value right, as every benchmark prints them. */
export function figure(label: string, value: string): string {
  return `${label.padEnd(56)} ${value}`;
}

export function spread(c: Comparison): string {
  const { min, median, max } = c.roundRatios;
  return `${median.toFixed(2)} (rounds ${min.toFixed(2)} to ${max.toFixed(2)})`;
}

/** Prints a measurement's lines, as the benchmark's output. */
export function print(measured: Measured): void {
  process.stdout.write(`${measured.lines.join('\n')}\n`);
}
