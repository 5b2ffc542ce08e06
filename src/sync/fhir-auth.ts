import { createPrivateKey, KeyObject, randomUUID, sign } from 'node:crypto';
import { request } from 'undici';
import * as z from 'zod';
import { describeIssue } from '../domain/issues';
import { TOKEN_TRAFFIC, isHttpUrl, isPlainHttpAcrossNetwork, plainHttpRefused } from '../url-checks';
import { chartAgent } from './chart-client';
import { answerTooLarge, ChartWriteError, retryableStatus, tooLargeToRead } from './chart-errors';

/**
 * SMART Backend Services (client_credentials with a private_key_jwt client assertion): the
 * client signs a short-lived JWT with its private key, the token endpoint answers an access
 * token, which is kept until shortly before it expires. The key and tokens come from the caller
 * and never reach a log or an error message.
 */
/** What the write-back reads, searches, creates and updates (SMART v2 scopes). */
const DEFAULT_SCOPE = ['Patient', 'Coverage', 'Organization', 'CoverageEligibilityRequest', 'CoverageEligibilityResponse'].map((t) => `system/${t}.crus`).join(' ');
/**
 * What the FHIR trigger reads and searches: the appointment, its participants and the patient's coverages, and their
 * subscribers and payors kept as a RelatedPerson (read with the Coverage, searched by the poll for changes).
 */
export const READ_SCOPE = ['Appointment', 'Patient', 'Coverage', 'RelatedPerson', 'Practitioner', 'PractitionerRole', 'Location', 'Organization'].map((t) => `system/${t}.rs`).join(' ');

export const SmartBackendAuth = z.strictObject({
  clientId: z.string().min(1),
  /** PEM text, a JWK, or a KeyObject: an RSA key (signs RS384) or a P-384 EC key (signs ES384). */
  privateKey: z.union([z.string().min(1), z.custom<KeyObject>((v) => v instanceof KeyObject), z.record(z.string(), z.unknown())]),
  /** The `kid` of the public key as registered with the server (in its JWKS). */
  keyId: z.string().min(1).optional(),
  /** Default: from `<FHIR base>/.well-known/smart-configuration`. */
  tokenEndpoint: z.string().refine(isHttpUrl, { error: 'must be an http(s) URL' }).optional(),
  scope: z.string().min(1).default(DEFAULT_SCOPE),
});
export type SmartBackendAuth = z.input<typeof SmartBackendAuth>;

export interface AccessTokens {
  /** The Authorization header value, or undefined without auth. */
  authorization(): Promise<string | undefined>;
  /** The server refused the token (401): fetch a new one next time. */
  invalidate(): void;
  /** Whether a refused token can be replaced by a fresh one (SMART), or not (a static token). */
  readonly renewable: boolean;
}

const JWT_LIFETIME_S = 300; // SMART: "no more than five minutes in the future"
const REFRESH_MARGIN_MS = 60_000;

const SmartConfiguration = z.looseObject({ token_endpoint: z.url() });
const TokenAnswer = z.looseObject({
  access_token: z.string().min(1),
  token_type: z.string().refine((t) => t.toLowerCase() === 'bearer', { error: 'must be bearer' }),
  expires_in: z.number().positive().optional(),
});
const OAuthError = z.looseObject({ error: z.string().regex(/^[\x20-\x7e]{1,64}$/) });

export function staticToken(token: string | undefined): AccessTokens {
  return { authorization: async () => (token ? `Bearer ${token}` : undefined), invalidate: () => undefined, renewable: false };
}

export function smartBackendTokens(fhirBaseUrl: string, options: SmartBackendAuth, timeoutMs: number, allowInsecureHttp: boolean): AccessTokens {
  const parsed = SmartBackendAuth.safeParse(options);
  if (!parsed.success) throw new ChartWriteError(`auth: smart.${describeIssue(parsed.error)}`, { retryable: false });
  const config = parsed.data;
  const key = privateKeyOf(config.privateKey);
  const algorithm = algorithmOf(key);
  let cached: { value: string; refreshAt: number } | undefined;
  let pending: Promise<string> | undefined;
  let tokenEndpoint = config.tokenEndpoint && encryptedEndpoint(config.tokenEndpoint, 'smart.tokenEndpoint', allowInsecureHttp);

  async function fetchToken(): Promise<string> {
    tokenEndpoint ??= encryptedEndpoint(await discoverTokenEndpoint(fhirBaseUrl, timeoutMs), 'the token endpoint .well-known/smart-configuration names', allowInsecureHttp);
    const assertion = clientAssertion(config.clientId, tokenEndpoint, key, algorithm, config.keyId);
    const form = new URLSearchParams({
      grant_type: 'client_credentials',
      scope: config.scope,
      client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
      client_assertion: assertion,
    });
    const body = await call('token request', tokenEndpoint, timeoutMs, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
      body: form.toString(),
    });
    const answer = TokenAnswer.safeParse(body);
    if (!answer.success) throw new ChartWriteError(`auth: the token endpoint's answer is not a bearer token (${describeIssue(answer.error)})`, { retryable: false });
    const lifetimeMs = (answer.data.expires_in ?? JWT_LIFETIME_S) * 1000;
    cached = { value: answer.data.access_token, refreshAt: Date.now() + Math.max(lifetimeMs - REFRESH_MARGIN_MS, lifetimeMs / 2) };
    return answer.data.access_token;
  }

  return {
    renewable: true,
    async authorization() {
      if (cached && Date.now() < cached.refreshAt) return `Bearer ${cached.value}`;
      // One token request at a time: concurrent writes wait for the same answer.
      pending ??= fetchToken().finally(() => (pending = undefined));
      return `Bearer ${await pending}`;
    },
    invalidate: () => (cached = undefined),
  };
}

/**
 * A token endpoint the client assertion may go to and the access token come back from: plain http
 * to another machine would carry both unencrypted, and the token opens the chart, so it is refused
 * as the chart's own URL is unless the deployment allows it. A discovered one too: a chart served
 * over https may still name an http endpoint.
 */
function encryptedEndpoint(url: string, named: string, allowInsecureHttp: boolean): string {
  if (isPlainHttpAcrossNetwork(url) && !allowInsecureHttp) {
    throw new ChartWriteError(`auth: ${named}: ${plainHttpRefused(TOKEN_TRAFFIC, 'allowInsecureHttp, DENTAL_ELIG_ALLOW_INSECURE_HTTP=1')}`, { retryable: false });
  }
  return url;
}

function privateKeyOf(key: z.infer<typeof SmartBackendAuth>['privateKey']): KeyObject {
  try {
    if (key instanceof KeyObject) {
      if (key.type !== 'private') throw new Error('not private');
      return key;
    }
    return typeof key === 'string' ? createPrivateKey(key) : createPrivateKey({ key: key as never, format: 'jwk' });
  } catch {
    throw new ChartWriteError('auth: smart.privateKey: is not a private key (PEM, JWK or KeyObject)', { retryable: false });
  }
}

type Algorithm = 'RS384' | 'ES384';

function algorithmOf(key: KeyObject): Algorithm {
  if (key.asymmetricKeyType === 'rsa') return 'RS384';
  if (key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'secp384r1') return 'ES384';
  throw new ChartWriteError('auth: smart.privateKey: must be an RSA key or an EC key on P-384 (SMART signs RS384 or ES384)', { retryable: false });
}

/** The client's signed statement of who it is, for this token endpoint only, valid five minutes. */
export function clientAssertion(clientId: string, audience: string, key: KeyObject, algorithm: Algorithm, keyId?: string): string {
  const now = Math.floor(Date.now() / 1000);
  const header = { alg: algorithm, typ: 'JWT', ...(keyId ? { kid: keyId } : {}) };
  const claims = { iss: clientId, sub: clientId, aud: audience, exp: now + JWT_LIFETIME_S, iat: now, jti: randomUUID() };
  const signingInput = `${base64url(JSON.stringify(header))}.${base64url(JSON.stringify(claims))}`;
  // JWS wants ECDSA signatures as r||s (IEEE P1363), not DER.
  const signature = sign('sha384', Buffer.from(signingInput), algorithm === 'ES384' ? { key, dsaEncoding: 'ieee-p1363' } : key);
  return `${signingInput}.${signature.toString('base64url')}`;
}

const base64url = (text: string) => Buffer.from(text, 'utf8').toString('base64url');

async function discoverTokenEndpoint(fhirBaseUrl: string, timeoutMs: number): Promise<string> {
  const url = `${fhirBaseUrl.replace(/\/+$/, '')}/.well-known/smart-configuration`;
  const body = await call('SMART configuration request', url, timeoutMs, { method: 'GET', headers: { accept: 'application/json' } });
  const parsed = SmartConfiguration.safeParse(body);
  if (!parsed.success) throw new ChartWriteError(`auth: .well-known/smart-configuration names no token endpoint (${describeIssue(parsed.error)})`, { retryable: false });
  return parsed.data.token_endpoint;
}

/** One HTTP exchange with the authorization side; its failures are ChartWriteErrors like the chart's own. */
async function call(step: string, url: string, timeoutMs: number, init: { method: 'GET' | 'POST'; headers: Record<string, string>; body?: string }): Promise<unknown> {
  let status: number;
  let body: unknown;
  try {
    const res = await request(url, { ...init, headersTimeout: timeoutMs, bodyTimeout: timeoutMs, dispatcher: chartAgent });
    status = res.statusCode;
    body = await res.body.json().catch((err: unknown) => (answerTooLarge(err) ? Promise.reject(err) : undefined));
  } catch (err) {
    // Asked again, it would be as large again: for a person to look at.
    if (answerTooLarge(err)) throw new ChartWriteError(`auth: ${tooLargeToRead(`the answer to the ${step}`)}`, { retryable: false });
    throw new ChartWriteError(`auth: the ${step} could not be completed (network)`, { retryable: true });
  }
  if (status >= 200 && status < 300) return body;
  const oauth = OAuthError.safeParse(body);
  throw new ChartWriteError(`auth: the ${step} was answered ${status}${oauth.success ? ` (${oauth.data.error})` : ''}`, {
    retryable: retryableStatus(status) && status !== 409 && status !== 412,
    status,
  });
}
