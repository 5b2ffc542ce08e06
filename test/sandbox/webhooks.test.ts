import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { generateWebhookSecret, signedHeaders, startSandbox, type Sandbox } from '../../src/sandbox';
import { toOutcome } from '../../src/verification/outcome';
import { call, FAST, verificationBody } from './helpers';

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
}

/** A webhook receiver on loopback that answers with the given statuses in turn (the last one repeats). */
async function receiver(statuses: number[]): Promise<{ url: string; received: Received[]; close: () => Promise<void> }> {
  const received: Received[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      res.statusCode = statuses[Math.min(received.length - 1, statuses.length - 1)] as number;
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks/verification`,
    received,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

let sb: Sandbox;
afterEach(() => sb?.close());

test('an asynchronous result is POSTed, signed per Standard Webhooks, with the verification body', async () => {
  const hook = await receiver([204]);
  const secret = generateWebhookSecret();
  sb = await startSandbox({ timing: FAST, seed: true, webhook: { url: hook.url, secret } });
  try {
    const accepted = (await call(sb, 'POST', '/v2/insurance-verification-requests', verificationBody('SBX-COMPLETE', { externalId: 'elig_w1' }))).body;
    await sb.settle();
    expect(hook.received).toHaveLength(1);
    const { headers, body } = hook.received[0] as Received;
    expect(headers['webhook-id']).toMatch(/^msg_/);
    expect(Number(headers['webhook-timestamp'])).toBeGreaterThan(Date.now() / 1000 - 60);
    expect(headers['webhook-signature']).toMatch(/^v1,/);
    expect(headers['x-sandbox']).toBe('true');
    // The receiver's check, done the standard way: it throws on a bad signature or a stale timestamp.
    const payload = new Webhook(secret).verify(body, headers as Record<string, string>);
    expect(toOutcome(payload)).toMatchObject({ kind: 'completed', verification: { correlationId: accepted.correlationId, externalId: 'elig_w1' } });
    // The same as GET shows it.
    const got = (await call(sb, 'GET', `/v2/insurance-verifications/${accepted.correlationId}`)).body;
    expect(JSON.parse(body)).toEqual(got);
    expect(() => new Webhook(generateWebhookSecret()).verify(body, headers as Record<string, string>)).toThrow();
    expect(sb.webhookDeliveries()).toEqual([expect.objectContaining({ state: 'delivered', attempts: [expect.objectContaining({ status: 204 })] })]);
  } finally {
    await hook.close();
  }
});

test('a static bearer token instead of a signature', async () => {
  const hook = await receiver([200]);
  sb = await startSandbox({ timing: FAST, seed: true, webhook: { url: hook.url, bearerToken: 'hook-token-123' } });
  try {
    await call(sb, 'POST', '/v2/insurance-verification-requests', verificationBody('SBX-FAIL-PatientNotFound'));
    await sb.settle();
    const { headers, body } = hook.received[0] as Received;
    expect(headers.authorization).toBe('Bearer hook-token-123');
    expect(headers['webhook-signature']).toBeUndefined();
    expect(toOutcome(JSON.parse(body))).toMatchObject({ kind: 'failed', failure: { kind: 'PatientNotFound' } });
  } finally {
    await hook.close();
  }
});

test('an error answer is retried with backoff, under the same webhook-id, and 3 attempts in all', async () => {
  const hook = await receiver([500, 503, 200]);
  const backoff = 100;
  sb = await startSandbox({ timing: { ...FAST, webhookBackoffMs: backoff }, seed: true, webhook: { url: hook.url, secret: generateWebhookSecret() } });
  try {
    await call(sb, 'POST', '/v2/insurance-verification-requests', verificationBody('DD1'));
    await sb.settle();
    expect(hook.received).toHaveLength(3);
    expect(new Set(hook.received.map((r) => r.headers['webhook-id'])).size).toBe(1);
    const [d] = sb.webhookDeliveries();
    expect(d?.state).toBe('delivered');
    expect(d?.attempts.map((a) => a.status)).toEqual([500, 503, 200]);
    const times = d?.attempts.map((a) => Date.parse(a.at)) ?? [];
    // Exponential: the second wait is twice the first (lower bounds only: a loaded machine only adds).
    expect((times[1] as number) - (times[0] as number)).toBeGreaterThanOrEqual(backoff - 2);
    expect((times[2] as number) - (times[1] as number)).toBeGreaterThanOrEqual(2 * backoff - 2);
  } finally {
    await hook.close();
  }
});

test('a receiver that keeps failing gets 3 attempts, then the delivery is marked failed; an unreachable one too', async () => {
  const hook = await receiver([500]);
  sb = await startSandbox({ timing: FAST, seed: true, webhook: { url: hook.url } });
  try {
    await call(sb, 'POST', '/v2/insurance-verification-requests', verificationBody('DD1'));
    await sb.settle();
    expect(hook.received).toHaveLength(3);
    expect(sb.webhookDeliveries()[0]?.state).toBe('failed');
  } finally {
    await hook.close();
  }
  sb.configureWebhook({ url: hook.url });
  await call(sb, 'POST', '/v2/insurance-verification-requests', verificationBody('DD2'));
  await sb.settle();
  const unreachable = sb.webhookDeliveries()[1];
  expect(unreachable?.state).toBe('failed');
  expect(unreachable?.attempts).toHaveLength(3);
  expect(unreachable?.attempts[0]?.error).toEqual(expect.any(String));
});

test('signedHeaders signs exactly as deliveries are signed', () => {
  const secret = generateWebhookSecret();
  const at = new Date();
  const headers = signedHeaders(secret, 'msg_1', at, '{"a":1}');
  expect(new Webhook(secret).verify('{"a":1}', headers)).toEqual({ a: 1 });
});
