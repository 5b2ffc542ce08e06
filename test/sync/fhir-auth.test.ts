import { generateKeyPairSync, verify, type KeyObject } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import type { Bundle } from 'fhir/r4';
import { EligibilityCheck } from '../../src/domain';
import { projectRoot } from '../../src/mapping-files';
import { createFhirHandler } from '../../src/sandbox/fhir-server';
import { createEligibilitySync } from '../../src/service/eligibility-sync';
import { createLogger } from '../../src/service/logger';
import { ChartWriteError } from '../../src/sync/chart-errors';
import { READ_SCOPE } from '../../src/sync/fhir-auth';
import { SqliteJobStore } from '../../src/sync/sqlite-job-store';
import { fhirWriter } from '../../src/sync/write-back';
import { toOutcome } from '../../src/verification/outcome';
import { startScriptedServer } from '../support/http-server';

/**
 * SMART Backend Services against a real token endpoint on loopback, which checks each client
 * assertion's signature with the client's registered public key, and a FHIR server (the embedded
 * one, mounted) that takes only the tokens it issued.
 */
const fixture = (...p: string[]) => JSON.parse(readFileSync(path.join(projectRoot, 'fixtures', ...p), 'utf8')) as unknown;
const [check] = EligibilityCheck.array().parse(fixture('fhir', 'self.expected.json'));
const outcome = (correlationId: string) => toOutcome({ ...(fixture('results', 'completed-minimal.json') as object), correlationId });

const CLIENT_ID = 'dental-elig-test';
const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
const ec = generateKeyPairSync('ec', { namedCurve: 'P-384' });

interface Authority {
  url: string;
  /** Public keys by kid, as a JWKS would hold them. */
  keys: Map<string, KeyObject>;
  issued: string[];
  revoked: Set<string>;
  discoveries: number;
  refusedAssertions: string[];
  fhirAuthorizations: Array<string | undefined>;
  /** The scope each token was asked for. */
  scopes: Array<string | null>;
  /** Whether the chart refuses (403) a read of a type the token's scope grants no read of, as a SMART server does. */
  scoped: boolean;
  expiresIn: number;
  /** The token endpoint .well-known/smart-configuration names, when not this authority's own. */
  advertised: string | undefined;
  close(): Promise<void>;
}

let authority: Authority;
let server: Server;
let fhir: ReturnType<typeof createFhirHandler>;

beforeAll(async () => {
  fhir = createFhirHandler({ basePath: '/fhir', validate: true });
  const chart = fixture('fhir', 'self.bundle.json') as Bundle;
  await fhir.seed((chart.entry ?? []).flatMap((e) => (e.resource ? [e.resource] : [])));
  const jtis = new Set<string>();
  server = createServer((req, res) => {
    const answer = (status: number, body: unknown) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    if (req.url === '/fhir/.well-known/smart-configuration') {
      authority.discoveries++;
      return answer(200, { token_endpoint: authority.advertised ?? `${authority.url}/token`, token_endpoint_auth_methods_supported: ['private_key_jwt'], token_endpoint_auth_signing_alg_values_supported: ['RS384', 'ES384'] });
    }
    if (req.url === '/token' && req.method === 'POST') {
      return void readForm(req).then((form) => {
        const problem = assertionProblem(form, jtis);
        if (problem) {
          authority.refusedAssertions.push(problem);
          return answer(401, { error: 'invalid_client' });
        }
        const token = `token-${authority.issued.length + 1}`;
        authority.issued.push(token);
        authority.scopes.push(form.get('scope'));
        answer(200, { access_token: token, token_type: 'bearer', expires_in: authority.expiresIn, scope: form.get('scope') });
      });
    }
    const authorization = req.headers.authorization;
    authority.fhirAuthorizations.push(authorization);
    const token = authorization?.replace(/^Bearer /, '');
    if (!token || !authority.issued.includes(token) || authority.revoked.has(token)) {
      return answer(401, { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'login' }] });
    }
    if (authority.scoped && !readGranted(authority.scopes[authority.issued.indexOf(token)] ?? '', req.url ?? '')) {
      return answer(403, { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'forbidden' }] });
    }
    void fhir.handle(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  authority = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    keys: new Map([
      ['rsa-1', rsa.publicKey],
      ['ec-1', ec.publicKey],
    ]),
    issued: [],
    revoked: new Set(),
    discoveries: 0,
    refusedAssertions: [],
    fhirAuthorizations: [],
    scopes: [],
    scoped: false,
    expiresIn: 300,
    advertised: undefined,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
});
afterAll(async () => {
  server.closeAllConnections();
  await authority.close();
});
beforeEach(() => {
  Object.assign(authority, { issued: [], revoked: new Set(), discoveries: 0, refusedAssertions: [], fhirAuthorizations: [], scopes: [], scoped: false, expiresIn: 300, advertised: undefined });
});

/** Whether a SMART scope (system/<type>.rs, .crus, .read) lets a GET of this FHIR path (/fhir/<type>...) through. */
function readGranted(scope: string, url: string): boolean {
  const type = /^\/fhir\/([A-Z][A-Za-z]+)/.exec(url)?.[1];
  if (type === undefined) return true;
  return scope.split(' ').some((s) => new RegExp(`^system/(${type}|\\*)\\.(read|\\*|c?r)`).test(s));
}

function readForm(req: IncomingMessage): Promise<URLSearchParams> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c)).on('end', () => resolve(new URLSearchParams(Buffer.concat(chunks).toString('utf8'))));
  });
}

/** What a SMART authorization server checks of a client assertion; undefined when it passes. */
function assertionProblem(form: URLSearchParams, jtis: Set<string>): string | undefined {
  if (form.get('grant_type') !== 'client_credentials') return 'grant_type';
  if (form.get('client_assertion_type') !== 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer') return 'client_assertion_type';
  const [header64, claims64, signature64] = (form.get('client_assertion') ?? '').split('.');
  if (!header64 || !claims64 || !signature64) return 'not a JWS';
  const header = JSON.parse(Buffer.from(header64, 'base64url').toString()) as { alg: string; kid?: string; typ?: string };
  const claims = JSON.parse(Buffer.from(claims64, 'base64url').toString()) as { iss: string; sub: string; aud: string; exp: number; jti: string };
  const key = authority.keys.get(header.kid ?? '');
  if (!key || header.typ !== 'JWT') return 'kid';
  const expected = key.asymmetricKeyType === 'rsa' ? 'RS384' : 'ES384';
  if (header.alg !== expected) return 'alg';
  const signed = verify('sha384', Buffer.from(`${header64}.${claims64}`), expected === 'ES384' ? { key, dsaEncoding: 'ieee-p1363' } : key, Buffer.from(signature64, 'base64url'));
  if (!signed) return 'signature';
  const now = Date.now() / 1000;
  if (claims.iss !== CLIENT_ID || claims.sub !== CLIENT_ID || claims.aud !== `${authority.url}/token`) return 'claims';
  if (!(claims.exp > now && claims.exp <= now + 300)) return 'exp';
  if (jtis.has(claims.jti)) return 'jti replayed';
  jtis.add(claims.jti);
  return undefined;
}

const fhirBase = () => `${authority.url}/fhir`;
const required = <T>(v: T | undefined): T => {
  if (v === undefined) throw new Error('fixture has no check');
  return v;
};

describe('SMART Backend Services', () => {
  it('signs RS384, finds the token endpoint in .well-known/smart-configuration, and keeps the token for later writes', async () => {
    const writer = await fhirWriter(fhirBase(), { smart: { clientId: CLIENT_ID, privateKey: rsa.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), keyId: 'rsa-1' } });
    const first = await writer.write(required(check), outcome('ver_smart_1'));
    const second = await writer.write(required(check), outcome('ver_smart_2'));
    expect(second.responseId).not.toBe(first.responseId);
    expect(authority.refusedAssertions).toEqual([]);
    expect([authority.discoveries, authority.issued]).toEqual([1, ['token-1']]);
    expect(new Set(authority.fhirAuthorizations)).toEqual(new Set(['Bearer token-1']));
  });

  it('signs ES384 with a JWK, at a configured token endpoint without discovery', async () => {
    const jwk = ec.privateKey.export({ format: 'jwk' }) as Record<string, unknown>;
    const writer = await fhirWriter(fhirBase(), { smart: { clientId: CLIENT_ID, privateKey: jwk, keyId: 'ec-1', tokenEndpoint: `${authority.url}/token` } });
    await writer.write(required(check), outcome('ver_smart_es'));
    expect([authority.discoveries, authority.issued, authority.refusedAssertions]).toEqual([0, ['token-1'], []]);
  });

  it('fetches a new token shortly before the last one expires', async () => {
    authority.expiresIn = 1;
    const writer = await fhirWriter(fhirBase(), { smart: { clientId: CLIENT_ID, privateKey: rsa.privateKey, keyId: 'rsa-1' } });
    await writer.write(required(check), outcome('ver_smart_expiry'));
    await new Promise((resolve) => setTimeout(resolve, 700));
    await writer.write(required(check), outcome('ver_smart_expiry'));
    expect(authority.issued).toEqual(['token-1', 'token-2']);
    expect(authority.fhirAuthorizations.at(-1)).toBe('Bearer token-2');
  });

  it('a token the server refuses is a retryable failure, and the next write gets a new token', async () => {
    const writer = await fhirWriter(fhirBase(), { smart: { clientId: CLIENT_ID, privateKey: rsa.privateKey, keyId: 'rsa-1' } });
    await writer.write(required(check), outcome('ver_smart_revoked'));
    authority.revoked.add('token-1');
    const err = (await writer.write(required(check), outcome('ver_smart_revoked_2')).catch((e: unknown) => e)) as ChartWriteError;
    expect(err).toBeInstanceOf(ChartWriteError);
    expect([err.retryable, err.status]).toEqual([true, 401]);
    await writer.write(required(check), outcome('ver_smart_revoked_2'));
    expect(authority.issued).toEqual(['token-1', 'token-2']);
  });

  it('a key the server does not know is refused at the token endpoint: not retryable, and the key is in no message', async () => {
    const stranger = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const pem = stranger.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const writer = await fhirWriter(fhirBase(), { smart: { clientId: CLIENT_ID, privateKey: pem, keyId: 'rsa-1' } });
    const err = (await writer.write(required(check), outcome('ver_smart_stranger')).catch((e: unknown) => e)) as ChartWriteError;
    expect(authority.refusedAssertions).toEqual(['signature']);
    expect([err.retryable, err.status, err.message]).toEqual([false, 401, 'write eligibility: auth: the token request was answered 401 (invalid_client)']);
    expect(authority.fhirAuthorizations).toEqual([]);
  });

  /** A sync reading the chart with SMART tokens of its own, signed with `privateKey`, given to `use`. */
  async function readingWith(privateKey: KeyObject, use: (sync: ReturnType<typeof createEligibilitySync>) => Promise<void>, logs?: string[]): Promise<void> {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'elig-smart-'));
    const sync = createEligibilitySync({
      store: SqliteJobStore.open(dataDir),
      dataDir,
      service: { baseUrl: 'http://127.0.0.1:9', apiKey: 'sk_unused' },
      fhir: { baseUrl: fhirBase(), smart: { clientId: CLIENT_ID, privateKey, keyId: 'rsa-1' } },
      logger: logs ? createLogger({ level: 'warn', destination: { write: (line: string) => logs.push(line) } as unknown as NodeJS.WritableStream }) : createLogger({ level: 'silent' }),
    });
    try {
      await use(sync);
    } finally {
      await sync.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  }

  it('reads the chart for the FHIR trigger with tokens of its own, asked for read scopes, and renews a refused one once', async () => {
    await readingWith(rsa.privateKey, async (sync) => {
      expect((await sync.notifyAppointment('appt-1001')).created).toHaveLength(1);
      expect(authority.scopes).toEqual([READ_SCOPE]);
      expect(READ_SCOPE).toContain('system/Appointment.rs');
      authority.revoked.add('token-1');
      // Read again as a changed appointment would be: the refused token is replaced, the read made once more.
      await sync.notifyAppointment('appt-1001');
      expect(authority.issued).toEqual(['token-1', 'token-2']);
      expect(authority.fhirAuthorizations.filter((a) => a === undefined)).toEqual([]);
      // A chart that refuses the renewed token too will refuse it again: final after the one renewal, not "try again".
      authority.revoked.add('token-2').add('token-3');
      const sent = authority.fhirAuthorizations.length;
      await expect(sync.notifyAppointment('appt-1001')).rejects.toMatchObject({ name: 'FhirInputError', message: 'Appointment: the FHIR server answered 401 to the read: request (login)' });
      expect(authority.fhirAuthorizations.slice(sent)).toEqual(['Bearer token-2', 'Bearer token-3']);
    });
  });

  it('reads with its read scopes all a chart that grants no more needs: a subscriber kept as a RelatedPerson, and the poll\'s search of those changed', async () => {
    // Marco's Aetna plan is his spouse's, kept as a RelatedPerson (what this chart holds of the self fixture's is left as it is).
    const held = new Set(((fixture('fhir', 'self.bundle.json') as Bundle).entry ?? []).map((e) => `${e.resource?.resourceType}/${e.resource?.id}`));
    await fhir.seed(((fixture('fhir', 'primary-secondary.bundle.json') as Bundle).entry ?? []).flatMap((e) => (e.resource && !held.has(`${e.resource.resourceType}/${e.resource.id}`) ? [e.resource] : [])));
    authority.scoped = true;
    const logs: string[] = [];
    await readingWith(
      rsa.privateKey,
      async (sync) => {
        expect((await sync.notifyAppointment('appt-4004')).created).toHaveLength(2);
        await sync.pollAppointments();
      },
      logs,
    );
    // Each search the poll makes was answered: none said refused.
    expect(logs.map((l) => (JSON.parse(l) as { msg: string }).msg)).toEqual([]);
  });

  it('reads nothing with a key the token endpoint refuses, and says so as final, as the writer does, not as "try again"', async () => {
    const stranger = generateKeyPairSync('rsa', { modulusLength: 2048 });
    await readingWith(stranger.privateKey, async (sync) => {
      await expect(sync.notifyAppointment('appt-1001')).rejects.toMatchObject({ name: 'FhirInputError', message: 'Appointment: auth: the token request was answered 401 (invalid_client)' });
      expect([authority.refusedAssertions, authority.fhirAuthorizations]).toEqual([['signature'], []]);
    });
  });

  it('sends no assertion to a plain http token endpoint on another machine, configured or discovered, unless the deployment allows it', async () => {
    const pem = rsa.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const refused = (named: string) =>
      `write eligibility: auth: ${named}: plain http to a host other than this machine would send the client assertion and the access token unencrypted; use https, or allow it explicitly (allowInsecureHttp, DENTAL_ELIG_ALLOW_INSECURE_HTTP=1)`;
    const elsewhere = 'http://auth.example.test/token';
    await expect(fhirWriter(fhirBase(), { smart: { clientId: CLIENT_ID, privateKey: pem, keyId: 'rsa-1', tokenEndpoint: elsewhere } })).rejects.toThrow(refused('smart.tokenEndpoint'));
    await expect(fhirWriter(fhirBase(), { smart: { clientId: CLIENT_ID, privateKey: pem, keyId: 'rsa-1', tokenEndpoint: elsewhere }, allowInsecureHttp: true })).resolves.toBeDefined();
    // The chart, reached over https in practice, names an http endpoint: found out once the first write asks for a token.
    authority.advertised = elsewhere;
    const writer = await fhirWriter(fhirBase(), { smart: { clientId: CLIENT_ID, privateKey: pem, keyId: 'rsa-1' } });
    const err = (await writer.write(required(check), outcome('ver_smart_http')).catch((e: unknown) => e)) as ChartWriteError;
    expect([err.retryable, err.message]).toEqual([false, refused('the token endpoint .well-known/smart-configuration names')]);
    expect([authority.discoveries, authority.fhirAuthorizations]).toEqual([1, []]);
  });

  it('refuses a token endpoint\'s answer larger than it reads as it arrives, for a person, not as a network failure', async () => {
    const pem = rsa.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const huge = await startScriptedServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(`{"access_token":"${'x'.repeat(33 * 1024 * 1024)}"}`);
    });
    try {
      const writer = await fhirWriter(fhirBase(), { smart: { clientId: CLIENT_ID, privateKey: pem, keyId: 'rsa-1', tokenEndpoint: `${huge.url}/token` } });
      const err = (await writer.write(required(check), outcome('ver_smart_huge')).catch((e: unknown) => e)) as ChartWriteError;
      expect([err.retryable, err.message]).toEqual([false, 'write eligibility: auth: the answer to the token request is larger than this plugin reads; not read']);
    } finally {
      await huge.close();
    }
  });

  it('a writer built alone refuses a plain http chart on another machine too, unless allowInsecureHttp', async () => {
    await expect(fhirWriter('http://chart.example.test/fhir', { bearerToken: 'secret-token' })).rejects.toThrow(
      "write eligibility: baseUrl: plain http to a host other than this machine would send the chart's access token and patient data unencrypted; use https, or allow it explicitly (allowInsecureHttp)",
    );
    await expect(fhirWriter('http://chart.example.test/fhir', { bearerToken: 'secret-token', allowInsecureHttp: true })).resolves.toBeDefined();
  });

  it('refuses a key SMART cannot sign with, naming the option and not the key', async () => {
    const p256 = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
    await expect(fhirWriter(fhirBase(), { smart: { clientId: CLIENT_ID, privateKey: p256 } })).rejects.toThrow(
      'write eligibility: auth: smart.privateKey: must be an RSA key or an EC key on P-384 (SMART signs RS384 or ES384)',
    );
    await expect(fhirWriter(fhirBase(), { smart: { clientId: CLIENT_ID, privateKey: 'not a key' } })).rejects.toThrow(
      'write eligibility: auth: smart.privateKey: is not a private key (PEM, JWK or KeyObject)',
    );
  });
});
