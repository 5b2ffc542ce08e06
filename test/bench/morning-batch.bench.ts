import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { generateWebhookSecret } from '../../src/sandbox';
import { figure } from './measure';
import { msa, sendAll, siuS12 } from './mllp-driver';
import { sampleUsage, startStack, tail } from './processes';

/**
 * A practice's morning: N appointments booked over MLLP into `dental-elig serve`, each verified
 * against the sandbox (every request 300 ± 100 ms; half the payers answer by webhook) and written
 * to the chart. The sandbox, the FHIR server and serve run as child processes from the compiled
 * CLI (`npm run build` first), as the remote services and the sidecar they stand for; the bench
 * drives them over sockets and reads serve's memory and CPU from /proc. Efficiency is the ideal
 * time (N × mean latency ÷ concurrency) over the time from the first message sent to the last
 * check written, as serve's /metrics gives it: the bench need not scrape often (a scrape counts
 * every check in the store, CPU of serve's that a morning would not spend).
 *
 * The four processes (serve, the sandbox, the FHIR server and this driver) share the machine's
 * cores, where in a practice the services serve calls run elsewhere: their CPU together, over the
 * cores, is the least time the batch can take here, and the ideal time over that the highest
 * efficiency this machine allows whatever serve does. The bench prints both.
 */
const CONCURRENCY = 64;
const LATENCY_MS = 300;
const JITTER_MS = 100;
/** The sandbox's time from an asynchronous request to its result, after the request's own latency. */
const ASYNC_COMPLETION_MS = 200;
/** BENCH_SIZES=1000 (or 1000,5000) runs only those sizes: one size takes about a minute. */
const SIZES = process.env.BENCH_SIZES ? sizesFrom(process.env.BENCH_SIZES) : [1000, 5000, 10000];

function sizesFrom(text: string): number[] {
  const sizes = text.split(',').map(Number);
  // Even: half the bookings go to the payer that answers by webhook.
  if (sizes.some((n) => !Number.isInteger(n) || n <= 0 || n % 2 !== 0)) throw new Error('BENCH_SIZES: give even positive whole numbers separated by commas, e.g. 1000,5000');
  return sizes;
}
const FINISHED = ['written', 'needs-attention', 'dead', 'cancelled'];

interface Morning {
  seconds: number;
  efficiency: number;
  peakRssMb: number;
  cpuMsPerCheck: number;
  written: number;
  others: Record<string, number>;
  byWebhook: number;
  /** The most checks serve's worker held at one scrape: the concurrency, when the pipeline keeps it full. */
  peakInHand: number;
  sandboxCpuMsPerCheck: number;
  fhirCpuMsPerCheck: number;
  /** The four processes' CPU over the cores: the least time the batch takes on this machine. */
  cpuBoundSeconds: number;
  /** The ideal time over the larger of itself and cpuBoundSeconds. */
  efficiencyCeiling: number;
}

async function morning(n: number, dir: string): Promise<Morning> {
  const stack = await startStack({ dir, secret: generateWebhookSecret(), concurrency: CONCURRENCY, latencyMs: LATENCY_MS, jitterMs: JITTER_MS, asyncDelayMs: ASYNC_COMPLETION_MS });
  const { serve, sandbox, fhir, mllpPort, httpPort } = stack;
  try {
    const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10).replace(/-/g, '');
    const messages = Array.from({ length: n }, (_, i) => siuS12(i, tomorrow));
    const samplers = [serve, sandbox, fhir].map((r) => sampleUsage(r.pid));
    const driverCpu = process.cpuUsage();
    const start = performance.now();
    const startedAt = Date.now() / 1000;
    const acks = await sendAll(mllpPort, messages, 8);
    const refused = acks.filter((ack) => msa(ack).code !== 'AA').length;
    if (refused > 0) throw new Error(`${refused} of ${n} bookings were not accepted: ${tail(serve.logFile)}`);

    const idealSeconds = (n * LATENCY_MS) / CONCURRENCY / 1000;
    const deadline = start + (idealSeconds * 5 + 60) * 1000;
    let states: Record<string, number> = {};
    let byWebhook = 0;
    let peakInHand = 0;
    let lastWrittenAt = 0;
    for (;;) {
      let inHand: number;
      ({ states, byWebhook, inHand, lastWrittenAt } = await checkStates(httpPort));
      peakInHand = Math.max(peakInHand, inHand);
      if (FINISHED.reduce((sum, s) => sum + (states[s] ?? 0), 0) >= n) break;
      if (performance.now() > deadline) throw new Error(`morning-batch-${n}: not finished in time: ${JSON.stringify(states)}; ${tail(serve.logFile)}`);
      await new Promise((r) => setTimeout(r, 1000));
    }
    const seconds = lastWrittenAt - startedAt;
    const [own, service, chart] = samplers.map((s) => s.stop()) as [ReturnType<ReturnType<typeof sampleUsage>['stop']>, ...ReturnType<ReturnType<typeof sampleUsage>['stop']>[]];
    const driver = process.cpuUsage(driverCpu);
    const allCpuMs = own.cpuMs + (service?.cpuMs ?? NaN) + (chart?.cpuMs ?? NaN) + (driver.user + driver.system) / 1000;
    const cpuBoundSeconds = allCpuMs / 1000 / availableParallelism();
    const { written = 0, ...others } = states;
    return {
      seconds,
      efficiency: idealSeconds / seconds,
      peakRssMb: own.peakRssBytes / 1024 / 1024,
      cpuMsPerCheck: own.cpuMs / n,
      written,
      others,
      byWebhook,
      peakInHand,
      sandboxCpuMsPerCheck: (service?.cpuMs ?? NaN) / n,
      fhirCpuMsPerCheck: (chart?.cpuMs ?? NaN) / n,
      cpuBoundSeconds,
      efficiencyCeiling: idealSeconds / Math.max(idealSeconds, cpuBoundSeconds),
    };
  } finally {
    await stack.stop();
  }
}

/** Checks by state, from serve's /metrics (the store's counts when scraped), how many results came by webhook, how many checks the worker held, and when it last wrote one (Unix seconds). */
async function checkStates(httpPort: number): Promise<{ states: Record<string, number>; byWebhook: number; inHand: number; lastWrittenAt: number }> {
  const text = await (await fetch(`http://127.0.0.1:${httpPort}/metrics`)).text();
  const states: Record<string, number> = {};
  for (const [, state, count] of text.matchAll(/^dental_elig_checks\{state="([^"]+)"\} (\d+)$/gm)) states[state as string] = Number(count);
  const byWebhook = Number(/^dental_elig_webhooks_total\{result="applied"\} (\d+)$/m.exec(text)?.[1] ?? 0);
  const inHand = Number(/^dental_elig_checks_in_hand (\d+)$/m.exec(text)?.[1] ?? 0);
  const lastWrittenAt = Number(/^dental_elig_last_written_timestamp_seconds (\S+)$/m.exec(text)?.[1] ?? NaN);
  return { states, byWebhook, inHand, lastWrittenAt };
}

test('morning batch: bookings to written eligibility through serve, the sandbox and the FHIR server', async () => {
  const results: [number, Morning][] = [];
  for (const n of SIZES) {
    const dir = mkdtempSync(path.join(tmpdir(), `elig-bench-morning-${n}-`));
    try {
      const m = await morning(n, dir);
      results.push([n, m]);
      process.stdout.write(
        [
          figure(`morning-batch-${n}: checks written (others), results by webhook`, `${m.written} ${JSON.stringify(m.others)}, ${m.byWebhook}`),
          figure(`morning-batch-${n}: ideal time (N × ${LATENCY_MS} ms ÷ ${CONCURRENCY})`, `${((n * LATENCY_MS) / CONCURRENCY / 1000).toFixed(1)} s`),
          figure(`morning-batch-${n}: most checks in hand (${CONCURRENCY} places for the service, ${CONCURRENCY} for the chart)`, `${m.peakInHand}`),
          figure(`morning-batch-${n}: sandbox cpu, FHIR server cpu`, `${m.sandboxCpuMsPerCheck.toFixed(2)}, ${m.fhirCpuMsPerCheck.toFixed(2)} ms/check`),
          figure(
            `morning-batch-${n}: all four processes' cpu ÷ ${availableParallelism()} cores`,
            `${m.cpuBoundSeconds.toFixed(1)} s (efficiency at most ${m.efficiencyCeiling.toFixed(2)} on this machine)`,
          ),
          `bench morning-batch-${n}: ${m.seconds.toFixed(1)} s, efficiency ${m.efficiency.toFixed(2)}, peak-rss ${m.peakRssMb.toFixed(0)} MB, cpu ${m.cpuMsPerCheck.toFixed(2)} ms/check`,
        ].join('\n') + '\n',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  // Every booking verified and written; half of them answered asynchronously, by webhook.
  for (const [n, m] of results) expect({ n, written: m.written, byWebhook: m.byWebhook }).toEqual({ n, written: n, byWebhook: n / 2 });
}, 600_000);
