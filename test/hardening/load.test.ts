import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { generateWebhookSecret } from '../../src/sandbox';
import { WEBHOOK_PATH } from '../../src/verification/webhook';
import { threadFor } from '../bench/measure';
import { startStack, usage, type Stack } from '../bench/processes';
import { msa } from '../service/mllp-client';
import { booking } from '../support/bookings';
import { bin } from '../support/serve-process';
import { sendAll } from './serve-under-test';
import { sized } from './soak';
import type { WebhookLoad, WebhookLoadResult } from './webhook-sender';

/**
 * `dental-elig serve` under load, as production runs it: its own process (from the compiled CLI),
 * the sandbox (100 ± 50 ms a request, half the payers answering by webhook) and the FHIR server in
 * processes of their own. 50 MLLP connections at once, then webhook deliveries at 200 a second
 * (npm test: 5 s; the soak: a minute) while serve still verifies and writes those bookings. Nothing
 * is lost: every message ACKed AA and stored, every delivery answered and kept. Serve's RSS is read
 * from /proc at the start, every second and at the end. The sender, in a thread of its own, paces
 * itself; the rate serve answered is printed.
 */
const CONNECTIONS = 50;
const PER_CONNECTION = sized(10, 40);
const WEBHOOK_SECONDS = sized(5, 60);
const WEBHOOKS_PER_SECOND = 200;
/** Longer than this unanswered, a delivery counts as lost: the sender ends, and the test reports rather than times out. */
const ANSWER_WITHIN_MS = 30_000;

const run = promisify(execFile);
const rssMiB = (stack: Stack) => Math.round(usage(stack.serve.pid).rssBytes / 2 ** 20);
/** Serve's V8 heap in use, from its /metrics: what grows if serve keeps what it should not. */
async function heapMiB(stack: Stack): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${stack.httpPort}/metrics`)).text();
  return Math.round(Number(/^nodejs_heap_size_used_bytes (\d+)$/m.exec(text)?.[1]) / 2 ** 20);
}

describe('serve under load, in its own process', () => {
  let dir: string;
  let stack: Stack;
  const secret = generateWebhookSecret();
  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'elig-load-'));
    stack = await startStack({ dir, secret, concurrency: 64, latencyMs: 100, jitterMs: 50, asyncDelayMs: 200 });
  }, 60_000);
  afterAll(async () => {
    await stack?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** What the store holds, as an operator lists it: `dental-elig jobs messages --json` on serve's data dir. */
  async function storedMessages(): Promise<{ kind: string; dedupeKey: string; status: string }[]> {
    const { stdout } = await run(process.execPath, [bin, 'jobs', 'messages', '--json', '--data-dir', path.join(dir, 'data')], { maxBuffer: 256 << 20 });
    return JSON.parse(stdout) as { kind: string; dedupeKey: string; status: string }[];
  }

  it(`${CONNECTIONS} MLLP connections at once, ${PER_CONNECTION} bookings each: every one AA and stored`, async () => {
    const rssStart = rssMiB(stack);
    const started = Date.now();
    const texts = Array.from({ length: CONNECTIONS }, (_, c) => Array.from({ length: PER_CONNECTION }, (_, i) => booking(`L${c}`, i)));
    const results = await Promise.all(texts.map((batch) => sendAll(stack.mllpPort, batch, 120_000)));
    const seconds = (Date.now() - started) / 1000;
    expect(results.map((r) => r.error?.message)).toEqual(texts.map(() => undefined));
    expect(results.flatMap((r) => r.acks.map((a) => msa(a).code))).toEqual(texts.flat().map(() => 'AA'));
    const stored = new Set((await storedMessages()).filter((m) => m.kind === 'hl7').map((m) => m.dedupeKey));
    const controlIds = texts.flatMap((batch, c) => batch.map((_, i) => `L${c}-${i}`));
    expect(controlIds.filter((id) => !stored.has(`SMILECLOUD|BSD-MAIN|${id}`))).toEqual([]);
    process.stdout.write(`load: ${CONNECTIONS * PER_CONNECTION} bookings on ${CONNECTIONS} connections at once in ${seconds.toFixed(1)} s; serve's RSS ${rssStart} -> ${rssMiB(stack)} MiB\n`);
  }, 150_000);

  it(`${WEBHOOKS_PER_SECOND} webhook deliveries a second for ${WEBHOOK_SECONDS} s: each answered and kept`, async () => {
    const url = `http://127.0.0.1:${stack.httpPort}${WEBHOOK_PATH}`;
    // Signed, but for no verification this service made: answered 4xx and kept as dead letters
    // (the sandbox's own deliveries, for the bookings above, are applied, not dead).
    const deadWebhooks = async () => (await storedMessages()).filter((m) => m.kind === 'webhook' && m.status === 'dead').length;
    const deadBefore = await deadWebhooks();
    const sender = threadFor<WebhookLoad, WebhookLoadResult>(path.join(__dirname, 'webhook-sender.ts'), 'sendWebhooks');
    const rssStart = rssMiB(stack);
    const heapStart = await heapMiB(stack);
    const rssEvery: number[] = [];
    const sampler = setInterval(() => rssEvery.push(rssMiB(stack)), 1000);
    let result: WebhookLoadResult;
    try {
      result = await sender.call({ url, secret, seconds: WEBHOOK_SECONDS, perSecond: WEBHOOKS_PER_SECOND, answerWithinMs: ANSWER_WITHIN_MS });
    } finally {
      clearInterval(sampler);
      await sender.close();
    }
    const { sent, statuses, failures, seconds } = result;
    const kept = (await deadWebhooks()) - deadBefore;
    process.stdout.write(
      `load: ${sent} webhook deliveries in ${seconds.toFixed(1)} s (${Math.round(sent / seconds)}/s); answers ${JSON.stringify(statuses)}` +
        `${statuses[0] ? ` (unanswered: ${JSON.stringify(failures)})` : ''}; ${kept} kept; serve's RSS ${rssStart} -> ${rssMiB(stack)} MiB (per second: ${rssEvery.join(' ')}), heap used ${heapStart} -> ${await heapMiB(stack)} MiB\n`,
    );
    expect(Object.values(statuses).reduce((a, b) => a + b, 0)).toBe(sent);
    expect(Object.keys(statuses).every((code) => Number(code) >= 400 && Number(code) < 500)).toBe(true);
    expect(kept).toBe(sent);
  }, (WEBHOOK_SECONDS + 60) * 1000 + ANSWER_WITHIN_MS);
});
