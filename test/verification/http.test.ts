import { inspect } from 'node:util';
import { VerificationClient } from '../../src/verification/client';
import { isLoopbackHost } from '../../src/url-checks';
import { ServiceError, UNREADABLE_ANSWER } from '../../src/verification/errors';
import { ConfigError } from '../../src/config-error';
import { ServiceHttp, retryAfterMs, retryDelay, versionlessRoot, type Log } from '../../src/verification/http';
import { validationKindOf } from '../../src/verification/outcome';
import { portalsOf } from '../../src/verification/payer-catalog';
import { Organization, Verification } from '../../src/verification/wire';
import { json, startScriptedServer } from '../support/http-server';
import { toCliError } from '../../src/cli/service-context';

const fast = { retryMinDelayMs: 5, retryMaxDelayMs: 50 };
/** A verification sent with inline portal credentials. */
const INLINE_REQUEST = {
  credentials: { username: 'office1', password: 'inline-pass-55' },
  payer: { payerId: 'CDCA1' },
  patient: { firstName: 'Ellen', lastName: 'Whitaker', dateOfBirth: '1978-03-14' },
  subscriber: { firstName: 'Ellen', lastName: 'Whitaker', memberId: 'DD1', relationship: 'Self' as const },
  dateOfService: '2026-12-01',
};

function recordingLog(): Log & { warnings: string[] } {
  const warnings: string[] = [];
  return { warnings, warn: (_o, msg) => warnings.push(msg), debug: () => undefined };
}

describe('ServiceHttp', () => {
  it('sends the API key as a bearer token by default, or in a configured header', async () => {
    const server = await startScriptedServer((_r, res) => json(res, 200, { organizationId: 'org_1' }));
    const bearer = new ServiceHttp({ baseUrl: server.url, apiKey: 'k-123' });
    const custom = new ServiceHttp({ baseUrl: server.url, apiKey: 'k-456', apiKeyHeader: 'X-Api-Key', apiKeyScheme: '' });
    try {
      await bearer.call({ operation: 'get', method: 'GET', path: '/v2/organizations/org_1', response: Organization, idempotent: true });
      await custom.call({ operation: 'get', method: 'GET', path: '/v2/organizations/org_1', response: Organization, idempotent: true });
      expect(server.requests[0]?.headers.authorization).toBe('Bearer k-123');
      expect(server.requests[1]?.headers['x-api-key']).toBe('k-456');
      expect(server.requests[1]?.headers.authorization).toBeUndefined();
    } finally {
      await Promise.all([bearer.close(), custom.close(), server.close()]);
    }
  });

  it('retries an idempotent POST on 503 twice, then returns the 201', async () => {
    const server = await startScriptedServer((_r, res, i) =>
      i < 2 ? json(res, 503, { title: 'Service Unavailable', status: 503 }) : json(res, 201, { correlationId: 'c1', status: 'Completed' }),
    );
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k', ...fast });
    try {
      const r = await http.call({ operation: 'verify', method: 'POST', path: '/v2/insurance-verifications', body: { externalId: 'e1' }, response: Verification, idempotent: true });
      expect(r.status).toBe(201);
      expect(r.body?.correlationId).toBe('c1');
      expect(server.requests).toHaveLength(3);
      expect(server.requests.map((q) => q.body)).toEqual(Array(3).fill('{"externalId":"e1"}'));
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('does not repeat a POST that is not idempotent, and surfaces the 503 as a ServiceError', async () => {
    const server = await startScriptedServer((_r, res) => json(res, 503, { type: 'https://e.example/Unavailable', title: 'Unavailable', status: 503, detail: 'try later' }));
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k', ...fast });
    try {
      const err = await http
        .call({ operation: 'create organization', method: 'POST', path: '/v2/organizations', body: {}, response: Organization, idempotent: false })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ServiceError);
      expect((err as ServiceError).status).toBe(503);
      expect((err as ServiceError).problem.detail).toBe('try later');
      expect((err as ServiceError).message).toBe('create organization failed with 503 - Unavailable: try later');
      expect(server.requests).toHaveLength(1);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('repeats a POST that is not idempotent after a 429, which the service turned away before doing it', async () => {
    const server = await startScriptedServer((_r, res, i) => (i < 1 ? json(res, 429, { title: 'Too Many Requests', status: 429 }, { 'retry-after': '0' }) : json(res, 201, { organizationId: 'org_1', name: 'x' })));
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k', ...fast });
    try {
      const r = await http.call({ operation: 'create organization', method: 'POST', path: '/v2/organizations', body: { name: 'x' }, response: Organization, idempotent: false });
      expect([r.status, server.requests.map((q) => q.body)]).toEqual([201, ['{"name":"x"}', '{"name":"x"}']]);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('honours Retry-After on 429 and gives up after maxRetries with the last problem', async () => {
    const server = await startScriptedServer((_r, res) => json(res, 429, { title: 'Too Many Requests', status: 429 }, { 'retry-after': '1' }));
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k', maxRetries: 1, retryMinDelayMs: 1, retryMaxDelayMs: 2000 });
    try {
      const started = Date.now();
      const err = (await http
        .call({ operation: 'list', method: 'GET', path: '/v2/network/payers', response: Organization, idempotent: true })
        .catch((e: unknown) => e)) as ServiceError;
      expect(Date.now() - started).toBeGreaterThanOrEqual(950);
      expect(err.status).toBe(429);
      expect(server.requests).toHaveLength(2);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('turns a 422 into a ServiceError with the field errors', async () => {
    const problem = { type: 'https://e.example/validation', title: 'Validation failed', status: 422, errors: [{ field: 'customerId', message: 'is required', code: 'required' }] };
    const server = await startScriptedServer((_r, res) => json(res, 422, problem));
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k' });
    try {
      const err = (await http
        .call({ operation: 'create organization', method: 'POST', path: '/v2/organizations', body: {}, response: Organization, idempotent: false })
        .catch((e: unknown) => e)) as ServiceError;
      expect(err.status).toBe(422);
      expect(err.fieldErrors).toEqual(['customerId: is required']);
      expect(err.problem.errors?.[0]?.code).toBe('required');
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('says what each upstream source said in the message of an error answer, once', async () => {
    const server = await startScriptedServer((_req, res) =>
      json(res, 503, { title: 'Service Unavailable', detail: 'One or more sources failed: clearinghouse down', upstreamErrors: [{ detail: 'Delta portal under maintenance', portalId: 'deltadentalins' }, { detail: 'clearinghouse down' }, {}] }),
    );
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k', maxRetries: 0 });
    try {
      const err = (await client.verify({ ...INLINE_REQUEST, externalId: 'ext-up' }).catch((e: unknown) => e)) as ServiceError;
      expect(err.message).toBe('verify insurance failed with 503 - Service Unavailable: One or more sources failed: clearinghouse down - upstream: Delta portal under maintenance');
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('cuts the API key and the portal passwords it sent out of problem details that quote them', async () => {
    // A service that quotes what it was sent: the key it refused, the body it could not take.
    const server = await startScriptedServer((req, res) =>
      json(res, 422, {
        title: `Unprocessable for ${req.headers.authorization ?? ''}`,
        detail: `could not process ${req.body}`,
        upstreamErrors: [{ detail: `portal refused ${req.body}` }],
        errors: [{ field: 'password', message: `'${(JSON.parse(req.body) as { password?: string }).password ?? 'inline'}' is too short`, code: 'invalid_value' }],
      }),
    );
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'sk_live_key-7731' });
    try {
      const errors = [
        await client.createCredentials('cl_1', 'metdental', { username: 'office1', password: 'stored-pass-42', loginMethod: 'Native' }).catch((e: unknown) => e),
        await client.verify(INLINE_REQUEST).catch((e: unknown) => e),
      ] as ServiceError[];
      for (const err of errors) {
        expect(err).toBeInstanceOf(ServiceError);
        const shown = `${err.message} ${JSON.stringify(err.problem)}`;
        for (const secret of ['sk_live_key-7731', 'stored-pass-42', 'inline-pass-55']) expect(shown).not.toContain(secret);
        expect(err.problem.title).toBe('Unprocessable for Bearer [redacted]');
      }
      expect(errors[0]?.fieldErrors).toEqual(["password: '[redacted]' is too short"]);
      expect(errors[1]?.problem.detail).toContain('"credentials":{"username":"office1","password":"[redacted]"}');
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('cuts an inline password out of a Failed result that quotes it: the answer to its own send, and a later poll\'s', async () => {
    // The portal's refusal of the login, quoted: in the answer to the send, and again when the verification is polled.
    const failed = (password: string) => ({
      correlationId: 'ver_quote',
      status: 'Failed',
      result: { type: 'https://api.example/problems/InvalidCredentials', title: 'Invalid credentials', detail: `login office1/${password} refused`, upstreamErrors: [{ detail: `password ${password} expired` }] },
    });
    const server = await startScriptedServer((_req, res) => json(res, 200, failed('inline-pass-55')));
    const sent = new VerificationClient({ baseUrl: server.url, apiKey: 'sk_live_key-7731' });
    // The poll carries no password: the client is told the inline ones it may have sent before.
    const polling = new VerificationClient({ baseUrl: server.url, apiKey: 'sk_live_key-7731' }, { secrets: ['inline-pass-55'] });
    const unaware = new VerificationClient({ baseUrl: server.url, apiKey: 'sk_live_key-7731' });
    try {
      for (const outcome of [await sent.verify(INLINE_REQUEST), await polling.getVerification('ver_quote')]) {
        expect(outcome.kind).toBe('failed');
        expect(JSON.stringify(outcome)).not.toContain('inline-pass-55');
        expect(outcome.kind === 'failed' && outcome.problem.detail).toBe('login office1/[redacted] refused');
      }
      // Told nothing, a poll cannot know what to cut: the reason the sync gives its client the inline passwords.
      expect(JSON.stringify(await unaware.getVerification('ver_quote'))).toContain('inline-pass-55');
    } finally {
      await Promise.all([sent.close(), polling.close(), unaware.close(), server.close()]);
    }
  });

  it('refuses an answer over 16 MB as it arrives, saying so, rather than hold it whole', async () => {
    const server = await startScriptedServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`{"correlationId":"ver_big","status":"Completed","result":{"plan":{"name":"${'x'.repeat(17 * 1024 * 1024)}"}}}`);
    });
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'sk_live_key-7731', maxRetries: 0 });
    try {
      const err = (await client.getVerification('ver_big').catch((e: unknown) => e)) as ServiceError;
      expect(err).toBeInstanceOf(ServiceError);
      expect([err.code, err.problem.title]).toEqual(['UND_ERR_RES_EXCEEDED_MAX_SIZE', 'Answer over 16 MB, not read']);
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('cuts a password out of the JSON a service quotes, where its quotes and backslashes are escaped', async () => {
    const server = await startScriptedServer((req, res) => json(res, 422, { title: 'Unprocessable', detail: `could not process ${req.body}` }));
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'sk_live_key-7731' });
    try {
      const err = (await client.createCredentials('cl_1', 'metdental', { username: 'office1', password: 'say "open"\\sesame', loginMethod: 'Native' }).catch((e: unknown) => e)) as ServiceError;
      expect(err.problem.detail).toBe('could not process {"username":"office1","password":"[redacted]","loginMethod":"Native"}');
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('cuts a password out of problem details whose serializer writes its quotes, <>&+ and non-ASCII as \\uXXXX, in either case', async () => {
    const password = 'say "open" <é> & 😀';
    const asDotNet = 'say \\u0022open\\u0022 \\u003C\\u00E9\\u003E \\u0026 \\uD83D\\uDE00';
    const server = await startScriptedServer((_r, res, i) =>
      json(res, 422, { title: 'Unprocessable', detail: `password "${i === 0 ? asDotNet : asDotNet.toLowerCase()}" is not accepted` }),
    );
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'sk_live_key-7731' });
    try {
      for (let i = 0; i < 2; i++) {
        const err = (await client.createCredentials('cl_1', 'metdental', { username: 'office1', password, loginMethod: 'Native' }).catch((e: unknown) => e)) as ServiceError;
        expect(err.problem.detail).toBe('password "[redacted]" is not accepted');
      }
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it("names the request to report a 500 with: the x-request-id header's, or the correlationId its problem details carry", async () => {
    const server = await startScriptedServer((_r, res, i) =>
      i === 0
        ? json(res, 500, { title: 'Internal Server Error', status: 500 }, { 'x-request-id': 'req-77' })
        : json(res, 500, { title: 'Internal Server Error', status: 500, correlationId: 'corr-88' }),
    );
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k', maxRetries: 0, ...fast });
    const failure = () => http.call({ operation: 'get verification', method: 'GET', path: '/v2/insurance-verifications/v1', response: Verification, idempotent: true }).catch((err: unknown) => err);
    try {
      const [byHeader, byBody] = [await failure(), await failure()];
      expect([byHeader instanceof ServiceError && byHeader.requestId, byBody instanceof ServiceError && byBody.requestId]).toEqual(['req-77', 'corr-88']);
      expect(toCliError(byBody as ServiceError).message).toMatch(/\(report request id corr-88\)/);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('gives a clear error for a body that is not problem details: HTML from a proxy, or nothing', async () => {
    const server = await startScriptedServer((_r, res, i) => {
      if (i === 0) {
        res.writeHead(502, { 'content-type': 'text/html' });
        res.end('<html><body>Bad gateway</body></html>');
      } else {
        res.writeHead(404);
        res.end();
      }
    });
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k', maxRetries: 0 });
    try {
      const call = () => http.call({ operation: 'get clinic', method: 'GET', path: '/v2/clinics/x', response: Organization, idempotent: true });
      const html = (await call().catch((e: unknown) => e)) as ServiceError;
      expect(html.status).toBe(502);
      expect(html.message).toBe(`get clinic failed with 502 - HTTP 502: GET ${server.url}/v2/clinics/x answered with a text/html body, not problem details`);
      const empty = (await call().catch((e: unknown) => e)) as ServiceError;
      expect(empty.status).toBe(404);
      expect(empty.problem.detail).toBe(`GET ${server.url}/v2/clinics/x answered with an empty body, not problem details`);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('normalises a v1 error body (details.code/message) with a warning', async () => {
    const server = await startScriptedServer((_r, res) => json(res, 404, { details: { code: 'NotFound', message: 'no such clinic' } }));
    const log = recordingLog();
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k' }, { log });
    try {
      const err = (await http
        .call({ operation: 'get clinic', method: 'GET', path: '/v2/clinics/x', response: Organization, idempotent: true })
        .catch((e: unknown) => e)) as ServiceError;
      expect(err.problem).toMatchObject({ type: 'urn:v1-error:NotFound', title: 'NotFound', detail: 'no such clinic', status: 404 });
      expect(log.warnings).toEqual(['v1 error shape (details.code/details.message) normalised to problem details']);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('times out a silent server, retries a GET with a warning, and reports the timeout naming the URL', async () => {
    const server = await startScriptedServer(() => undefined /* never answers */);
    const log = recordingLog();
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k', timeoutMs: 150, maxRetries: 1, ...fast }, { log });
    try {
      const err = (await http
        .call({ operation: 'get clinic', method: 'GET', path: '/v2/clinics/x', response: Organization, idempotent: true })
        .catch((e: unknown) => e)) as ServiceError;
      expect(err).toBeInstanceOf(ServiceError);
      expect(err.status).toBeUndefined();
      expect(err.code).toBe('UND_ERR_HEADERS_TIMEOUT');
      expect(err.message).toBe(`get clinic failed (UND_ERR_HEADERS_TIMEOUT) - Timed out: GET ${server.url}/v2/clinics/x (after 1 retry)`);
      expect(server.requests).toHaveLength(2);
      expect(log.warnings).toEqual([expect.stringMatching(new RegExp(`^get clinic: GET ${server.url}/v2/clinics/x timed out \\(UND_ERR_HEADERS_TIMEOUT\\); retry 1 of 1 in \\d+\\.\\d s$`))]);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('says a create that timed out or lost its connection may have been done, which it does not repeat, and not of one never sent', async () => {
    const silent = await startScriptedServer(() => undefined /* never answers */);
    const cut = await startScriptedServer((_r, res) => {
      res.socket?.destroy();
    });
    const create = async (url: string) => {
      const http = new ServiceHttp({ baseUrl: url, apiKey: 'k', timeoutMs: 150, ...fast });
      try {
        return await http
          .call({ operation: 'create organization', method: 'POST', path: '/v2/organizations', body: { name: 'x' }, response: Organization, idempotent: false })
          .catch((e: unknown) => (e as ServiceError).message);
      } finally {
        await http.close();
      }
    };
    try {
      expect(await create(silent.url)).toBe(`create organization failed (UND_ERR_HEADERS_TIMEOUT) - Timed out: POST ${silent.url}/v2/organizations; it may have been done all the same: look before trying again`);
      expect(await create(cut.url)).toMatch(/ - Connection closed by the other side: POST \S+; it may have been done all the same: look before trying again$/);
      expect([silent.requests.length, cut.requests.length]).toEqual([1, 1]);
    } finally {
      await Promise.all([silent.close(), cut.close()]);
    }
    // Nothing listens: nothing was sent.
    expect(await create(cut.url)).toBe(`create organization failed (ECONNREFUSED) - Connection refused: POST ${cut.url}/v2/organizations`);
  });

  it('says an https URL reached a server that speaks plain http, not just a network error', async () => {
    const server = await startScriptedServer((_r, res) => json(res, 200, {}));
    const http = new ServiceHttp({ baseUrl: server.url.replace('http:', 'https:'), apiKey: 'k', maxRetries: 0 });
    try {
      const err = (await http.call({ operation: 'get clinic', method: 'GET', path: '/v2/clinics/x', response: Organization, idempotent: true }).catch((e: unknown) => e)) as ServiceError;
      expect(err.message).toBe(`get clinic failed (ERR_SSL_WRONG_VERSION_NUMBER) - No TLS at this https URL (a plain http server there?): GET ${server.url.replace('http:', 'https:')}/v2/clinics/x`);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('retries a connection reset on a GET', async () => {
    const server = await startScriptedServer((_r, res, i) => {
      if (i === 0) res.socket?.destroy();
      else json(res, 200, { organizationId: 'org_9' });
    });
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k', ...fast });
    try {
      const r = await http.call({ operation: 'get', method: 'GET', path: '/v2/organizations/org_9', response: Organization, idempotent: true });
      expect(r.body?.organizationId).toBe('org_9');
      expect(server.requests).toHaveLength(2);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('keeps unknown response fields and rejects a 2xx body that lacks a required one', async () => {
    const server = await startScriptedServer((_r, res, i) => json(res, 200, i === 0 ? { organizationId: 'o1', region: 'west' } : { name: 'no id' }));
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k' });
    try {
      const call = () => http.call({ operation: 'get organization', method: 'GET', path: '/v2/organizations/o1', response: Organization, idempotent: true });
      expect((await call()).body).toEqual({ organizationId: 'o1', region: 'west' });
      const err = (await call().catch((e: unknown) => e)) as ServiceError;
      expect(err.message).toMatch(/^get organization failed with 200 - Unexpected response body: organizationId: /);
      expect([err.code, err.received]).toEqual([UNREADABLE_ANSWER, { name: 'no id' }]);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('says a 2xx body is not JSON, with its content type, rather than "received undefined"', async () => {
    const server = await startScriptedServer((_r, res) => void res.writeHead(200, { 'content-type': 'text/html' }).end('<html>proxy login</html>'));
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k' });
    try {
      const err = (await http.call({ operation: 'get organization', method: 'GET', path: '/v2/organizations/o1', response: Organization, idempotent: true }).catch((e: unknown) => e)) as ServiceError;
      expect(err.message).toBe('get organization failed with 200 - Unexpected response body: (body): not JSON (text/html)');
      expect([err.code, err.received]).toEqual([UNREADABLE_ANSWER, '<html>proxy login</html>']);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });
});

describe('ServiceHttp, what real networks and services send', () => {
  it('keeps the status of a 422 whose errors[] entries lack fields', async () => {
    const server = await startScriptedServer((_r, res) => json(res, 422, { title: 'Invalid', errors: [{ field: 'npi' }, { message: 'bad' }] }));
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k' });
    try {
      const err = (await http
        .call({ operation: 'create clinic', method: 'POST', path: '/v2/clinics', body: {}, response: Organization, idempotent: false })
        .catch((e: unknown) => e)) as ServiceError;
      expect(err).toBeInstanceOf(ServiceError);
      expect(err.status).toBe(422);
      expect(err.fieldErrors).toEqual(['npi: invalid', '(field): bad']);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('does not repeat a PATCH, even on 503', async () => {
    const server = await startScriptedServer((_r, res) => json(res, 503, { title: 'Unavailable' }));
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k', ...fast });
    try {
      const err = (await http
        .call({ operation: 'update credentials', method: 'PATCH', path: '/v2/clinics/c/portals/p/credentials', body: {}, response: Organization, idempotent: false })
        .catch((e: unknown) => e)) as ServiceError;
      expect(err.status).toBe(503);
      expect(server.requests).toHaveLength(1);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('answers at once when Retry-After asks for longer than it would ever wait, and says how long it asked', async () => {
    const server = await startScriptedServer((_r, res) => json(res, 503, { title: 'Down for maintenance' }, { 'retry-after': '3600' }));
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k', retryMinDelayMs: 5, retryMaxDelayMs: 1000 });
    try {
      const started = Date.now();
      const err = (await http
        .call({ operation: 'list', method: 'GET', path: '/v2/network/payers', response: Organization, idempotent: true })
        .catch((e: unknown) => e)) as ServiceError;
      expect(err.status).toBe(503);
      expect(err.retryAfterMs).toBe(3_600_000);
      expect(server.requests).toHaveLength(1);
      expect(Date.now() - started).toBeLessThan(900);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });

  it('asks again in full when an answer stalls or is cut off in the middle of its body: the service serves no byte ranges', async () => {
    for (const cut of ['stall', 'reset'] as const) {
      const server = await startScriptedServer((_r, res, i) => {
        const body = JSON.stringify({ organizationId: 'org_7', name: 'Lakeside Dental' });
        res.writeHead(i === 0 ? 200 : 201, { 'content-type': 'application/json', 'content-length': String(body.length) });
        if (i > 0) return void res.end(body);
        res.write(body.slice(0, 20));
        if (cut === 'reset') setTimeout(() => res.socket?.destroy(), 20);
      });
      const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k', timeoutMs: 200, ...fast });
      try {
        for (const method of ['GET', 'POST'] as const) {
          const r = await http.call({ operation: 'o', method, path: '/v2/organizations', ...(method === 'POST' && { body: { externalId: 'x' } }), response: Organization, idempotent: true });
          expect(r.body?.organizationId).toBe('org_7');
        }
        // The first answer of all was cut off; the repeat is a whole request, not a resume from byte 20.
        expect(server.requests.map((q) => [q.method, q.headers.range])).toEqual([
          ['GET', undefined],
          ['GET', undefined],
          ['POST', undefined],
        ]);
      } finally {
        await Promise.all([http.close(), server.close()]);
      }
    }
  });

  it('types a connection lost in the middle of the body', async () => {
    const server = await startScriptedServer((_r, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '200' });
      res.write('{"organizationId":');
      setTimeout(() => res.socket?.destroy(), 20);
    });
    const http = new ServiceHttp({ baseUrl: server.url, apiKey: 'k', maxRetries: 0 });
    try {
      const err = (await http
        .call({ operation: 'get organization', method: 'GET', path: '/v2/organizations/o', response: Organization, idempotent: true })
        .catch((e: unknown) => e)) as ServiceError;
      expect(err).toBeInstanceOf(ServiceError);
      expect(err.status).toBeUndefined();
      expect(err.message).toMatch(/^get organization failed \(\w+\) - Connection closed by the other side: GET http:\/\/127\.0\.0\.1:\d+\/v2\/organizations\/o$/);
    } finally {
      await Promise.all([http.close(), server.close()]);
    }
  });
});

describe('VerificationClient on a result it cannot read', () => {
  it('reports a ServiceError naming the element, not a parser failure', async () => {
    const server = await startScriptedServer((_r, res) => json(res, 201, { correlationId: 'c1', status: 'Completed', result: ['lots'] }));
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      const err = (await client.getVerification('c1').catch((e: unknown) => e)) as ServiceError;
      expect(err).toBeInstanceOf(ServiceError);
      expect(err.message).toMatch(/^get insurance verification failed \(unreadable_answer\) - Unexpected response body: result: /);
      expect(err.problem.errors?.[0]).toMatchObject({ field: 'result', code: 'invalid_value' });
      // What arrived is kept for the caller: asked again, the service would answer the same.
      expect(err.code).toBe(UNREADABLE_ANSWER);
      expect(err.received).toEqual({ correlationId: 'c1', status: 'Completed', result: ['lots'] });
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });
});

describe('retryDelay', () => {
  const limits = { retryMinDelayMs: 100, retryMaxDelayMs: 1000 };
  it('backs off exponentially with jitter between half and all of the step, capped', () => {
    expect(retryDelay(1, undefined, limits, () => 0)).toBe(50);
    expect(retryDelay(1, undefined, limits, () => 1)).toBe(100);
    expect(retryDelay(3, undefined, limits, () => 1)).toBe(400);
    expect(retryDelay(10, undefined, limits, () => 1)).toBe(1000);
  });
  it('waits at least as long as Retry-After asks, in seconds or as a date', () => {
    expect(retryDelay(1, retryAfterMs('2'), limits, () => 0)).toBe(2000);
    const inThree = new Date(Date.now() + 3000).toUTCString();
    expect(retryDelay(1, retryAfterMs(inThree), limits, () => 0)).toBeGreaterThan(1500);
  });
  it('reads a Retry-After past a year as a year, so the next attempt still has a date', () => {
    const year = 366 * 86_400_000;
    expect(retryAfterMs('1e300')).toBe(year);
    expect(retryAfterMs('99999999999999999999')).toBe(year);
    expect(retryAfterMs('Fri, 31 Dec 9999 23:59:59 GMT')).toBe(year);
    expect(() => new Date(Date.now() + (retryAfterMs('1e300') ?? 0)).toISOString()).not.toThrow();
    expect(retryAfterMs('-5')).toBe(0);
    expect(retryAfterMs('soon')).toBeUndefined();
  });
});

describe('versionlessRoot', () => {
  const log = recordingLog();
  it('uses the service root and warns about a /v1 base before its retirement', () => {
    expect(versionlessRoot('https://api.example.com/', new Date('2026-11-21T00:00:00Z'), log)).toBe('https://api.example.com');
    expect(versionlessRoot('https://api.example.com/v2', new Date('2026-11-21T00:00:00Z'), log)).toBe('https://api.example.com');
    expect(log.warnings).toEqual([]);
    expect(versionlessRoot('https://api.example.com/v1', new Date('2026-12-31T23:00:00Z'), log)).toBe('https://api.example.com');
    expect(log.warnings).toHaveLength(1);
    expect(log.warnings[0]).toMatch(/retired on 2026-12-31/);
  });
  it('refuses a /v1 base after 2026-12-31, as a setting that cannot be used', () => {
    expect(() => versionlessRoot('https://api.example.com/v1', new Date('2027-01-01T00:00:00Z'), log)).toThrow(
      'baseUrl: points at /v1, which was retired on 2026-12-31',
    );
    // The CLI answers a ConfigError with exit 2, as README says of a setting; any other error is an internal one (exit 1).
    expect(() => versionlessRoot('https://api.example.com/v1', new Date('2027-01-01T00:00:00Z'), log)).toThrow(ConfigError);
  });
});

describe('the API key and the transport', () => {
  const key = 'sk_live_do_not_show_1234';

  it('keeps the API key out of util.inspect and JSON.stringify of a client, while still sending it', async () => {
    const server = await startScriptedServer((_r, res) => json(res, 200, { organizationId: 'o', name: 'n' }));
    const client = new VerificationClient({ baseUrl: server.url, apiKey: key });
    try {
      expect(inspect(client, { depth: 10, showHidden: true })).not.toContain(key);
      expect(JSON.stringify(client)).not.toContain(key);
      await client.getOrganization('o');
      expect(server.requests[0]?.headers.authorization).toBe(`Bearer ${key}`);
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('refuses plain http to another machine unless allowed explicitly; loopback and https need nothing', () => {
    expect(() => new ServiceHttp({ baseUrl: 'http://verify.example.com', apiKey: key })).toThrow(
      /baseUrl.*plain http to a host other than this machine would send the API key and patient data unencrypted/s,
    );
    for (const baseUrl of ['http://10.0.0.5:8080', 'http://[2001:db8::1]/']) {
      expect(() => new ServiceHttp({ baseUrl, apiKey: key })).toThrow(/unencrypted/);
    }
    for (const baseUrl of ['https://verify.example.com', 'http://127.0.0.1:8089', 'http://localhost:1', 'http://[::1]:9']) {
      expect(() => new ServiceHttp({ baseUrl, apiKey: key })).not.toThrow();
    }
    expect(() => new ServiceHttp({ baseUrl: 'http://verify.example.com', apiKey: key, allowInsecureHttp: true })).not.toThrow();
    // One line naming the setting, as an embedder's log shows it, not zod's JSON dump of its issues.
    expect(() => new ServiceHttp({ baseUrl: 'verify.example.com', apiKey: key })).toThrow(/^baseUrl: must be an http\(s\) URL$/);
    expect(() => new ServiceHttp({ baseUrl: 'https://verify.example.com', apiKey: '' })).toThrow(/^apiKey: is required/);
    expect(isLoopbackHost('127.8.9.10')).toBe(true);
    expect(isLoopbackHost('127.example.com')).toBe(false);
  });

  it('names the URL and says "connection refused", with a warning per retry', async () => {
    const server = await startScriptedServer(() => undefined);
    const url = server.url;
    await server.close(); // nothing listens there now
    const log = recordingLog();
    const http = new ServiceHttp({ baseUrl: url, apiKey: key, maxRetries: 2, ...fast }, { log });
    try {
      const err = (await http
        .call({ operation: 'list organizations', method: 'GET', path: '/v2/customers/c/organizations', query: { cursor: 'abc' }, response: Organization, idempotent: true })
        .catch((e: unknown) => e)) as ServiceError;
      expect(err.message).toBe(`list organizations failed (ECONNREFUSED) - Connection refused: GET ${url}/v2/customers/c/organizations (after 2 retries)`);
      expect(log.warnings).toHaveLength(2);
      expect(log.warnings[1]).toMatch(new RegExp(`^list organizations: GET ${url}/v2/customers/c/organizations connection refused \\(ECONNREFUSED\\); retry 2 of 2 in \\d+\\.\\d s$`));
    } finally {
      await http.close();
    }
  });
});

describe('ServiceError', () => {
  it('does not quote a field error twice when the service wrote it into detail as well', () => {
    const err = new ServiceError({
      operation: 'get clinic',
      status: 422,
      problem: { title: 'Unprocessable Content', detail: 'clinicId: no clinic has this id', errors: [{ field: 'clinicId', message: 'no clinic has this id' }] },
    });
    expect(err.message).toBe('get clinic failed with 422 - Unprocessable Content: clinicId: no clinic has this id');
    const two = new ServiceError({
      operation: 'create clinic',
      status: 422,
      problem: { title: 'Invalid', detail: 'the request failed validation', errors: [{ field: 'name', message: 'is required' }, { field: 'npi', message: 'bad' }] },
    });
    expect(two.message).toBe('create clinic failed with 422 - Invalid: the request failed validation - name: is required; npi: bad');
  });
});

describe('VerificationClient paging and polling', () => {
  it('stops with an error on a cursor the service already gave, instead of listing forever', async () => {
    const server = await startScriptedServer((req, res) => {
      const cursor = new URL(req.url, 'http://x').searchParams.get('cursor');
      json(res, 200, { items: [{ portalId: `p-${cursor ?? 'first'}` }], nextCursor: cursor === 'b' ? 'a' : cursor === 'a' ? 'b' : 'a' });
    });
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      const seen: string[] = [];
      const err = await (async () => {
        for await (const p of client.all((page) => client.listPortals(page))) seen.push(p.portalId);
      })().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ServiceError);
      expect((err as ServiceError).message).toBe('list failed - Repeated page cursor: the service gave a nextCursor it had given before, after 3 pages; listing stopped');
      expect(seen).toEqual(['p-first', 'p-a', 'p-b']);
      expect(server.requests).toHaveLength(3);
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('reads a listing whose items are null as an empty page, and one without items as the wrong answer', async () => {
    const server = await startScriptedServer((_r, res, i) => json(res, 200, i === 0 ? { items: null, nextCursor: null } : { organizations: [] }));
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      expect((await client.listOrganizations('cus_1')).items).toEqual([]);
      await expect(client.listOrganizations('cus_1')).rejects.toThrow(/Unexpected response body: items: /);
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('reads a credentials validation whose problem status is no HTTP status code: the validation is what was asked for', async () => {
    const server = await startScriptedServer((_r, res) =>
      json(res, 200, { correlationId: 'v1', status: 'Invalid', result: { title: 'Invalid credentials', status: 0, detail: 'the portal refused the login' } }),
    );
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      const validation = await client.getCredentialsValidation('v1');
      expect(validationKindOf(validation.status)).toBe('invalid');
      expect(validation.result?.detail).toBe('the portal refused the login');
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('reads a verification or a validation fetched by its correlationId when the body does not repeat it', async () => {
    // The interface shows status and result for the GET of a verification, nothing for a validation's.
    const server = await startScriptedServer((req, res) =>
      json(res, 200, req.url.includes('credentials') ? { status: 'Valid' } : { status: 'Completed', correlationId: null, result: { plan: { name: 'PPO' } } }),
    );
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      const outcome = await client.getVerification('corr_7');
      expect(outcome.kind).toBe('completed');
      expect(outcome.verification.correlationId).toBe('corr_7');
      expect(await client.getCredentialsValidation('val_7')).toEqual({ correlationId: 'val_7', status: 'Valid' });
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('refuses a verification or a validation fetched by its correlationId whose body names another', async () => {
    // Read as the one asked for, another patient's result would be written into this patient's chart.
    const server = await startScriptedServer((req, res) =>
      json(res, 200, req.url.includes('credentials') ? { correlationId: 'val_8', status: 'Valid' } : { correlationId: 'corr_8', status: 'Completed', result: { plan: { name: 'PPO' } } }),
    );
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      await expect(client.getVerification('corr_7')).rejects.toMatchObject({ code: UNREADABLE_ANSWER, message: 'get insurance verification failed with 200 - Unexpected response body: correlationId: is not the one asked for' });
      await expect(client.getCredentialsValidation('val_7')).rejects.toMatchObject({ code: UNREADABLE_ANSWER, message: expect.stringContaining('correlationId: is not the one asked for') });
      expect((await client.getVerification('CORR_8')).verification.correlationId).toBe('corr_8');
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('refuses a verification polled for the externalId it was sent under when it names another, and takes one naming none', async () => {
    // The correlationId an asynchronous send was answered with may be another request's: its result is another patient's.
    const server = await startScriptedServer((req, res) => {
      const id = req.url.split('/').pop() ?? '';
      json(res, 200, { correlationId: id, status: 'Completed', ...(id !== 'corr-quiet' && { externalId: id === 'corr-mine' ? 'ext-mine' : 'ext-theirs' }), result: { plan: { name: 'PPO' } } });
    });
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      await expect(client.getVerification('corr-other', 'ext-mine')).rejects.toMatchObject({ code: UNREADABLE_ANSWER, message: expect.stringContaining('externalId: is not the one sent') });
      expect((await client.getVerification('corr-mine', 'ext-mine')).verification.correlationId).toBe('corr-mine');
      expect((await client.getVerification('corr-quiet', 'ext-mine')).verification.correlationId).toBe('corr-quiet');
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('refuses the answer to a verification sent with an externalId when it names another, and takes one naming none', async () => {
    const server = await startScriptedServer((req, res) => {
      const sent = (JSON.parse(req.body) as { externalId: string }).externalId;
      json(res, 201, { correlationId: `corr-${sent}`, status: 'Completed', ...(sent !== 'ext-quiet' && { externalId: sent === 'ext-mine' ? sent : 'ext-theirs' }), result: { plan: { name: 'PPO' } } });
    });
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      await expect(client.verify({ ...INLINE_REQUEST, externalId: 'ext-other' })).rejects.toMatchObject({ code: UNREADABLE_ANSWER, message: expect.stringContaining('externalId: is not the one sent') });
      expect((await client.verify({ ...INLINE_REQUEST, externalId: 'ext-mine' })).verification.correlationId).toBe('corr-ext-mine');
      expect((await client.verify({ ...INLINE_REQUEST, externalId: 'ext-quiet' })).verification.correlationId).toBe('corr-ext-quiet');
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('takes the answer to a credentials validation request that gives its correlationId alone, as the interface promises no more', async () => {
    const server = await startScriptedServer((_r, res) => json(res, 202, { correlationId: 'val-1' }));
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      expect(await client.requestCredentialsValidation({ clinicId: 'cln_1', portalId: 'p1' })).toEqual({ correlationId: 'val-1' });
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('keeps a payer whose features map holds a feature not read here in a shape of its own', async () => {
    const server = await startScriptedServer((_r, res) =>
      json(res, 200, {
        items: [{ primaryPayerId: 'ABC123', name: 'Acme Dental', features: { insuranceVerificationAsynchronous: { supported: true, portals: ['p1'] }, claimRetrieval: true, benefitsBreakdown: null } }],
        nextCursor: null,
      }),
    );
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      const page = await client.listPayers();
      expect([page.unreadable, page.items.map(portalsOf)]).toEqual([undefined, [{ syncPortals: [], asyncPortals: ['p1'] }]]);
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('lists the 2FA emails and SMS messages of a service that gives them no id', async () => {
    const server = await startScriptedServer((req, res) =>
      json(res, 200, { items: [{ from: 'no-reply@portal.example', ...(req.url?.includes('emails') && { subject: 'Your code' }), body: 'code 123456' }] }),
    );
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      const pages = [await client.registrationEmails('reg-1'), await client.listEmails(), await client.registrationSmsMessages('reg-1'), await client.listSmsMessages()];
      expect(pages.map((p) => [p.items.map((m) => m.body), p.unreadable])).toEqual(Array(4).fill([['code 123456'], undefined]));
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });

  it('keeps polling a credentials validation through pending synonyms and stops on a success synonym', async () => {
    const statuses = ['Queued', 'InProgress', 'Success'];
    const server = await startScriptedServer((_r, res, i) => json(res, 200, { correlationId: 'v1', status: statuses[i] }));
    const client = new VerificationClient({ baseUrl: server.url, apiKey: 'k' });
    try {
      const seen: string[] = [];
      const final = await client.waitForCredentialsValidation('v1', { firstDelayMs: 1, maxDelayMs: 5, onPoll: (s) => seen.push(s), sleep: async () => undefined });
      expect(seen).toEqual(['Queued', 'InProgress', 'Success']);
      expect(validationKindOf(final.status)).toBe('valid');
      expect(['Pending', 'queued', 'Valid', 'Validated', 'Invalid', 'Failed', 'Rejected', 'Escalated'].map(validationKindOf)).toEqual([
        'pending', 'pending', 'valid', 'valid', 'invalid', 'invalid', 'invalid', 'unknown',
      ]);
    } finally {
      await Promise.all([client.close(), server.close()]);
    }
  });
});
