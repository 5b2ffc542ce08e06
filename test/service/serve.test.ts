import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { get, request } from 'node:http';
import { createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import * as path from 'node:path';
import { serve } from '../../src/service/serve';
import { frame } from '../../src/service/mllp-framing';
import { loadServeConfig } from '../../src/service/serve-config';
import { generateWebhookSecret } from '../../src/sandbox';
import { bookingFor } from '../support/bookings';
import { freePort } from '../support/free-port';
import { nextCloseFails, nobodyHolds, until } from '../sync/harness';
import { client, message, msa } from './mllp-client';

/** serve on its in-process sandbox, as README's "The sync service" runs it with nothing but a data dir. */
describe('serve on the in-process sandbox', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(path.join(tmpdir(), 'elig-serve-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  /** serve on the data dir with `env` (and a config file), its JSON log lines kept. */
  async function serveLogged(env: NodeJS.ProcessEnv = {}, configFile?: string) {
    const lines: string[] = [];
    const destination = { write: (line: string) => lines.push(line) } as unknown as NodeJS.WritableStream;
    const serving = await serve(loadServeConfig(env, { ...(configFile && { configFile }), dataDir: dir, mllpPort: 0, httpPort: 0 }), { line: () => {}, destination });
    return { serving, lines };
  }

  it('gives the sandbox the bearer token its webhooks must carry when webhookScheme is bearer', async () => {
    const configFile = path.join(dir, 'config.json');
    // A webhook deadline far past the test's wait: only a delivered webhook completes the check in time.
    writeFileSync(configFile, JSON.stringify({ webhookScheme: 'bearer', settings: { webhookDeadlineMs: 120_000 } }));
    const config = loadServeConfig({ DENTAL_ELIG_WEBHOOK_TOKEN: 'a-static-token', DENTAL_ELIG_LOG_LEVEL: 'silent' }, { configFile, dataDir: dir, mllpPort: 0, httpPort: 0 });
    const serving = await serve(config, { line: () => {} });
    try {
      await serving.sync.receiveHl7(bookingFor('B1', 'SBX-COMPLETE'));
      const [check] = await until('the asynchronous check to be written', async () => {
        const written = await serving.sync.store.listChecks({ states: ['written'] });
        return written.length === 1 && written;
      });
      expect(check?.mode).toBe('async');
    } finally {
      await serving.close();
    }
  });

  it('takes HL7 over MLLP while its start waits out a service that takes connections and answers none: the message stored, ACKed AA before the start ends', async () => {
    // A service behind a balancer that hangs: each read of the payer catalog waits out the client's timeout, four times over.
    const held: Socket[] = [];
    const hanging = createNetServer((socket) => void held.push(socket));
    await new Promise<void>((resolve) => hanging.listen(0, '127.0.0.1', resolve));
    const servicePort = (hanging.address() as AddressInfo).port;
    const mllpPort = await freePort();
    const env = { DENTAL_ELIG_BASE_URL: `http://127.0.0.1:${servicePort}`, DENTAL_ELIG_API_KEY: 'a-key', DENTAL_ELIG_WEBHOOK_SECRET: generateWebhookSecret(), DENTAL_ELIG_LOG_LEVEL: 'silent' };
    let started = false;
    const serving = serve(loadServeConfig(env, { dataDir: dir, mllpPort, httpPort: 0 }), { line: () => {} }).finally(() => (started = true));
    try {
      await until('a read of the catalog under way', async () => held.length > 0);
      const pms = await until('the MLLP listener taking connections', () => client(mllpPort).catch(() => undefined), 10_000);
      pms.socket.write(frame(message('HANG-1')));
      const [ack] = await pms.waitFor(1, 10_000);
      expect(msa(ack as string).code).toBe('AA');
      expect(started).toBe(false);
      pms.socket.destroy();
    } finally {
      // The service gone: the client's next tries are refused at once, and the start ends as a first start in an outage does.
      for (const socket of held) socket.destroy();
      hanging.close();
      const up = await serving;
      try {
        expect((await up.sync.store.listChecks()).map((c) => c.state)).toEqual(['received']);
      } finally {
        await up.close();
      }
    }
  }, 40_000);

  it('says in its JSON log that it was asked to stop, and when it has', async () => {
    const { serving, lines } = await serveLogged();
    await serving.close();
    const said = lines.map((line) => JSON.parse(line) as { msg: string; ms?: number });
    expect(said.slice(-2).map((l) => l.msg)).toEqual(['stopping: listeners close, checks in hand finish', 'stopped']);
    expect(said.at(-1)?.ms).toBeGreaterThanOrEqual(0);
  });

  it('calls the in-process sandbox with the config file\'s retries, as it would the service', async () => {
    const configFile = path.join(dir, 'config.json');
    writeFileSync(configFile, JSON.stringify({ maxRetries: 0 }));
    const { serving, lines } = await serveLogged({ DENTAL_ELIG_LOG_LEVEL: 'warn' }, configFile);
    try {
      // SBX-503: answered 503 every time.
      await serving.sync.receiveHl7(bookingFor('R0', 'SBX-503'));
      await until('the worker told of the failure', async () => lines.some((line) => line.includes('the service failed; will retry')));
      // With its default of 4 the client would have retried it first, a second apart.
      expect(lines.filter((line) => /retry \d of \d/.test(line))).toEqual([]);
    } finally {
      await serving.close();
    }
  });

  it('stops once for two close() calls at once: each returns once the store is closed, and a later one at once', async () => {
    const { serving, lines } = await serveLogged();
    const first = serving.close();
    await serving.close();
    expect(nobodyHolds(path.join(dir, 'dental-elig.sqlite'))).toBe(true);
    await first;
    await serving.close();
    expect(lines.map((line) => (JSON.parse(line) as { msg: string }).msg).filter((msg) => msg.startsWith('stop'))).toEqual(['stopping: listeners close, checks in hand finish', 'stopped']);
  });

  it('closes every part when one fails to, says which in an error line, and that it stopped with errors, to every caller', async () => {
    const { serving, lines } = await serveLogged();
    // The store's WAL failing to close.
    nextCloseFails();
    try {
      const first = serving.close();
      await expect(serving.close()).rejects.toThrow('stopped with errors: closing the job store failed');
      await expect(first).rejects.toThrow('stopped with errors: closing the job store failed');
    } finally {
      jest.restoreAllMocks();
    }
    const said = lines.map((line) => JSON.parse(line) as { level: number; msg: string; err?: string; failed?: string[] });
    expect(said.filter((l) => l.level >= 50).map(({ msg, err, failed }) => ({ msg, err, failed }))).toEqual([
      { msg: 'closing the job store failed', err: 'EIO: i/o error, close', failed: undefined },
      { msg: 'stopped with errors', err: undefined, failed: ['the job store'] },
    ]);
    expect(said.map((l) => l.msg)).not.toContain('stopped');
    // The rest closed all the same: the file let go, the listeners gone.
    expect(nobodyHolds(path.join(dir, 'dental-elig.sqlite'))).toBe(true);
    await expect(fetch(`http://127.0.0.1:${serving.http.port}/healthz`)).rejects.toThrow();
  });

  it('takes a FHIR notification only with DENTAL_ELIG_NOTIFICATION_TOKEN when it is set, refusing any other before its body is read or kept, with a warning', async () => {
    const { serving, lines } = await serveLogged({ DENTAL_ELIG_NOTIFICATION_TOKEN: 'notification-token' });
    try {
      const notify = (authorization?: string) =>
        fetch(`http://127.0.0.1:${serving.http.port}/fhir-notifications`, { method: 'POST', headers: authorization ? { authorization } : {}, body: 'x'.repeat(100_000) });
      for (const authorization of [undefined, 'Bearer wrong-token', 'notification-token']) {
        const refused = await notify(authorization);
        expect([refused.status, refused.headers.get('www-authenticate')]).toEqual([401, 'Bearer']);
      }
      expect(await serving.sync.store.listMessages({ status: 'dead' })).toEqual([]);
      // Said each time, as a webhook refused is: a Subscription sent without the header had nothing in the log, and nothing verified.
      const refusals = lines.map((line) => JSON.parse(line) as { level: number; msg: string }).filter((l) => l.msg.startsWith('FHIR notification refused'));
      expect(refusals).toEqual(Array.from({ length: 3 }, () => expect.objectContaining({ level: 40, status: 401, msg: "FHIR notification refused: authorization does not carry the notification token (the Subscription's channel.header)" })));
      expect(lines.join('\n')).not.toContain('notification-token');
      // Counted too, for an alert: the log line alone was watched by none, and nothing else told of notifications refused.
      expect(await serving.sync.metrics.text()).toMatch(/^dental_elig_messages_total\{type="fhir-notification",ack="refused"\} 3$/m);
      // The token taken, the body is read: not JSON, it is refused and kept.
      expect((await notify('Bearer notification-token')).status).toBe(400);
      expect(await serving.sync.store.listMessages({ status: 'dead' })).toHaveLength(1);
    } finally {
      await serving.close();
    }
  });

  /** serve with the config file's host, written beside the data dir. */
  async function serveOn(host: string) {
    const configFile = path.join(dir, 'config.json');
    writeFileSync(configFile, JSON.stringify({ host }));
    return serve(loadServeConfig({ DENTAL_ELIG_LOG_LEVEL: 'silent' }, { configFile, dataDir: dir, mllpPort: 0, httpPort: 0 }), { line: () => {} });
  }

  /** A request of serve's embedded chart on loopback, with the headers (Host, Origin) a browser would send: its status and body. */
  function askChart(port: number, options: { method?: string; path: string; headers: Record<string, string>; body?: string }): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, method: options.method ?? 'GET', path: options.path, headers: options.headers }, (res) => {
        let body = '';
        res.on('data', (chunk: Buffer) => (body += chunk.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject).end(options.body);
    });
  }

  /** A GET of serve's embedded chart over a socket bound to `from`: its status and body. */
  function getChart(port: number, target: string, from: string): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      get({ host: target, port, path: '/fhir/Patient', localAddress: from }, (res) => {
        let body = '';
        res.on('data', (chunk: Buffer) => (body += chunk.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      }).on('error', reject);
    });
  }

  /** This machine's address on a network (the practice's LAN, a container's bridge). */
  const lanAddress = Object.values(networkInterfaces()).flat().find((i) => i?.family === 'IPv4' && !i.internal)?.address as string;

  it('answers the embedded chart to this machine only when it listens on every address: the patient data in it has no authentication', async () => {
    expect(lanAddress).toBeDefined();
    const serving = await serveOn('0.0.0.0');
    try {
      await serving.sync.receiveHl7(bookingFor('L1', 'SBX-COMPLETE'));
      await until('the check to be written', async () => (await serving.sync.store.listChecks({ states: ['written'] })).length === 1);
      // A client elsewhere on the network: it reaches serve from an address that is neither loopback nor the one it came in on.
      const fromNetwork = await getChart(serving.http.port, '127.0.0.1', lanAddress);
      expect(fromNetwork.status).toBe(403);
      expect(fromNetwork.body).not.toContain('DOE');
      expect(JSON.parse(fromNetwork.body).issue[0].diagnostics).toMatch(/answers this machine only.*DENTAL_ELIG_FHIR_URL/);
      const local = await getChart(serving.http.port, '127.0.0.1', '127.0.0.1');
      expect(local.status).toBe(200);
      expect(local.body).toContain('DOE');
    } finally {
      await serving.close();
    }
  });

  it('refuses its embedded chart to a web page on this machine: by a host name a page can point here, or carrying Origin', async () => {
    const serving = await serveOn('127.0.0.1');
    try {
      await serving.sync.receiveHl7(bookingFor('L7', 'SBX-COMPLETE'));
      await until('the check to be written', async () => (await serving.sync.store.listChecks({ states: ['written'] })).length === 1);
      const { port } = serving.http;
      // DNS rebinding: a page's own name, resolved to 127.0.0.1 after it loaded, reads what it fetches there as its own origin.
      const rebound = await askChart(port, { path: '/fhir/Patient', headers: { host: `attacker.example:${port}` } });
      expect(rebound.status).toBe(403);
      expect(rebound.body).not.toContain('DOE');
      expect(JSON.parse(rebound.body).issue[0].diagnostics).toMatch(/answers this machine only.*127\.0\.0\.1 or localhost/);
      // A cross-site form or fetch POSTs without a preflight, text/plain: the page cannot read the answer, but the write would be made.
      const posted = await askChart(port, { method: 'POST', path: '/fhir/Patient', headers: { origin: 'https://attacker.example', 'content-type': 'text/plain' }, body: JSON.stringify({ resourceType: 'Patient', name: [{ family: 'PLANTED' }] }) });
      expect(posted.status).toBe(403);
      expect((await getChart(port, '127.0.0.1', '127.0.0.1')).body).not.toContain('PLANTED');
      // This machine by loopback's names and addresses, as serve's writer and an operator's curl reach it.
      for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, '127.0.0.1']) {
        const local = await askChart(port, { path: '/fhir/Patient', headers: { host } });
        expect([host, local.status, local.body.includes('DOE')]).toEqual([host, 200, true]);
      }
    } finally {
      await serving.close();
    }
  });

  it('refuses a FHIR notification a web page sends (it carries Origin), before its body is read or kept, with a warning', async () => {
    const { serving, lines } = await serveLogged({});
    try {
      // A cross-site POST of text/plain needs no preflight: without DENTAL_ELIG_NOTIFICATION_TOKEN any page open on this machine could fill the store.
      const notify = (headers: Record<string, string>) => fetch(`http://127.0.0.1:${serving.http.port}/fhir-notifications`, { method: 'POST', headers: { 'content-type': 'text/plain', ...headers }, body: 'x'.repeat(100_000) });
      expect((await notify({ origin: 'https://attacker.example' })).status).toBe(403);
      expect(await serving.sync.store.listMessages({ status: 'dead' })).toEqual([]);
      // Said, as a token refused is: a FHIR server or proxy that added Origin would have every notification refused. The page's Origin is not quoted.
      const refusals = lines.map((line) => JSON.parse(line) as { level: number; msg: string }).filter((l) => l.msg.startsWith('FHIR notification refused'));
      expect(refusals).toEqual([expect.objectContaining({ level: 40, status: 403, msg: 'FHIR notification refused: a FHIR notification comes from a FHIR server, not a web page (it carries Origin)' })]);
      expect(lines.join('\n')).not.toContain('attacker.example');
      expect(await serving.sync.metrics.text()).toMatch(/^dental_elig_messages_total\{type="fhir-notification",ack="refused"\} 1$/m);
      // A FHIR server sends none: its unreadable notification is kept, as before.
      expect((await notify({})).status).toBe(400);
      expect(await serving.sync.store.listMessages({ status: 'dead' })).toHaveLength(1);
    } finally {
      await serving.close();
    }
  });

  it('listens on the IPv6 any-address too, its own URLs (chart, webhook) bracketing it', async () => {
    const serving = await serveOn('::');
    try {
      expect(serving.fhirUrl).toBe(`http://[::]:${serving.http.port}/fhir`);
      await serving.sync.receiveHl7(bookingFor('L6', 'SBX-COMPLETE'));
      await until('the check to be written', async () => (await serving.sync.store.listChecks({ states: ['written'] })).length === 1);
    } finally {
      await serving.close();
    }
  });

  it('writes its embedded chart when it listens on a LAN address alone, reaching itself from that address', async () => {
    const serving = await serveOn(lanAddress);
    try {
      await serving.sync.receiveHl7(bookingFor('L2', 'SBX-COMPLETE'));
      await until('the check to be written', async () => (await serving.sync.store.listChecks({ states: ['written'] })).length === 1);
      expect((await getChart(serving.http.port, lanAddress, lanAddress)).body).toContain('DOE');
    } finally {
      await serving.close();
    }
  });
});
