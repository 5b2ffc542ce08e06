import { request } from 'undici';
import { startSandbox, type Sandbox } from '../../src/sandbox';
import { NO_URL_PATH, rawRequest } from '../support/http-server';
import { call, FAST, verificationBody } from './helpers';

let sb: Sandbox;
beforeEach(async () => {
  sb = await startSandbox({ timing: FAST, seed: true });
});
afterEach(() => sb.close());

test('503 twice, then the real answer (a client retrying a GET)', async () => {
  sb.injectFault({ method: 'GET', path: '/v2/network/payers', status: 503, times: 2, retryAfterSeconds: 1 });
  const first = await call(sb, 'GET', '/v2/network/payers');
  expect(first.status).toBe(503);
  expect(first.headers['retry-after']).toBe('1');
  expect(first.headers['content-type']).toBe('application/problem+json');
  expect((await call(sb, 'GET', '/v2/network/payers')).status).toBe(503);
  expect((await call(sb, 'GET', '/v2/network/payers')).status).toBe(200);
  expect(sb.requestLog.map((r) => r.status)).toEqual([503, 503, 200]);
});

test('a body that is not problem details: a proxy HTML page, an empty body', async () => {
  sb.injectFault({ path: /^\/v2\/clinics\//, status: 502, body: '<html><body>Bad Gateway</body></html>' });
  sb.injectFault({ path: '/v2/organizations', status: 500, body: '', contentType: 'text/plain' });
  const html = await call(sb, 'GET', '/v2/clinics/cln_sandbox_main');
  expect(html).toMatchObject({ status: 502, body: expect.stringContaining('Bad Gateway') });
  expect(html.headers['content-type']).toBe('text/html');
  const empty = await call(sb, 'POST', '/v2/organizations', { customerId: sb.customerId, name: 'x' });
  expect(empty).toMatchObject({ status: 500, body: undefined });
  expect((await call(sb, 'GET', '/v2/clinics/cln_sandbox_main')).status).toBe(200);
});

test('a connection reset, and a delay long enough for a client timeout', async () => {
  sb.injectFault({ path: '/v2/network/portals', reset: true });
  await expect(call(sb, 'GET', '/v2/network/portals')).rejects.toThrow();
  expect((await call(sb, 'GET', '/v2/network/portals')).status).toBe(200);

  sb.injectFault({ path: '/v2/network/portals', delayMs: 500 });
  await expect(
    request(`${sb.url}/v2/network/portals`, { headers: { authorization: `Bearer ${sb.apiKey}` }, signal: AbortSignal.timeout(100) }),
  ).rejects.toThrow(/abort|timeout/i);
  const started = Date.now();
  sb.injectFault({ path: '/v2/network/portals', delayMs: 100 });
  expect((await call(sb, 'GET', '/v2/network/portals')).status).toBe(200);
  expect(Date.now() - started).toBeGreaterThanOrEqual(95);
});

test('the request log holds method, path and status, never a key or a body', async () => {
  await call(sb, 'POST', '/v2/insurance-verifications', { patient: { firstName: 'Ellen' } });
  const log = JSON.stringify(sb.requestLog);
  expect(sb.requestLog).toEqual([expect.objectContaining({ method: 'POST', path: '/v2/insurance-verifications', status: 422 })]);
  expect(log).not.toContain(sb.apiKey);
  expect(log).not.toContain('Ellen');
});

test('close() leaves nothing running: pending completions and webhook retries are dropped', async () => {
  const other = await startSandbox({
    timing: { ...FAST, asyncCompletionMs: 10, webhookBackoffMs: 60_000 },
    seed: true,
    webhook: { url: 'http://127.0.0.1:9/unreachable' },
  });
  expect((await call(other, 'POST', '/v2/insurance-verification-requests', verificationBody('DD1'))).status).toBe(201);
  expect((await call(other, 'POST', '/v2/insurance-verification-requests', verificationBody('DD2'))).status).toBe(201);
  // The first verification's delivery fails once and waits a minute to try again.
  for (let i = 0; i < 200 && other.webhookDeliveries()[0]?.attempts.length !== 1; i++) await new Promise((r) => setTimeout(r, 10));
  expect(other.webhookDeliveries()[0]?.attempts).toHaveLength(1);
  const closing = Date.now();
  await other.close();
  await other.settle();
  expect(Date.now() - closing).toBeLessThan(2000);
  expect(other.webhookDeliveries()[0]?.attempts).toHaveLength(1);
  expect(other.webhookDeliveries()[0]?.state).not.toBe('delivered');
});

test('a webhook secret that is not whsec_<base64> is refused when configured, naming the field', async () => {
  expect(() => sb.configureWebhook({ url: 'http://127.0.0.1:9/x', secret: 'my-shared-secret!' })).toThrow(
    'webhook.secret: must be a Standard Webhooks secret, whsec_ followed by base64',
  );
  const started = startSandbox({ webhook: { url: 'http://127.0.0.1:9/x', secret: 'not base64!' } });
  await expect(started).rejects.toThrow('webhook.secret');
  await started.then((s) => s.close()).catch(() => undefined);
});

test('a request target that is no URL path, such as //, is answered, and the sandbox serves on', async () => {
  // new URL threw on it in the request's handler, a rejection nobody caught, which ended the process.
  expect((await rawRequest(sb.url, NO_URL_PATH)).split('\r\n')[0]).toMatch(/^HTTP\/1\.1 4\d\d /);
  expect((await request(`${sb.url}/v2/network/payers`, { headers: { authorization: `Bearer ${sb.apiKey}` } })).statusCode).toBe(200);
});
