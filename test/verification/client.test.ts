import { startSandbox, generateWebhookSecret, NO_CLAIMS_MEMBER_ID, type Sandbox } from '../../src/sandbox';
import { VerificationClient } from '../../src/verification/client';
import { ServiceError } from '../../src/verification/errors';
import { startWebhookServer, type WebhookDelivery } from '../../src/verification/webhook';
import type { VerificationRequest } from '../../src/verification/wire';
import { toCoverageEligibilityResponse } from '../../src/adapters/fhir/out';
import { validateR4 } from '../../src/adapters/fhir/validate';
import { CREATED, readResult, RESULT_REFS } from '../adapters/fhir/corpus';
import { json, startScriptedServer } from '../support/http-server';

/**
 * Every client operation against the embedded sandbox, over real HTTP on loopback.
 */
const timing = { asyncCompletionMs: 50, validationMs: 60, webhookBackoffMs: 20, retryAfterSeconds: 0 };
const fast = { retryMinDelayMs: 5, retryMaxDelayMs: 50 };
const waitFast = { firstDelayMs: 20, maxDelayMs: 50, timeoutMs: 5000 };

function request(memberId: string, overrides: Partial<VerificationRequest> = {}): VerificationRequest {
  return {
    clinicId: 'cln_sandbox_main',
    portalId: 'deltadentalins',
    payer: { payerId: 'CDCA1', name: 'Delta Dental of California' },
    patient: { firstName: 'Ellen', lastName: 'Whitaker', dateOfBirth: '1978-03-14', gender: 'F' },
    subscriber: { firstName: 'Ellen', lastName: 'Whitaker', dateOfBirth: '1978-03-14', memberId, relationship: 'Self', groupNumber: 'GRP-1' },
    provider: { npi: '1234567893' },
    dateOfService: '2026-12-01',
    ...overrides,
  };
}

let sandbox: Sandbox;
let client: VerificationClient;

beforeAll(async () => {
  sandbox = await startSandbox({ seed: true, timing, customers: [{ customerId: 'cus_other', apiKey: 'sk_other' }] });
  client = new VerificationClient({ baseUrl: sandbox.url, apiKey: sandbox.apiKey, ...fast });
});
afterAll(async () => {
  await client.close();
  await sandbox.close();
});

describe('organizations and clinics', () => {
  it('creates, gets and lists, following cursors', async () => {
    const org = await client.createOrganization({ customerId: sandbox.customerId, name: 'Lakeside Dental' });
    expect(org.organizationId).toMatch(/\S/);
    expect(await client.getOrganization(org.organizationId)).toMatchObject({ name: 'Lakeside Dental' });
    const clinics = await Promise.all(['A', 'B', 'C'].map((n) => client.createClinic({ organizationId: org.organizationId, name: `Office ${n}`, npi: '1234567893' })));
    expect(await client.getClinic(clinics[1]?.clinicId ?? '')).toMatchObject({ name: 'Office B', organizationId: org.organizationId });
    const firstPage = await client.listClinics(org.organizationId, { limit: 2 });
    expect(firstPage.items).toHaveLength(2);
    expect(firstPage.nextCursor).toBeTruthy();
    const all = [];
    for await (const c of client.all((page) => client.listClinics(org.organizationId, page), { limit: 2 })) all.push(c.name);
    expect(all.sort()).toEqual(['Office A', 'Office B', 'Office C']);
    const orgs = [];
    for await (const o of client.all((page) => client.listOrganizations(sandbox.customerId, page))) orgs.push(o.organizationId);
    expect(orgs).toContain(org.organizationId);
  });

  it('refuses a clinic body that breaks the wire schema before sending it', async () => {
    const before = sandbox.requestLog.length;
    const err = (await client.createClinic({ organizationId: 'o', name: 'x', npi: '12' }).catch((e: unknown) => e)) as ServiceError;
    expect(err).toBeInstanceOf(ServiceError);
    expect(err.code).toBe('invalid_request');
    expect(err.message).toBe('create clinic failed (invalid_request) - Request not sent - npi: must be 10 digits');
    expect(sandbox.requestLog.length).toBe(before);
  });
});

describe('payer and portal network', () => {
  it('pages the payer network and filters by updatedSince', async () => {
    const payers = [];
    for await (const p of client.all((page) => client.listPayers(page), { limit: 5 })) payers.push(p);
    expect(payers.length).toBeGreaterThan(10);
    expect(payers.some((p) => p.features?.insuranceVerificationAsynchronous?.supported)).toBe(true);
    const since = new Date(Date.now() + 1000).toISOString();
    expect((await client.listPayers({ updatedSince: since })).items).toEqual([]);
    const portals = (await client.listPortals({ limit: 100 })).items;
    expect(portals.find((p) => p.portalId === 'deltadentalwa')?.authenticationMethods).toEqual(['TwoFactorSms']);
  });
});

describe('portal registrations', () => {
  it('provisions an email, and a phone only for SMS portals, and lists their messages', async () => {
    const emailPortal = await client.createRegistration({ clinicId: 'cln_sandbox_main', portalId: 'guardiananytime' });
    expect(emailPortal.registeredEmail).toMatch(/@/);
    expect(emailPortal.registeredPhoneNumber ?? undefined).toBeUndefined();
    const smsPortal = await client.createRegistration({ clinicId: 'cln_sandbox_main', portalId: 'cignaforhcp' });
    expect(smsPortal.registeredPhoneNumber).toMatch(/^\+1/);
    expect((await client.registrationEmails(emailPortal.correlationId)).items.length).toBeGreaterThan(0);
    expect((await client.registrationSmsMessages(smsPortal.correlationId)).items.length).toBeGreaterThan(0);
    expect((await client.listEmails({ limit: 100 })).items.length).toBeGreaterThan(0);
    expect((await client.listSmsMessages()).items.length).toBeGreaterThan(0);
    const regs = [];
    for await (const r of client.all((page) => client.listRegistrations(page))) regs.push(r.correlationId);
    expect(regs).toEqual(expect.arrayContaining([emailPortal.correlationId, smsPortal.correlationId]));
    const again = await client.reevaluateRegistration('cln_sandbox_main', 'cignaforhcp');
    expect(again.portalId).toBe('cignaforhcp');
  });
});

describe('credentials', () => {
  it('stores, reads (never the password), updates and answers 304 when nothing changed', async () => {
    const clinic = await client.createClinic({ organizationId: 'org_sandbox_bright_smiles', name: 'Creds Office' });
    const reg = await client.createRegistration({ clinicId: clinic.clinicId, portalId: 'metdental' });
    await client.createCredentials(clinic.clinicId, 'metdental', { username: 'office1', password: 's3cret!', loginMethod: 'Native', mfaEmail: reg.registeredEmail });
    const stored = await client.getCredentials(clinic.clinicId, 'metdental');
    expect(stored.username).toBe('office1');
    expect(JSON.stringify(stored)).not.toContain('s3cret!');
    expect(await client.updateCredentials(clinic.clinicId, 'metdental', { username: 'office2' })).toMatchObject({ changed: true });
    expect(await client.updateCredentials(clinic.clinicId, 'metdental', { username: 'office2' })).toEqual({ changed: false });
  });

  it('validates stored credentials, waiting with backoff until Valid or Invalid', async () => {
    const polls: string[] = [];
    const ok = await client.requestCredentialsValidation({ clinicId: 'cln_sandbox_main', portalId: 'metdental' });
    const final = await client.waitForCredentialsValidation(ok.correlationId, { ...waitFast, onPoll: (s) => polls.push(s) });
    expect(final.status).toBe('Valid');
    expect(polls.at(-1)).toBe('Valid');
    const bad = await client.requestCredentialsValidation({ portalId: 'metdental', credentials: { username: 'invalid-user', password: 'x' } });
    expect((await client.waitForCredentialsValidation(bad.correlationId, waitFast)).status).toBe('Invalid');
  });

  it('waits at least the first delay before the first poll', async () => {
    const slept: number[] = [];
    const req = await client.requestCredentialsValidation({ clinicId: 'cln_sandbox_main', portalId: 'metdental' });
    await client.waitForCredentialsValidation(req.correlationId, {
      sleep: async (ms) => {
        slept.push(ms);
        await new Promise((r) => setTimeout(r, 40));
      },
    });
    expect(slept[0]).toBe(3000);
    if (slept.length > 1) expect(slept[1]).toBeGreaterThan(3000);
  });
});

describe('insurance verification', () => {
  it('verifies synchronously: a Completed outcome with the full result', async () => {
    const outcome = await client.verify(request('SBX-COMPLETE', { externalId: 'ext-sync-1' }));
    expect(outcome.kind).toBe('completed');
    if (outcome.kind !== 'completed') return;
    expect(outcome.result.data?.coinsurance?.some((c) => (c?.percentage?.final?.start ?? 0) < (c?.percentage?.final?.end ?? 0))).toBe(true);
    expect(outcome.result.plan?.assignment).toBeTruthy();
    expect(outcome.result.verificationProvider?.participation?.status).toBe('Participating');
  });

  it('reports Partial and Failed outcomes with their kinds', async () => {
    expect((await client.verify(request('SBX-PARTIAL'))).kind).toBe('partial');
    const failed = await client.verify(request('SBX-FAIL-PatientNotFound'));
    expect(failed.kind === 'failed' && failed.failure).toMatchObject({ kind: 'PatientNotFound', action: 'needs-a-person' });
    const legacy = await client.verify(request('SBX-LEGACY-COINSURANCE'));
    expect(legacy.warnings).toEqual(['v1 coinsurance percentage.final strings normalised to {start, end}']);
  });

  it('retries a verification carrying externalId through two 503s to the 201', async () => {
    const before = sandbox.requestLog.length;
    const outcome = await client.verify(request('SBX-503-TWICE', { externalId: 'ext-retry-1' }));
    expect(outcome.kind).toBe('completed');
    const posts = sandbox.requestLog.slice(before).filter((r) => r.path === '/v2/insurance-verifications');
    expect(posts.map((r) => r.status)).toEqual([503, 503, 201]);
  });

  it('does not repeat a verification without externalId, and reports the 503', async () => {
    const before = sandbox.requestLog.length;
    const err = (await client.verify(request('SBX-503')).catch((e: unknown) => e)) as ServiceError;
    expect(err).toBeInstanceOf(ServiceError);
    expect(err.status).toBe(503);
    expect(sandbox.requestLog.slice(before).filter((r) => r.path === '/v2/insurance-verifications')).toHaveLength(1);
  });

  it('verifies asynchronously: Pending, then the signed webhook and GET agree', async () => {
    const secret = generateWebhookSecret();
    const delivered: WebhookDelivery[] = [];
    const requested = new Set<string>();
    const receiver = await startWebhookServer({
      auth: { scheme: 'standard-webhooks', secret },
      isKnownCorrelationId: (id) => requested.has(id),
      onDelivery: async (d) => {
        delivered.push(d);
      },
    });
    sandbox.configureWebhook({ url: receiver.url, secret });
    try {
      const accepted = await client.requestVerification(request('SBX-COMPLETE', { externalId: 'ext-async-1' }));
      requested.add(accepted.correlationId);
      expect((await client.getVerification(accepted.correlationId)).kind).toBe('pending');
      const outcome = await client.waitForVerification(accepted.correlationId, waitFast);
      expect(outcome.kind).toBe('completed');
      await sandbox.settle();
      expect(delivered).toHaveLength(1);
      expect(delivered[0]?.outcome.verification.correlationId).toBe(accepted.correlationId);
      expect(sandbox.webhookDeliveries().at(-1)?.state).toBe('delivered');
      // The same externalId again is the same verification, not a second one.
      expect((await client.requestVerification(request('SBX-COMPLETE', { externalId: 'ext-async-1' }))).correlationId).toBe(accepted.correlationId);
    } finally {
      sandbox.configureWebhook(undefined);
      await receiver.close();
    }
  });

  it('gets a 422 naming the field when the payer does not take asynchronous verification', async () => {
    const err = (await client
      .requestVerification(request('M1', { payer: { payerId: 'CDWA1', name: 'Delta Dental of Washington' }, portalId: 'deltadentalwa' }))
      .catch((e: unknown) => e)) as ServiceError;
    expect(err.status).toBe(422);
    expect(err.problem.errors?.length).toBeGreaterThan(0);
    expect(err.fieldErrors[0]).toMatch(/^payer/);
  });

  it('requests claim retrieval, and reports an unknown member as 404', async () => {
    const claim = {
      clinicId: 'cln_sandbox_main',
      portalId: 'deltadentalins',
      payer: { payerId: 'CDCA1' },
      subscriber: { firstName: 'Ellen', lastName: 'Whitaker', memberId: 'M1' },
      patient: { firstName: 'Ellen', lastName: 'Whitaker', dateOfBirth: '1978-03-14' },
      serviceDateFrom: '2026-01-01',
      serviceDateTo: '2026-06-30',
    };
    expect((await client.requestClaimRetrieval(claim)).correlationId).toMatch(/\S/);
    const err = (await client
      .requestClaimRetrieval({ ...claim, subscriber: { ...claim.subscriber, memberId: NO_CLAIMS_MEMBER_ID } })
      .catch((e: unknown) => e)) as ServiceError;
    expect(err.status).toBe(404);
  });
});

describe('a service that writes its timestamps as .NET and Java do', () => {
  it('reads +0000 as +00:00 and a timestamp without offset as UTC, synchronously and polled, and the chart\'s response validates', async () => {
    const answer = { ...(readResult('completed-full') as { correlationId: string; externalId: string }), createdAt: '2026-11-24T10:00:00+0000', completedAt: '2026-11-24T10:00:03.1234567' };
    const server = await startScriptedServer((_r, res) => json(res, 200, answer));
    const other = new VerificationClient({ baseUrl: server.url, apiKey: 'k', ...fast });
    try {
      for (const outcome of [await other.verify(request('SBX-COMPLETE', { externalId: answer.externalId })), await other.getVerification(answer.correlationId)]) {
        expect(outcome.kind).toBe('completed');
        expect([outcome.verification.createdAt, outcome.verification.completedAt]).toEqual(['2026-11-24T10:00:00+00:00', '2026-11-24T10:00:03.1234567Z']);
        const response = toCoverageEligibilityResponse(outcome, RESULT_REFS, { created: CREATED });
        expect(response.extension?.filter((e) => e.valueDateTime !== undefined).map((e) => e.valueDateTime)).toEqual(['2026-11-24T10:00:00+00:00', '2026-11-24T10:00:03.1234567Z']);
        expect(validateR4(response)).toEqual([]);
      }
    } finally {
      await Promise.all([other.close(), server.close()]);
    }
  });
});

describe('error statuses', () => {
  it('401 without a valid key', async () => {
    const stranger = new VerificationClient({ baseUrl: sandbox.url, apiKey: 'sk_nobody' });
    try {
      const err = (await stranger.getClinic('cln_sandbox_main').catch((e: unknown) => e)) as ServiceError;
      expect(err.status).toBe(401);
      expect(err.problem.title).toBeTruthy();
    } finally {
      await stranger.close();
    }
  });

  it("403 on another customer's clinic", async () => {
    const other = new VerificationClient({ baseUrl: sandbox.url, apiKey: 'sk_other' });
    try {
      expect(((await other.getClinic('cln_sandbox_main').catch((e: unknown) => e)) as ServiceError).status).toBe(403);
    } finally {
      await other.close();
    }
  });

  it('404 for an unknown verification; 422 for an unknown organization (v2 dropped 404 there)', async () => {
    expect(((await client.getOrganization('org_nope').catch((e: unknown) => e)) as ServiceError).status).toBe(422);
    expect(((await client.getVerification('corr_nope').catch((e: unknown) => e)) as ServiceError).status).toBe(404);
  });

  it('a proxy page or an empty body still gives a typed error with the status', async () => {
    sandbox.injectFault({ method: 'GET', path: '/v2/clinics/cln_sandbox_main', status: 502, body: '<html>bad gateway</html>', contentType: 'text/html', times: 1 });
    const flaky = new VerificationClient({ baseUrl: sandbox.url, apiKey: sandbox.apiKey, maxRetries: 0 });
    try {
      const err = (await flaky.getClinic('cln_sandbox_main').catch((e: unknown) => e)) as ServiceError;
      expect(err.status).toBe(502);
      expect(err.problem.detail).toBe(`GET ${sandbox.url}/v2/clinics/cln_sandbox_main answered with a text/html body, not problem details`);
    } finally {
      await flaky.close();
    }
  });
});
