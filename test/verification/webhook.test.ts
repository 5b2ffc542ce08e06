import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import * as path from 'node:path';
import { request } from 'undici';
import { HTTP_MAX_CONNECTIONS } from '../../src/connection-limits';
import { projectRoot } from '../../src/mapping-files';
import { Webhook } from 'standardwebhooks';
import { checkWebhookConfig } from '../../src/sandbox/webhooks';
import { loadServeConfig } from '../../src/service/serve-config';
import { createWebhookHandler, notAWebhookSecret, startWebhookServer, type WebhookDelivery, type WebhookReceiverOptions } from '../../src/verification/webhook';

import { NO_URL_PATH, rawRequest } from '../support/http-server';
import { until } from '../sync/harness';

const secret = `whsec_${Buffer.from('a-test-secret-of-enough-length!!').toString('base64')}`;
const body = JSON.stringify({ correlationId: 'corr-1', status: 'Completed', result: { plan: { name: 'PPO' } } });

async function withReceiver(
  overrides: Partial<WebhookReceiverOptions>,
  run: (url: string, deliveries: WebhookDelivery[]) => Promise<void>,
): Promise<void> {
  const deliveries: WebhookDelivery[] = [];
  const server = await startWebhookServer({
    auth: { scheme: 'standard-webhooks', secret },
    isKnownCorrelationId: (id) => id === 'corr-1',
    onDelivery: async (d) => {
      deliveries.push(d);
    },
    ...overrides,
  });
  try {
    await run(server.url, deliveries);
  } finally {
    await server.close();
  }
}

function signed(payload: string, id = 'msg_1', at = new Date(), by = secret): Record<string, string> {
  return {
    'content-type': 'application/json',
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': new Webhook(by).sign(id, at, payload),
  };
}

async function post(url: string, payload: string, headers: Record<string, string>, options: { reset?: boolean } = {}) {
  const res = await request(url, { method: 'POST', body: payload, headers, ...options });
  const text = await res.body.text();
  return { status: res.statusCode, problem: text ? (JSON.parse(text) as { title: string; detail: string; errors?: unknown[] }) : undefined };
}

describe('verification webhook receiver', () => {
  it('accepts a correctly signed delivery, commits it, then answers 204', async () => {
    await withReceiver({}, async (url, deliveries) => {
      const res = await post(url, body, signed(body));
      expect(res.status).toBe(204);
      expect(deliveries).toHaveLength(1);
      expect(deliveries[0]?.webhookId).toBe('msg_1');
      expect(deliveries[0]?.outcome.kind).toBe('completed');
      expect(deliveries[0]?.rawBody).toBe(body);
    });
  });

  it("listens, started on its own, at the path serve takes deliveries at as README gives it: one URL to register with the service", async () => {
    const served = /`POST (\/webhooks\/[^`\s]+)`/.exec(readFileSync(path.join(projectRoot, 'README.md'), 'utf8'))?.[1];
    expect(served).toMatch(/^\/webhooks\//);
    await withReceiver({}, async (url, deliveries) => {
      expect(new URL(url).pathname).toBe(served);
      expect((await post(`${new URL(url).origin}${served}`, body, signed(body))).status).toBe(204);
      expect(deliveries).toHaveLength(1);
    });
  });

  it('answers a correctly signed body that is not JSON with 400 naming the body, not a signature failure, and keeps it', async () => {
    const unread: { raw: string; reason: string }[] = [];
    await withReceiver({ onUnreadable: async (raw, reason) => void unread.push({ raw, reason }) }, async (url, deliveries) => {
      // Cut off, and JSON behind a byte-order mark: both the service's, neither readable.
      const cut = '{"correlationId":corr-1,';
      const marked = `\uFEFF${body}`;
      for (const notJson of [cut, marked]) {
        const res = await post(url, notJson, signed(notJson, `msg_${unread.length}`));
        expect(res.status).toBe(400);
        expect(res.problem).toMatchObject({ title: 'Bad request', detail: 'body is not JSON' });
      }
      expect(deliveries).toHaveLength(0);
      expect(unread).toEqual([
        { raw: cut, reason: 'body is not JSON' },
        { raw: marked, reason: 'body is not JSON' },
      ]);
    });
  });

  it('answers 500, and says so, a delivery refused that the store could not keep as a dead letter, so the service delivers it again', async () => {
    const said: { level: string; obj: object; msg: string }[] = [];
    const log = { warn: (obj: object, msg: string) => void said.push({ level: 'warn', obj, msg }), debug: (obj: object, msg: string) => void said.push({ level: 'debug', obj, msg }) };
    await withReceiver({ log, onUnreadable: () => Promise.reject(new Error('SQLITE_FULL: database or disk is full')) }, async (url, deliveries) => {
      const notJson = '{"correlationId":corr-1,';
      const res = await post(url, notJson, signed(notJson));
      expect([res.status, res.problem?.title]).toEqual([500, 'Not committed']);
      expect(deliveries).toHaveLength(0);
      expect(said).toEqual([{ level: 'warn', obj: { err: 'SQLITE_FULL: database or disk is full', status: 400 }, msg: 'webhook delivery refused and not kept as a dead letter: answered 500, to be delivered again' }]);
    });
  });

  it('has at most 32 deliveries of one connection in hand, answering those pipelined past them 429', async () => {
    let asked = 0;
    let release = () => {};
    const committed = new Promise<void>((resolve) => (release = resolve));
    // A commit that does not end while the test looks: a peer pipelining deliveries has them in hand.
    await withReceiver({ onDelivery: () => (asked++, committed) }, async (url) => {
      const delivery = `POST ${new URL(url).pathname} HTTP/1.1\r\nHost: x\r\n${Object.entries(signed(body)).map(([name, value]) => `${name}: ${value}\r\n`).join('')}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
      const said = rawRequest(url, delivery.repeat(500));
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(asked).toBe(32);
      release();
      const statuses = [...(await said).matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map(([, status]) => status);
      expect(statuses.slice(0, 33)).toEqual([...Array<string>(32).fill('204'), '429']);
    });
  });

  it('refuses a body altered after signing', async () => {
    await withReceiver({}, async (url, deliveries) => {
      const headers = signed(body);
      const res = await post(url, body.replace('PPO', 'HMO'), headers);
      expect(res.status).toBe(401);
      expect(res.problem?.detail).toBe('webhook-signature: no matching signature found');
      expect(deliveries).toHaveLength(0);
    });
  });

  it('takes a delivery signed with the secret being replaced while it is rotated, and none signed with another', async () => {
    const previous = `whsec_${Buffer.from('the-secret-before-this-one-here!').toString('base64')}`;
    const other = `whsec_${Buffer.from('a-secret-nobody-configured-here!').toString('base64')}`;
    await withReceiver({ auth: { scheme: 'standard-webhooks', secret, previousSecret: previous } }, async (url, deliveries) => {
      expect((await post(url, body, signed(body, 'msg_new'))).status).toBe(204);
      expect((await post(url, body, signed(body, 'msg_old', new Date(), previous))).status).toBe(204);
      const forged = await post(url, body, signed(body, 'msg_other', new Date(), other));
      expect([forged.status, forged.problem?.detail]).toEqual([401, 'webhook-signature: no matching signature found']);
      expect(deliveries.map((d) => d.webhookId)).toEqual(['msg_new', 'msg_old']);
    });
    // Without it, the replaced secret's deliveries are refused.
    await withReceiver({}, async (url) => expect((await post(url, body, signed(body, 'msg_old', new Date(), previous))).status).toBe(401));
    expect(() => createWebhookHandler({ auth: { scheme: 'standard-webhooks', secret, previousSecret: 'whsec_!' }, onDelivery: async () => undefined })).toThrow(notAWebhookSecret('webhook.previousSecret'));
  });

  it('refuses a stale timestamp even with a valid signature', async () => {
    await withReceiver({}, async (url) => {
      const res = await post(url, body, signed(body, 'msg_2', new Date(Date.now() - 10 * 60_000)));
      expect(res.status).toBe(401);
      expect(res.problem?.detail).toBe('webhook-signature: message timestamp too old');
    });
  });

  it('says in its warning why it refused a delivery, as it told the sender, so a skewed clock, a rotated secret and dropped headers are told apart', async () => {
    const said: string[] = [];
    const log = { warn: (_: object, msg: string) => void said.push(msg), debug: () => undefined };
    const other = `whsec_${Buffer.from('a-secret-nobody-configured-here!').toString('base64')}`;
    await withReceiver({ log }, async (url) => {
      await post(url, body, signed(body, 'msg_stale', new Date(Date.now() - 10 * 60_000)));
      await post(url, body, signed(body, 'msg_other', new Date(), other));
      await post(url, body, { 'content-type': 'application/json' });
    });
    expect(said).toEqual([
      'webhook delivery refused: webhook-signature: message timestamp too old',
      'webhook delivery refused: webhook-signature: no matching signature found',
      'webhook delivery refused: webhook-id header is missing',
    ]);
  });

  it('refuses a delivery without signature headers', async () => {
    await withReceiver({}, async (url) => {
      const res = await post(url, body, { 'content-type': 'application/json' });
      expect(res.status).toBe(401);
      expect(res.problem?.detail).toBe('webhook-id header is missing');
    });
  });

  it('refuses an unknown correlation id', async () => {
    await withReceiver({}, async (url, deliveries) => {
      const other = body.replace('corr-1', 'corr-unknown');
      const res = await post(url, other, signed(other));
      expect(res.status).toBe(404);
      expect(res.problem?.detail).toBe('correlationId is not one this plugin requested');
      expect(deliveries).toHaveLength(0);
    });
  });

  it('answers 422 naming the field for a body that is not a verification', async () => {
    await withReceiver({}, async (url) => {
      const bad = JSON.stringify({ status: 'Completed' });
      const res = await post(url, bad, signed(bad));
      expect(res.status).toBe(422);
      expect(res.problem?.errors).toEqual([expect.objectContaining({ field: 'correlationId' })]);
    });
  });

  it('cuts the inline passwords it is given out of a delivery before keeping or reading it, however the JSON escapes them', async () => {
    const unread: string[] = [];
    await withReceiver({ secrets: ['pass/55'], onUnreadable: async (raw) => void unread.push(raw) }, async (url, deliveries) => {
      // A Failed result quoting the portal login; a JSON writer may escape its slash.
      const failed = `{"correlationId":"corr-1","status":"Failed","result":{"type":"https://api.example/problems/InvalidCredentials","title":"Invalid credentials","detail":"login office1/pass\\/55 refused","upstreamErrors":[{"detail":"password pass/55 expired"}]}}`;
      expect((await post(url, failed, signed(failed))).status).toBe(204);
      const [delivery] = deliveries;
      expect(delivery?.outcome.kind === 'failed' && delivery.outcome.problem.detail).toBe('login office1/[redacted] refused');
      expect(JSON.stringify(delivery?.outcome)).not.toContain('55');
      expect(delivery?.rawBody).not.toContain('55');
      // One it cannot read is kept as a dead letter: without the password too.
      const bad = JSON.stringify({ correlationId: 'corr-1', status: 'Completed', result: 'pass/55' });
      expect((await post(url, bad, signed(bad, 'msg_2'))).status).toBe(422);
      expect(unread).toHaveLength(1);
      expect(unread[0]).not.toContain('pass/55');
    });
  });

  it('answers 422 naming the element for a result that is no result, and commits nothing', async () => {
    await withReceiver({}, async (url, deliveries) => {
      const bad = JSON.stringify({ correlationId: 'corr-1', status: 'Completed', result: ['lots'] });
      const res = await post(url, bad, signed(bad));
      expect(res.status).toBe(422);
      expect(res.problem?.errors).toEqual([{ field: 'result', code: 'invalid_value', message: expect.any(String) }]);
      expect(deliveries).toHaveLength(0);
    });
  });

  it('takes a result with values it cannot read, which are left out of it and kept, named by where they were', async () => {
    await withReceiver({}, async (url, deliveries) => {
      const odd = JSON.stringify({ correlationId: 'corr-1', status: 'Completed', result: { data: { maximums: 'lots', deductibles: [{ amount: 50 }] } } });
      expect((await post(url, odd, signed(odd))).status).toBe(204);
      const outcome = deliveries[0]?.outcome;
      expect(outcome?.kind === 'completed' && [outcome.result.data, outcome.unread]).toEqual([{ deductibles: [{ amount: 50 }] }, [{ path: 'result.data.maximums', value: 'lots' }]]);
    });
  });

  it('answers 500 when the result cannot be committed, so the service delivers again', async () => {
    await withReceiver(
      {
        onDelivery: async () => {
          throw new Error('disk full');
        },
      },
      async (url) => {
        const res = await post(url, body, signed(body));
        expect(res.status).toBe(500);
        expect(res.problem?.title).toBe('Not committed');
      },
    );
  });

  it('refuses a body over the size limit', async () => {
    await withReceiver({ maxBodyBytes: 64 }, async (url) => {
      const res = await post(url, body, signed(body));
      expect(res.status).toBe(413);
    });
  });

  it('accepts a static bearer token instead of a signature when configured so', async () => {
    await withReceiver({ auth: { scheme: 'bearer', token: 'tok-abc' } }, async (url, deliveries) => {
      for (const authorization of ['Bearer tok-wrong', 'Bearer tok-abcd', 'tok-abc', 'Basic tok-abc']) expect((await post(url, body, { authorization })).status).toBe(401);
      // The scheme in any case, and one space or more after it, as RFC 9110 has it.
      expect((await post(url, body, { authorization: 'bearer tok-abc' })).status).toBe(204);
      expect((await post(url, body, { authorization: 'Bearer   tok-abc' })).status).toBe(204);
      expect((await post(url, body, { authorization: 'Bearer tok-abc' })).status).toBe(204);
      expect(deliveries[0]?.webhookId).toBe('corr-1:Completed');
    });
  });

  it(`has at most ${HTTP_MAX_CONNECTIONS} connections open, as serve's listener has, closing those past them and saying so once`, async () => {
    const warned: string[] = [];
    const log = { warn: (_obj: object, msg: string) => void warned.push(msg), debug: () => undefined };
    await withReceiver({ log }, async (url) => {
      const { hostname, port } = new URL(url);
      const idle = Array.from({ length: HTTP_MAX_CONNECTIONS }, () => connect(Number(port), hostname));
      try {
        await Promise.all(idle.map((socket) => once(socket, 'connect')));
        // The receiver faces the service, often beyond this machine: idle connections past the cap spent the embedder's file descriptors.
        // Each probe on a connection of its own: one the receiver took before the last idle one, kept alive, would be answered again and again.
        await until('a connection past the cap closed', async () => (await post(url, body, signed(body), { reset: true }).then(() => 'answered', () => 'closed')) === 'closed');
        expect(warned.filter((msg) => msg.includes('HTTP connection refused: too many open'))).toHaveLength(1);
        idle.pop()?.destroy();
        await until('a place free again', async () => (await post(url, body, signed(body)).then((res) => res.status, () => 0)) === 204);
      } finally {
        for (const socket of idle) socket.destroy();
      }
    });
  });

  it('answers a request target that is no URL path, such as //, and receives on', async () => {
    await withReceiver({}, async (url) => {
      // new URL threw on it in the request listener, which ended the embedder's process.
      expect((await rawRequest(url, NO_URL_PATH)).split('\r\n')[0]).toBe('HTTP/1.1 404 Not Found');
      expect((await fetch(url, { method: 'POST', body: 'x' })).status).toBeGreaterThanOrEqual(400);
    });
  });

  it('rejects, started on a port another holds, rather than leave the listen error to end the embedder\'s process', async () => {
    await withReceiver({}, async (url) => {
      const taken = Number(new URL(url).port);
      const second = startWebhookServer({ auth: { scheme: 'standard-webhooks', secret }, onDelivery: async () => undefined, port: taken });
      await expect(second).rejects.toMatchObject({ code: 'EADDRINUSE' });
    });
  });

  it('names the secret or token an embedder left empty or mistyped, when the receiver is made', () => {
    const receiver = (auth: WebhookReceiverOptions['auth']) => () => createWebhookHandler({ auth, isKnownCorrelationId: () => true, onDelivery: async () => undefined });
    expect(receiver({ scheme: 'standard-webhooks', secret: '' })).toThrow(/^webhook\.secret: must be a Standard Webhooks secret, whsec_ followed by base64$/);
    expect(receiver({ scheme: 'standard-webhooks', secret: 'whsec_not base64!' })).toThrow(/^webhook\.secret: must be a Standard Webhooks secret/);
    // The standardwebhooks library takes the base64 alone too; serve and the sandbox do not, nor does the receiver.
    expect(receiver({ scheme: 'standard-webhooks', secret: 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' })).toThrow(/^webhook\.secret: must be a Standard Webhooks secret, whsec_ followed by base64$/);
    expect(receiver({ scheme: 'bearer', token: '' })).toThrow(/^webhook\.token: is required$/);
    // From JavaScript or a JSON file: a token that is no text, no auth at all, a previous secret mistyped.
    expect(receiver({ scheme: 'bearer', token: 12345 } as unknown as WebhookReceiverOptions['auth'])).toThrow(/^webhook\.token: must be a string$/);
    expect(receiver(undefined as unknown as WebhookReceiverOptions['auth'])).toThrow(/^webhook: must be standard-webhooks or bearer$/);
    expect(receiver({ scheme: 'standard-webhooks', secret, previousSecret: 'whsec_' })).toThrow(/^webhook\.previousSecret: must be a Standard Webhooks secret, whsec_ followed by base64$/);
    expect(receiver({ scheme: 'standard-webhooks', secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' })).not.toThrow();
  });

  it('refuses a scheme it does not know when the receiver is made, rather than taking deliveries unchecked', async () => {
    // A JavaScript embedder, or auth read from a JSON file, passes what TypeScript would have refused.
    const auth = { scheme: 'standard-webhook', secret } as unknown as WebhookReceiverOptions['auth'];
    expect(() => createWebhookHandler({ auth, onDelivery: async () => undefined })).toThrow(/^webhook\.scheme: must be standard-webhooks or bearer$/);
    expect(() => createWebhookHandler({ auth: { scheme: 'Bearer', token: 'tok' } as unknown as WebhookReceiverOptions['auth'], onDelivery: async () => undefined })).toThrow(/^webhook\.scheme: /);
    // The message does not repeat what was given.
    expect(() => createWebhookHandler({ auth, onDelivery: async () => undefined })).not.toThrow(/standard-webhook[^s]/);
  });

  it('refuses a key its scheme does not take when the receiver is made, rather than dropping it', () => {
    const receiver = (auth: unknown) => () => createWebhookHandler({ auth: auth as WebhookReceiverOptions['auth'], onDelivery: async () => undefined });
    // A rotation's secret misspelt from JavaScript: deliveries the service still signs with it would be refused 401.
    expect(receiver({ scheme: 'standard-webhooks', secret, previousSecrets: secret })).toThrow(/^webhook: Unrecognized key: "previousSecrets"$/);
    expect(receiver({ scheme: 'bearer', token: 'tok', previousSecret: secret })).toThrow(/^webhook: Unrecognized key: "previousSecret"$/);
    expect(receiver({ scheme: 'standard-webhooks', secret, previousSecret: undefined })).not.toThrow();
  });

  it('says of a bad secret what the sandbox and serve say of theirs, each naming its own setting', () => {
    const refusal = (run: () => unknown) => {
      try {
        run();
      } catch (err) {
        return (err as Error).message;
      }
      return 'not refused';
    };
    for (const secret of ['whsec_not base64!', 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw']) {
      const library = refusal(() => createWebhookHandler({ auth: { scheme: 'standard-webhooks', secret }, onDelivery: async () => undefined }));
      expect(library).toBe(notAWebhookSecret());
      expect(refusal(() => checkWebhookConfig({ url: 'http://127.0.0.1:9/x', secret }))).toBe(library);
      expect(refusal(() => loadServeConfig({ DENTAL_ELIG_WEBHOOK_SECRET: secret }, {}))).toBe(library.replace(/^webhook\.secret:/, 'DENTAL_ELIG_WEBHOOK_SECRET:'));
    }
  });
});
