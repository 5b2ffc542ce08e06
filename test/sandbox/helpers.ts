import { request } from 'undici';
import type { Sandbox } from '../../src/sandbox';
import type { VerificationRequest } from '../../src/verification/wire';

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** Parsed JSON when the answer is JSON, the text otherwise, undefined when empty. */
  body: any;
}

/** One request to the sandbox over real HTTP, with its API key unless told otherwise. */
export async function call(
  sandbox: Sandbox,
  method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE',
  path: string,
  body?: unknown,
  options: { key?: string | null; headers?: Record<string, string>; raw?: string } = {},
): Promise<Answer> {
  const key = options.key === undefined ? sandbox.apiKey : options.key;
  const headers: Record<string, string> = {
    ...(key === null ? {} : { authorization: `Bearer ${key}` }),
    ...(body !== undefined || options.raw !== undefined ? { 'content-type': 'application/json' } : {}),
    ...options.headers,
  };
  const res = await request(`${sandbox.url}${path}`, {
    method,
    headers,
    body: options.raw ?? (body === undefined ? undefined : JSON.stringify(body)),
  });
  const text = await res.body.text();
  const type = String(res.headers['content-type'] ?? '');
  return {
    status: res.statusCode,
    headers: res.headers,
    body: text === '' ? undefined : type.includes('json') ? JSON.parse(text) : text,
  };
}

/** A verification request for a member, with stored credentials on the demo practice's main clinic. */
export function verificationBody(memberId: string, overrides: Partial<VerificationRequest> = {}): VerificationRequest {
  return {
    clinicId: 'cln_sandbox_main',
    portalId: 'deltadentalins',
    payer: { payerId: 'CDCA1', name: 'Delta Dental of California' },
    patient: { firstName: 'Ellen', middleName: 'M', lastName: 'Whitaker', dateOfBirth: '1978-03-14', gender: 'F' },
    subscriber: { firstName: 'Ellen', lastName: 'Whitaker', dateOfBirth: '1978-03-14', memberId, relationship: 'Self', groupNumber: 'GRP-778812' },
    provider: { npi: '1234567893', taxId: '12-3456789', firstName: 'Dana', lastName: 'Okafor' },
    dateOfService: '2026-12-01',
    ...overrides,
  };
}

/** Fast timings for tests. */
export const FAST = {
  asyncCompletionMs: 30,
  validationMs: 40,
  slowMs: 300,
  retryAfterSeconds: 0,
  webhookBackoffMs: 20,
  webhookTimeoutMs: 2000,
} as const;
