import * as path from 'node:path';
import { generateWebhookSecret } from '../../src/sandbox';
import { WEBHOOK_PATH } from '../../src/service/http-server';
import { booking } from '../support/bookings';
import { msa } from '../service/mllp-client';
import { rssMiB, sendAll, startServe, type ServeUnderTest } from './serve-under-test';
import { sized } from './soak';
import type { WebhookLoad, WebhookLoadResult } from './webhook-sender';
import { threadFor } from '../bench/measure';

/**
 * A running serve under load: 50 MLLP connections at once, and webhook deliveries at 200 a second
 * (npm test: 5 s; the soak: a minute). Nothing is lost: every message ACKed AA and stored, every
 * delivery answered and kept. RSS is printed at the start and the end, and the rate reached (the
 * sender, in a thread of its own, paces itself to 200/s; on two busy cores the service may answer
 * fewer, so the rate is a figure, not a bound).
 */
const CONNECTIONS = 50;
const PER_CONNECTION = sized(10, 40);
const WEBHOOK_SECONDS = sized(5, 60);
const WEBHOOKS_PER_SECOND = 200;
/** Longer than this unanswered, a delivery counts as lost: the sender ends, and the test reports rather than times out. */
const ANSWER_WITHIN_MS = 30_000;

describe('serve under load', () => {
  let s: ServeUnderTest;
  const secret = generateWebhookSecret();
  beforeAll(async () => {
    s = await startServe({ DENTAL_ELIG_WEBHOOK_SECRET: secret });
  });
  afterAll(async () => s.close());

  it(`${CONNECTIONS} MLLP connections at once, ${PER_CONNECTION} bookings each: every one AA and stored`, async () => {
    const rssStart = rssMiB();
    const started = Date.now();
    const texts = Array.from({ length: CONNECTIONS }, (_, c) => Array.from({ length: PER_CONNECTION }, (_, i) => booking(`L${c}`, i)));
    const results = await Promise.all(texts.map((batch) => sendAll(s.serving.mllp.port, batch, 120_000)));
    const seconds = (Date.now() - started) / 1000;
    expect(results.map((r) => r.error?.message)).toEqual(texts.map(() => undefined));
    expect(results.flatMap((r) => r.acks.map((a) => msa(a).code))).toEqual(texts.flat().map(() => 'AA'));
    const stored = new Set((await s.serving.sync.store.listMessages({ kind: 'hl7' })).map((m) => m.raw));
    expect(texts.flat().filter((t) => !stored.has(t))).toEqual([]);
    process.stdout.write(`load: ${CONNECTIONS * PER_CONNECTION} bookings on ${CONNECTIONS} connections at once in ${seconds.toFixed(1)} s; RSS ${rssStart} -> ${rssMiB()} MiB\n`);
  }, 150_000);

  it(`${WEBHOOKS_PER_SECOND} webhook deliveries a second for ${WEBHOOK_SECONDS} s: each answered and kept`, async () => {
    const url = `http://${s.serving.http.host}:${s.serving.http.port}${WEBHOOK_PATH}`;
    // Signed, but for no verification this service made: answered 4xx and kept as received.
    const sender = threadFor<WebhookLoad, WebhookLoadResult>(path.join(__dirname, 'webhook-sender.ts'), 'sendWebhooks');
    const rssStart = rssMiB();
    const rssEvery: number[] = [];
    const sampler = setInterval(() => rssEvery.push(rssMiB()), 1000);
    let result: WebhookLoadResult;
    try {
      result = await sender.call({ url, secret, seconds: WEBHOOK_SECONDS, perSecond: WEBHOOKS_PER_SECOND, answerWithinMs: ANSWER_WITHIN_MS });
    } finally {
      clearInterval(sampler);
      await sender.close();
    }
    const { sent, statuses, failures, seconds } = result;
    // The in-process sandbox delivers the bookings' real results too: count only these.
    const kept = (await s.serving.sync.store.listMessages({ kind: 'webhook' })).filter((m) => m.raw.includes('"delivery": "msg_load_')).length;
    process.stdout.write(
      `load: ${sent} webhook deliveries in ${seconds.toFixed(1)} s (${Math.round(sent / seconds)}/s); answers ${JSON.stringify(statuses)}${statuses[0] ? ` (unanswered: ${JSON.stringify(failures)})` : ''}; ${kept} kept; RSS ${rssStart} -> ${rssMiB()} MiB (per second: ${rssEvery.join(' ')})\n`,
    );
    expect(Object.values(statuses).reduce((a, b) => a + b, 0)).toBe(sent);
    expect(Object.keys(statuses).every((code) => Number(code) >= 400 && Number(code) < 500)).toBe(true);
    expect(kept).toBe(sent);
  }, (WEBHOOK_SECONDS + 60) * 1000 + ANSWER_WITHIN_MS);
});
