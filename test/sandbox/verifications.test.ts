import type * as z from 'zod';
import { FAILURE_KINDS, SCENARIOS, startSandbox, UNLISTED_FAILURE_KIND, type Sandbox } from '../../src/sandbox';
import { toOutcome } from '../../src/verification/outcome';
import { Accepted, Verification, VerificationResult } from '../../src/verification/wire';
import { call, FAST, verificationBody } from './helpers';

let sb: Sandbox;
const OTHER = { customerId: 'cus_other', apiKey: 'sk_other_customer' };

beforeEach(async () => {
  sb = await startSandbox({ timing: FAST, seed: true, customers: [OTHER] });
});
afterEach(() => sb.close());

const sync = (body: unknown, key?: string) => call(sb, 'POST', '/v2/insurance-verifications', body, key ? { key } : {});
const asyncRequest = (body: unknown) => call(sb, 'POST', '/v2/insurance-verification-requests', body);

async function verified(memberId: string, overrides = {}) {
  const res = await sync(verificationBody(memberId, overrides));
  expect(res.status).toBe(201);
  return res.body;
}

/** Paths of the schema's elements that no value carries (arrays: any item may carry an element). */
function missingElements(schema: z.ZodType, values: unknown[], path: string, out: string[] = []): string[] {
  let s: any = schema;
  while (['optional', 'nullable'].includes(s._zod.def.type)) s = s._zod.def.innerType;
  const present = values.filter((v) => v !== undefined && v !== null);
  if (present.length === 0) {
    out.push(path);
    return out;
  }
  if (s._zod.def.type === 'object') {
    for (const [key, sub] of Object.entries(s._zod.def.shape)) {
      missingElements(sub as z.ZodType, present.map((v) => (v as Record<string, unknown>)[key]), `${path}.${key}`, out);
    }
  } else if (s._zod.def.type === 'array') {
    missingElements(s._zod.def.element, present.flat(), `${path}[]`, out);
  }
  return out;
}

describe('results', () => {
  test('SBX-COMPLETE carries every element of the result shape (contexts belong to Partial; finalText to v1)', async () => {
    const body = await verified('SBX-COMPLETE');
    expect(body).toMatchObject({ status: 'Completed', correlationId: expect.any(String), completedAt: expect.any(String), sandbox: true });
    const result = VerificationResult.parse(body.result);
    // finalText is what outcome.ts keeps of a v1 percentage that is no number ("Not covered"): no v2 result writes it.
    expect(missingElements(VerificationResult, [result], 'result')).toEqual(['result.data.coinsurance[].percentage.finalText', 'result.contexts']);
    expect(result.verificationProvider?.participation?.status).toBe('Participating');
    expect(result.disclaimers?.map((d) => d?.type)).toEqual(expect.arrayContaining(['CarryOverDetails', 'Sandbox']));
    expect(result.data?.maximums?.[0]).toMatchObject({ carryoverAmount: 250, remainingCarryoverAmount: 250 });
    const ranges = result.data?.coinsurance?.map((c) => c?.percentage?.final) ?? [];
    expect(ranges).toContainEqual({ start: 50, end: 60 });
    expect(ranges).toContainEqual({ start: 100, end: 100 });
    expect(result.plan?.assignment?.office?.officeId).toBe('cln_sandbox_main');
    expect(toOutcome(body)).toMatchObject({ kind: 'completed', warnings: [] });
  });

  test('SBX-PARTIAL: data and contexts naming the portal and data point', async () => {
    const body = await verified('SBX-PARTIAL', { portalId: 'uhcdental', payer: { payerId: '52133' } });
    const outcome = toOutcome(body);
    expect(outcome.kind).toBe('partial');
    if (outcome.kind !== 'partial') return;
    expect(outcome.result.data?.maximums?.length).toBeGreaterThan(0);
    expect(outcome.result.data?.coinsurance).toBeUndefined();
    expect(outcome.result.contexts).toContainEqual(expect.objectContaining({ portalId: 'uhcprovider', dataPoint: 'coinsurance' }));
  });

  test.each(FAILURE_KINDS.map((k) => [k]))('SBX-FAIL-%s: Failed, problem details the client classifies', async (kind) => {
    const body = await verified(`SBX-FAIL-${kind}`);
    const outcome = toOutcome(body);
    expect(outcome.kind).toBe('failed');
    if (outcome.kind !== 'failed') return;
    expect(outcome.failure.kind).toBe(kind);
    expect(outcome.failure.action).not.toBe('unknown');
    expect(outcome.problem).toMatchObject({ title: expect.any(String), detail: expect.any(String) });
    expect(outcome.problem.upstreamErrors).toEqual([{ detail: expect.any(String), portalId: 'deltadentalins' }]);
    expect(outcome.problem).not.toHaveProperty('details');
  });

  test('SBX-FAIL-UNLISTED: a kind the client does not know is kept as it is', async () => {
    const outcome = toOutcome(await verified('sbx-fail-unlisted'));
    expect(outcome.kind === 'failed' && outcome.failure).toEqual({ kind: UNLISTED_FAILURE_KIND, action: 'unknown', advice: expect.stringMatching(/^The service gave a failure this plugin does not know/) });
  });

  test('SBX-FAIL-<any other kind>: Failed with that kind, never a silent Completed; a malformed kind is a 422 naming the member id', async () => {
    const outcome = toOutcome(await verified('SBX-FAIL-PlanTerminatedYesterday'));
    expect(outcome.kind).toBe('failed');
    expect(outcome.kind === 'failed' && outcome.failure).toEqual({ kind: 'PlanTerminatedYesterday', action: 'unknown', advice: expect.stringMatching(/^The service gave a failure this plugin does not know/) });
    expect(outcome.kind === 'failed' && outcome.problem.detail).toBe('The verification failed (PlanTerminatedYesterday).');
    const malformed = await sync(verificationBody('SBX-FAIL-'));
    expect(malformed.status).toBe(422);
    expect(malformed.body.errors).toEqual([expect.objectContaining({ field: 'subscriber.memberId', code: 'invalid_value' })]);
  });

  test('SBX-MINIMAL and SBX-OUT-OF-NETWORK', async () => {
    const minimal = VerificationResult.parse((await verified('SBX-MINIMAL')).result);
    expect(Object.keys(minimal).sort()).toEqual(['data', 'disclaimers', 'plan']);
    const oon = VerificationResult.parse((await verified('SBX-OUT-OF-NETWORK')).result);
    expect(oon.verificationProvider?.participation?.status).toBe('Non-Participating');
    expect(new Set(oon.data?.coinsurance?.map((c) => c?.network))).toEqual(new Set(['OutOfNetwork']));
  });

  test('legacy v1 shapes are served for the client to normalise', async () => {
    const coins = toOutcome(await verified('SBX-LEGACY-COINSURANCE'));
    expect(coins.warnings).toEqual([expect.stringMatching(/percentage\.final/)]);
    expect(coins.kind === 'completed' && coins.result.data?.coinsurance?.[3]?.percentage?.final).toEqual({ start: 50, end: 60 });
    const err = toOutcome(await verified('SBX-LEGACY-ERROR'));
    expect(err.kind === 'failed' && err.failure.kind).toBe('PatientNotFound');
    expect(err.warnings).toEqual([expect.stringMatching(/v1 error shape/)]);
  });

  test('any other member: a plausible Completed result from the request, the same every time', async () => {
    const a = await verified('DD1234567');
    const b = await verified('DD1234567', { externalId: 'another' });
    const result = VerificationResult.parse(a.result);
    expect(b.result).toEqual(a.result);
    expect(result.subscriber).toMatchObject({ memberId: 'DD1234567', relationship: 'Self', firstName: 'Ellen' });
    expect(result.plan).toMatchObject({ status: 'Active', groupNumber: 'GRP-778812', payer: { payerId: 'CDCA1' }, benefitPeriod: { start: '2026-01-01', end: '2026-12-31' } });
    const max = result.data?.maximums?.[0];
    expect((max?.amount ?? 0) - (max?.usedAmount ?? 0)).toBe(max?.remainingAmount);
    expect(result.data?.coinsurance?.some((c) => c?.category === 'Orthodontics')).toBe(false);
    expect(result.disclaimers).toContainEqual(expect.objectContaining({ type: 'Sandbox' }));

    const child = VerificationResult.parse(
      (await verified('DD7654321', { patient: { firstName: 'Max', lastName: 'Whitaker', dateOfBirth: '2015-06-01' }, subscriber: { ...verificationBody('DD7654321').subscriber, relationship: 'Child' } })).result,
    );
    expect(child.data?.coinsurance?.some((c) => c?.category === 'Orthodontics')).toBe(true);
    // The request's relationship is the patient's to the subscriber, who is their own: a parent charted as Child misreads.
    expect([child.patient?.relationship, child.subscriber?.relationship]).toEqual(['Child', 'Self']);
  });

  test('a DHMO plan names the assigned office; a Medicaid plan has no maximums', async () => {
    const dhmo = VerificationResult.parse((await verified('DC555', { payer: { payerId: '94276', name: 'DeltaCare USA' } })).result);
    expect(dhmo.plan).toMatchObject({ type: 'DHMO', assignment: { office: { officeId: 'cln_sandbox_main' } } });
    const medicaid = VerificationResult.parse((await verified('MC555', { payer: { name: 'Medi-Cal Dental' }, portalId: 'medi-cal-dental' })).result);
    expect(medicaid.plan?.type).toBe('Medicaid');
    expect(medicaid.data?.maximums).toEqual([]);
  });

  test('every listed scenario answers as README says it does', async () => {
    const http = { 'SBX-503': 503, 'SBX-503-TWICE': 503, 'SBX-429-ONCE': 429 } as Record<string, number>;
    for (const s of SCENARIOS.filter((x) => x.scenario.kind !== 'slow')) {
      const res = await sync(verificationBody(s.memberId));
      expect([s.memberId, res.status]).toEqual([s.memberId, http[s.memberId] ?? 201]);
    }
  });
});

describe('inline credentials and portal logins', () => {
  test('inline credentials need no clinic; refused ones give Failed InvalidCredentials', async () => {
    const base = verificationBody('DD1', { credentials: { username: 'me', password: 'pw' } });
    delete base.clinicId;
    delete base.portalId;
    expect((await sync(base)).body.status).toBe('Completed');
    const refused = await sync({ ...base, credentials: { username: 'me', password: 'wrong' } });
    expect(toOutcome(refused.body)).toMatchObject({ kind: 'failed', failure: { kind: 'InvalidCredentials' } });
  });

  test('stored credentials the portal refuses give Failed InvalidCredentials', async () => {
    await call(sb, 'PATCH', '/v2/clinics/cln_sandbox_main/portals/deltadentalins/credentials', { password: 'expired-2019' });
    expect(toOutcome(await verified('DD1'))).toMatchObject({ kind: 'failed', failure: { kind: 'InvalidCredentials' } });
  });

  test('a verification logs in, so the 2FA code arrives for the registration', async () => {
    const regs = (await call(sb, 'GET', '/v2/payer-portal-registrations?clinicId=cln_sandbox_main&portalId=deltadentalins')).body.items;
    const before = (await call(sb, 'GET', `/v2/payer-portal-registrations/${regs[0].correlationId}/emails`)).body.items.length;
    await verified('DD1');
    const after = (await call(sb, 'GET', `/v2/payer-portal-registrations/${regs[0].correlationId}/emails`)).body.items;
    expect(after).toHaveLength(before + 1);
    expect(after.at(-1).body).toMatch(/code is \d{6}/);
  });

  test('a portal down for maintenance fails every verification sent to it with SiteMaintenance, whatever the member id, until it is brought back', async () => {
    sb.portalMaintenance('deltadentalins', true);
    expect(toOutcome(await verified('DD1'))).toMatchObject({ kind: 'failed', failure: { kind: 'SiteMaintenance' } });
    sb.portalMaintenance('deltadentalins', false);
    expect((await verified('DD1')).status).toBe('Completed');
    expect(() => sb.portalMaintenance('no-such-portal', true)).toThrow('no portal no-such-portal');
  });

  test('a portal that switched to SMS fails with TwoFactorAuthenticationConfiguration until the registration is re-evaluated', async () => {
    sb.updatePortal('deltadentalins', { authenticationMethods: ['TwoFactorSms'] });
    const path = '/v2/clinics/cln_sandbox_main/portals/deltadentalins/credentials';
    expect((await sync(verificationBody('DD1'))).body.errors[0].code).toBe('mfa_phone_missing');
    await call(sb, 'PATCH', path, { mfaPhoneNumber: '+12025550100' });
    expect(toOutcome(await verified('DD1'))).toMatchObject({ failure: { kind: 'TwoFactorAuthenticationConfiguration' } });
    const reg = (await call(sb, 'PATCH', '/v2/payer-portal-registrations/offices/cln_sandbox_main/portals/deltadentalins', {})).body;
    await call(sb, 'PATCH', path, { mfaPhoneNumber: reg.registeredPhoneNumber });
    expect((await verified('DD1')).status).toBe('Completed');
  });
});

describe('checks, in the service order', () => {
  const codeOf = async (body: unknown, mode: 'sync' | 'async' = 'sync') => {
    const res = mode === 'sync' ? await sync(body) : await asyncRequest(body);
    expect(res.status).toBe(422);
    expect(res.headers['content-type']).toBe('application/problem+json');
    return res.body.errors.map((e: { field: string; code: string }) => `${e.field}:${e.code}`);
  };

  test('1. clinicId and portalId are required without inline credentials; the body is checked field by field', async () => {
    const body = verificationBody('DD1');
    delete body.clinicId;
    delete body.portalId;
    expect(await codeOf(body)).toEqual(['clinicId:required', 'portalId:required']);
    expect(await codeOf({ ...verificationBody('DD1'), dateOfService: '12/01/2026', patient: { firstName: 'A' }, ssn: 'x' })).toEqual([
      'patient.lastName:required',
      'patient.dateOfBirth:required',
      'dateOfService:invalid_value',
      'ssn:unknown_field',
    ]);
    expect(await codeOf({ ...verificationBody('DD1'), payer: {} })).toEqual(['payer:required']);
  });

  test('2. the payer must be in the network (by common or alternate id, or name; never the primary id)', async () => {
    expect(await codeOf(verificationBody('DD1', { payer: { name: 'Nowhere Dental' } }))).toEqual(['payer:payer_not_in_network']);
    expect(await codeOf(verificationBody('DD1', { payer: { payerId: 'X26ZCF' } }))).toEqual(['payer.payerId:primary_payer_id_not_accepted']);
    expect(await codeOf(verificationBody('DD1', { payer: { payerId: '94276' } }))).toEqual(['payer.payerId:ambiguous']);
    expect((await sync(verificationBody('DD1', { payer: { payerId: '77777' } }))).status).toBe(201);
    expect((await sync(verificationBody('DD1', { payer: { name: 'delta dental of california' } }))).status).toBe(201);
    expect((await sync(verificationBody('DD1', { payer: { payerId: '94276', name: 'Delta Dental Insurance Company' } }))).status).toBe(201);
  });

  test('3. the payer must support the mode', async () => {
    expect(await codeOf(verificationBody('DD1', { payer: { name: 'Guardian' }, portalId: 'guardiananytime' }), 'async')).toEqual(['payer:async_not_supported']);
    expect(await codeOf(verificationBody('DD1', { payer: { name: 'Ameritas' }, portalId: 'ameritas' }))).toEqual(['payer:sync_not_supported']);
  });

  test("4. the portal must be one of the payer's for the mode, and need authentication for async with stored credentials", async () => {
    expect(await codeOf(verificationBody('DD1', { portalId: 'metdental' }))).toEqual(['portalId:portal_not_supported']);
    const principal = { payer: { payerId: '61271' }, portalId: 'principal-benefit-line' };
    expect(await codeOf(verificationBody('DD1', principal), 'async')).toEqual(['portalId:portal_requires_no_authentication']);
    expect((await sync(verificationBody('DD1', principal))).status).toBe(201);
  });

  test('5 to 8: stored credentials, login method, MFA email, MFA phone', async () => {
    const org = (await call(sb, 'POST', '/v2/organizations', { customerId: sb.customerId, name: 'New' })).body;
    const clinicId = (await call(sb, 'POST', '/v2/clinics', { organizationId: org.organizationId, name: 'New' })).body.clinicId;
    const body = verificationBody('DD1', { clinicId });
    expect(await codeOf(body, 'async')).toEqual(['portalId:credentials_not_stored']);
    const creds = `/v2/clinics/${clinicId}/portals/deltadentalins/credentials`;
    await call(sb, 'POST', creds, { username: 'u', password: 'p', loginMethod: 'SSO' });
    expect(await codeOf(body, 'async')).toEqual(['loginMethod:login_method_mismatch']);
    await call(sb, 'PATCH', creds, { loginMethod: 'Native' });
    expect(await codeOf(body, 'async')).toEqual(['mfaEmail:mfa_email_missing']);
    await call(sb, 'PATCH', creds, { mfaEmail: 'mfa@example.com' });
    expect((await asyncRequest(body)).status).toBe(201);

    const cigna = verificationBody('DD1', { clinicId, payer: { payerId: '62308' }, portalId: 'cignaforhcp' });
    await call(sb, 'POST', `/v2/clinics/${clinicId}/portals/cignaforhcp/credentials`, { username: 'u', password: 'p', loginMethod: 'Native' });
    expect(await codeOf(cigna, 'async')).toEqual(['mfaPhoneNumber:mfa_phone_missing']);
  });

  test('the first failing check is the one reported', async () => {
    const org = (await call(sb, 'POST', '/v2/organizations', { customerId: sb.customerId, name: 'New' })).body;
    const clinicId = (await call(sb, 'POST', '/v2/clinics', { organizationId: org.organizationId, name: 'New' })).body.clinicId;
    // No credentials stored (5), and the payer is unknown (2): 2 wins.
    expect(await codeOf(verificationBody('DD1', { clinicId, payer: { name: 'Nowhere Dental' } }), 'async')).toEqual(['payer:payer_not_in_network']);
  });

  test('404 for an unknown clinic or verification; 403 for another customer', async () => {
    expect((await sync(verificationBody('DD1', { clinicId: 'cln_missing' }))).status).toBe(404);
    expect((await sync(verificationBody('DD1'), OTHER.apiKey)).status).toBe(403);
    expect((await call(sb, 'GET', '/v2/insurance-verifications/00000000-0000-4000-8000-000000000000')).status).toBe(404);
    const mine = await verified('DD1');
    expect((await call(sb, 'GET', `/v2/insurance-verifications/${mine.correlationId}`, undefined, { key: OTHER.apiKey })).status).toBe(403);
  });
});

describe('availability, retries and idempotency', () => {
  test('SBX-503: 503 problem details with Retry-After, every time', async () => {
    for (let i = 0; i < 3; i++) {
      const res = await sync(verificationBody('SBX-503'));
      expect(res.status).toBe(503);
      expect(res.headers['retry-after']).toBe('0');
      expect(res.body.type).toMatch(/ServiceUnavailable$/);
    }
  });

  test('SBX-503-TWICE: 503, 503, then 201; the retried request makes one verification', async () => {
    const body = verificationBody('SBX-503-TWICE', { externalId: 'elig_abc' });
    expect((await sync(body)).status).toBe(503);
    expect((await sync(body)).status).toBe(503);
    const third = await sync(body);
    expect(third.status).toBe(201);
    const fourth = await sync(body);
    expect(fourth.body.correlationId).toBe(third.body.correlationId);
    expect(third.body.externalId).toBe('elig_abc');
  });

  test('SBX-429-ONCE: 429 with Retry-After, then 201', async () => {
    const first = await sync(verificationBody('SBX-429-ONCE'));
    expect(first.status).toBe(429);
    expect(first.headers['retry-after']).toBe('0');
    expect((await sync(verificationBody('SBX-429-ONCE'))).status).toBe(201);
  });

  test('the same externalId with a different body is a conflict', async () => {
    await verified('DD1', { externalId: 'elig_1' });
    const res = await sync(verificationBody('DD2', { externalId: 'elig_1' }));
    expect(res.body.errors).toEqual([expect.objectContaining({ field: 'externalId', code: 'conflict' })]);
  });

  test('SBX-SLOW holds the synchronous answer back', async () => {
    const started = Date.now();
    expect((await sync(verificationBody('SBX-SLOW'))).status).toBe(201);
    expect(Date.now() - started).toBeGreaterThanOrEqual(FAST.slowMs - 5);
  });
});

describe('asynchronous verification', () => {
  test('201 Pending, GET Pending until done, then the outcome; no webhook configured means the delivery is skipped', async () => {
    await sb.close();
    // Long enough that the first GET surely comes before completion, even on a loaded machine.
    sb = await startSandbox({ timing: { ...FAST, asyncCompletionMs: 400 }, seed: true });
    const res = await asyncRequest(verificationBody('SBX-PARTIAL', { externalId: 'elig_async' }));
    expect(res.status).toBe(201);
    const accepted = Accepted.parse(res.body);
    expect(accepted.status).toBe('Pending');
    const pending = Verification.parse((await call(sb, 'GET', `/v2/insurance-verifications/${accepted.correlationId}`)).body);
    expect(pending.status).toBe('Pending');
    expect(pending.result).toBeUndefined();
    expect(toOutcome(pending).kind).toBe('pending');
    await sb.settle();
    const done = (await call(sb, 'GET', `/v2/insurance-verifications/${accepted.correlationId}`)).body;
    expect(toOutcome(done).kind).toBe('partial');
    expect(done.externalId).toBe('elig_async');
    expect(sb.webhookDeliveries()).toEqual([expect.objectContaining({ correlationId: accepted.correlationId, state: 'skipped' })]);
    // The same request again: the same verification.
    expect((await asyncRequest(verificationBody('SBX-PARTIAL', { externalId: 'elig_async' }))).body.correlationId).toBe(accepted.correlationId);
  });
});

describe('claims retrieval', () => {
  const claim = (memberId: string, extra = {}) => ({
    clinicId: 'cln_sandbox_main',
    portalId: 'deltadentalins',
    payer: { payerId: 'CDCA1' },
    subscriber: { firstName: 'Ellen', lastName: 'Whitaker', memberId },
    patient: { firstName: 'Ellen', lastName: 'Whitaker', dateOfBirth: '1978-03-14' },
    serviceDateFrom: '2026-01-01',
    serviceDateTo: '2026-06-30',
    ...extra,
  });

  test('201 with a correlationId; 404 for no claims, an unknown clinic or portal; 422 on bad input', async () => {
    expect(Accepted.parse((await call(sb, 'POST', '/v2/claim-retrieval-requests', claim('DD1'))).body).status).toBe('Pending');
    expect((await call(sb, 'POST', '/v2/claim-retrieval-requests', claim('SBX-NO-CLAIMS'))).status).toBe(404);
    expect((await call(sb, 'POST', '/v2/claim-retrieval-requests', claim('DD1', { clinicId: 'cln_x' }))).status).toBe(404);
    expect((await call(sb, 'POST', '/v2/claim-retrieval-requests', claim('DD1', { portalId: 'nope' }))).status).toBe(404);
    const reversed = await call(sb, 'POST', '/v2/claim-retrieval-requests', claim('DD1', { serviceDateFrom: '2026-07-01' }));
    expect(reversed.body.errors[0]).toMatchObject({ field: 'serviceDateTo', code: 'invalid_value' });
  });

  test('a repeated POST with the same externalId is the same retrieval; another body under that key is a conflict', async () => {
    const first = await call(sb, 'POST', '/v2/claim-retrieval-requests', claim('DD1', { externalId: 'claims-1' }));
    const again = await call(sb, 'POST', '/v2/claim-retrieval-requests', claim('DD1', { externalId: 'claims-1' }));
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.body.correlationId).toBe(first.body.correlationId);
    const other = await call(sb, 'POST', '/v2/claim-retrieval-requests', claim('DD2', { externalId: 'claims-1' }));
    expect(other.status).toBe(422);
    expect(other.body.errors[0]).toMatchObject({ field: 'externalId', code: 'conflict' });
    const withoutKey = await call(sb, 'POST', '/v2/claim-retrieval-requests', claim('DD1'));
    expect(withoutKey.body.correlationId).not.toBe(first.body.correlationId);
  });
});
