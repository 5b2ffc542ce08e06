import { readFileSync, readdirSync } from 'node:fs';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { projectRoot } from '../../src/mapping-files';

/** The inputs of a fixture directory (expected outputs left out), as text. */
export function fixtureTexts(dir: string, ext: string): string[] {
  const folder = path.join(projectRoot, 'fixtures', dir);
  return readdirSync(folder)
    .filter((f) => f.endsWith(ext) && !f.includes('.expected.'))
    .sort()
    .map((f) => readFileSync(path.join(folder, f), 'utf8'));
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

/** One figure per line, label left and value right, as every benchmark prints them. */
export function figure(label: string, value: string): void {
  process.stdout.write(`${label.padEnd(56)} ${value}\n`);
}

export function spread(c: Comparison): string {
  const { min, median, max } = c.roundRatios;
  return `${median.toFixed(2)} (rounds ${min.toFixed(2)} to ${max.toFixed(2)})`;
}
