import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { Webhook } from 'standardwebhooks';
import { runCli } from '../../src/cli/main';
import { DEFAULT_API_KEY, generateWebhookSecret } from '../../src/sandbox';

/** Starts `dental-elig sandbox …` in-process; resolves once it says where it listens. */
async function runSandbox(argv: string[], env: NodeJS.ProcessEnv = {}) {
  const stop = new AbortController();
  let stdout = '';
  let stderr = '';
  let onOut: () => void = () => undefined;
  const exit = runCli(['sandbox', ...argv], {
    stdout: { write: (s: string) => ((stdout += s), onOut()) },
    stderr: { write: (s: string) => (stderr += s) },
    stdin: Readable.from(['']),
    env,
    signal: stop.signal,
  });
  const url = await Promise.race([
    new Promise<string>((resolve) => {
      onOut = () => {
        const m = /^listening: sandbox (\S+)$/m.exec(stdout);
        if (m) resolve(m[1] as string);
      };
    }),
    exit.then((code) => {
      throw new Error(`exited ${code}: ${stderr}`);
    }),
  ]);
  return { url, stop: async () => (stop.abort(), exit), out: () => stdout, err: () => stderr };
}

test('prints where it listens, serves the demo practice with the given key, and stops cleanly', async () => {
  const sb = await runSandbox(['--port', '0', '--api-key', 'sk_my_local_key']);
  expect(sb.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  expect(sb.out()).not.toContain('sk_my_local_key');
  const res = await request(`${sb.url}/v2/clinics/cln_sandbox_main`, { headers: { authorization: 'Bearer sk_my_local_key' } });
  expect(res.statusCode).toBe(200);
  expect(await res.body.json()).toMatchObject({ clinicId: 'cln_sandbox_main', sandbox: true });
  expect(await sb.stop()).toBe(0);
  expect(sb.out()).toMatch(/sandbox stopped\n$/);
  await expect(request(`${sb.url}/v2/network/payers`)).rejects.toThrow();
});

test('the default key, --no-seed, and a signed webhook with its secret from the environment', async () => {
  const secret = generateWebhookSecret();
  const received: Array<{ headers: Record<string, string>; body: string }> = [];
  const hook = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      received.push({ headers: req.headers as Record<string, string>, body });
      res.end();
    });
  });
  await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
  const hookUrl = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`;
  const sb = await runSandbox(['--no-seed', '--webhook-url', hookUrl, '--async-delay-ms', '10'], { DENTAL_ELIG_SANDBOX_WEBHOOK_SECRET: secret });
  try {
    expect(sb.out()).toContain(DEFAULT_API_KEY);
    expect(sb.out()).toContain(`webhook:   ${hookUrl} (signed)`);
    expect(sb.out()).not.toContain(secret);
    const auth = { authorization: `Bearer ${DEFAULT_API_KEY}`, 'content-type': 'application/json' };
    const clinic = await request(`${sb.url}/v2/clinics/cln_sandbox_main`, { headers: auth });
    expect(clinic.statusCode).toBe(422);
    await clinic.body.dump();
    const accepted = await request(`${sb.url}/v2/insurance-verification-requests`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({
        portalId: 'deltadentalins',
        credentials: { username: 'office', password: 'pw' },
        payer: { payerId: 'CDCA1' },
        patient: { firstName: 'A', lastName: 'B', dateOfBirth: '1980-01-01' },
        subscriber: { firstName: 'A', lastName: 'B', memberId: 'SBX-COMPLETE', relationship: 'Self' },
        dateOfService: '2026-12-01',
      }),
    });
    expect(accepted.statusCode).toBe(201);
    await accepted.body.dump();
    for (let i = 0; i < 100 && received.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(received).toHaveLength(1);
    expect(new Webhook(secret).verify(received[0]?.body as string, received[0]?.headers as Record<string, string>)).toMatchObject({ status: 'Completed' });
  } finally {
    await sb.stop();
    await new Promise((r) => hook.close(r));
  }
});

test('bad options are one line on stderr', async () => {
  const errs: string[] = [];
  const io = { stdout: { write: () => true }, stderr: { write: (s: string) => errs.push(s) }, stdin: Readable.from(['']), env: {} };
  expect(await runCli(['sandbox', '--port', 'eighty'], io)).toBe(2);
  expect(errs.join('')).toBe('dental-elig: --port: must be a whole number\n');
  errs.length = 0;
  expect(await runCli(['sandbox', '--webhook-url', 'ftp://x'], io)).toBe(2);
  expect(errs.join('')).toBe('dental-elig: --webhook-url: must be an http or https URL\n');
  // A port past 65535 is a usage error naming the option, for every command that listens.
  for (const argv of [['sandbox', '--port', '70000'], ['fhir-server', '--port', '65536'], ['serve', '--http-port', '70000'], ['serve', '--mllp-port', '99999']]) {
    errs.length = 0;
    expect(await runCli(argv, io)).toBe(2);
    expect(errs.join('')).toBe(`dental-elig: ${argv[1]}: must be a port, 0 to 65535\n`);
  }
});

test('--throttle-verifications answers verifications sent 429 for as long as it says, reads as usual, then takes them', async () => {
  const sb = await runSandbox(['--port', '0', '--throttle-verifications', '300']);
  try {
    const auth = { authorization: `Bearer ${DEFAULT_API_KEY}`, 'content-type': 'application/json' };
    const send = async () => {
      const res = await request(`${sb.url}/v2/insurance-verifications`, {
        method: 'POST',
        headers: auth,
        body: JSON.stringify({
          portalId: 'deltadentalins',
          payer: { payerId: 'CDCA1' },
          clinicId: 'cln_sandbox_main',
          patient: { firstName: 'A', lastName: 'B', dateOfBirth: '1980-01-01' },
          subscriber: { firstName: 'A', lastName: 'B', memberId: 'SBX-COMPLETE', relationship: 'Self' },
          dateOfService: '2026-12-01',
        }),
      });
      await res.body.dump();
      return res.statusCode;
    };
    expect(await send()).toBe(429);
    const read = await request(`${sb.url}/v2/network/payers`, { headers: auth });
    await read.body.dump();
    expect(read.statusCode).toBe(200);
    expect(await send()).toBe(429);
    for (let i = 0; i < 200 && !sb.out().includes('throttle:  over'); i++) await new Promise((r) => setTimeout(r, 20));
    expect(await send()).toBe(201);
  } finally {
    await sb.stop();
  }
});
