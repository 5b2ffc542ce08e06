import { startSandbox, type Sandbox, DEMO_PRACTICE } from '../../src/sandbox';
import { isValidNpi } from '../../src/domain';
import {
  Clinic,
  CredentialsRecord,
  CredentialsValidation,
  Email,
  Organization,
  pageOf,
  Payer,
  Portal,
  ProblemDetails,
  Registration,
  SmsMessage,
} from '../../src/verification/wire';
import { call, FAST } from './helpers';

let sb: Sandbox;
const OTHER = { customerId: 'cus_other', apiKey: 'sk_other_customer' };

beforeEach(async () => {
  sb = await startSandbox({ timing: FAST, customers: [OTHER] });
});
afterEach(() => sb.close());

async function organization(name = 'Bright Smiles Dental Group') {
  const res = await call(sb, 'POST', '/v2/organizations', { customerId: sb.customerId, name });
  expect(res.status).toBe(201);
  return Organization.parse(res.body);
}

async function clinic(organizationId: string, name = 'Main St') {
  const res = await call(sb, 'POST', '/v2/clinics', { organizationId, name, npi: '1234567893', taxId: '12-3456789' });
  expect(res.status).toBe(201);
  return Clinic.parse(res.body);
}

describe('authentication and the front', () => {
  test('401 without a key, with an unknown key, and with a malformed header; problem details throughout', async () => {
    for (const res of [
      await call(sb, 'GET', '/v2/network/payers', undefined, { key: null }),
      await call(sb, 'GET', '/v2/network/payers', undefined, { key: 'nope' }),
      await call(sb, 'GET', '/v2/network/payers', undefined, { key: null, headers: { authorization: `Basic ${sb.apiKey}` } }),
    ]) {
      expect(res.status).toBe(401);
      expect(res.headers['content-type']).toBe('application/problem+json');
      expect(res.headers['www-authenticate']).toMatch(/^Bearer/);
      expect(ProblemDetails.parse(res.body)).toMatchObject({ status: 401, type: expect.stringMatching(/^https:\/\//) });
    }
  });

  test('the key header is configurable (x-api-key)', async () => {
    const other = await startSandbox({ apiKeyHeader: 'x-api-key', apiKey: 'k1' });
    try {
      expect((await call(other, 'GET', '/v2/network/portals', undefined, { key: null, headers: { 'x-api-key': 'k1' } })).status).toBe(200);
      expect((await call(other, 'GET', '/v2/network/portals')).status).toBe(401);
    } finally {
      await other.close();
    }
  });

  test('every answer says it is the sandbox', async () => {
    const ok = await call(sb, 'GET', '/v2/network/portals');
    const bad = await call(sb, 'GET', '/v2/nowhere');
    for (const res of [ok, bad]) {
      expect(res.headers['x-sandbox']).toBe('true');
      expect(res.body.sandbox).toBe(true);
    }
  });

  test('unknown paths 404, /v1 is refused, wrong methods 405 with Allow', async () => {
    expect((await call(sb, 'GET', '/v2/nowhere')).status).toBe(404);
    const v1 = await call(sb, 'GET', '/v1/network/payers');
    expect(v1.status).toBe(404);
    expect(v1.body.detail).toMatch(/\/v2/);
    const wrong = await call(sb, 'DELETE', '/v2/organizations');
    expect(wrong.status).toBe(405);
    expect(wrong.headers.allow).toBe('POST');
  });

  test('bad bodies: invalid JSON 422, non-JSON 415, over 1 MiB 413', async () => {
    const invalid = await call(sb, 'POST', '/v2/organizations', undefined, { raw: '{"customerId":' });
    expect(invalid.status).toBe(422);
    expect(invalid.body.errors).toEqual([{ field: 'body', code: 'invalid_json', message: 'is not valid JSON' }]);
    const text = await call(sb, 'POST', '/v2/organizations', undefined, { raw: 'customerId=x', headers: { 'content-type': 'text/plain' } });
    expect(text.status).toBe(415);
    const huge = await call(sb, 'POST', '/v2/organizations', { customerId: sb.customerId, name: 'x'.repeat(1024 * 1024 + 10) });
    expect(huge.status).toBe(413);
  });
});

describe('organizations and clinics', () => {
  test('create, get and list with cursor paging', async () => {
    const orgs = [await organization('A'), await organization('B'), await organization('C')];
    expect(orgs[0]).toMatchObject({ customerId: sb.customerId, name: 'A', organizationId: expect.stringMatching(/^org_/) });
    expect(Organization.parse((await call(sb, 'GET', `/v2/organizations/${orgs[1]?.organizationId}`)).body).name).toBe('B');

    const first = pageOf(Organization).parse((await call(sb, 'GET', `/v2/customers/${sb.customerId}/organizations?limit=2`)).body);
    expect(first.items.map((o) => o.name)).toEqual(['A', 'B']);
    expect(first.nextCursor).toEqual(expect.any(String));
    const second = pageOf(Organization).parse(
      (await call(sb, 'GET', `/v2/customers/${sb.customerId}/organizations?limit=2&cursor=${first.nextCursor}`)).body,
    );
    expect(second.items.map((o) => o.name)).toEqual(['C']);
    expect(second.nextCursor).toBeNull();

    const c = await clinic(orgs[0]?.organizationId as string);
    expect(c).toMatchObject({ organizationId: orgs[0]?.organizationId, npi: '1234567893', clinicId: expect.stringMatching(/^cln_/) });
    expect(Clinic.parse((await call(sb, 'GET', `/v2/clinics/${c.clinicId}`)).body).name).toBe('Main St');
    const list = pageOf(Clinic).parse((await call(sb, 'GET', `/v2/organizations/${orgs[0]?.organizationId}/clinics`)).body);
    expect(list.items.map((x) => x.clinicId)).toEqual([c.clinicId]);
  });

  test('422 with errors[] on a bad body, naming each field', async () => {
    const res = await call(sb, 'POST', '/v2/clinics', { name: '', npi: '12', extra: true });
    expect(res.status).toBe(422);
    expect(res.headers['content-type']).toBe('application/problem+json');
    expect(res.body.errors).toEqual(
      expect.arrayContaining([
        { field: 'organizationId', code: 'required', message: 'is required' },
        expect.objectContaining({ field: 'name', code: 'invalid_value' }),
        { field: 'npi', code: 'invalid_value', message: 'must be 10 digits' },
        { field: 'extra', code: 'unknown_field', message: 'is not a field of this request' },
      ]),
    );
  });

  test('unknown ids are 422 not_found (the interface dropped 404 here); bad paging 422', async () => {
    const org = await call(sb, 'GET', '/v2/organizations/org_missing');
    expect(org.status).toBe(422);
    expect(org.body.errors).toEqual([expect.objectContaining({ field: 'organizationId', code: 'not_found' })]);
    const cl = await call(sb, 'POST', '/v2/clinics', { organizationId: 'org_missing', name: 'x' });
    expect(cl.body.errors).toEqual([expect.objectContaining({ field: 'organizationId', code: 'not_found' })]);
    expect((await call(sb, 'GET', '/v2/clinics/cln_missing')).body.errors[0].field).toBe('clinicId');
    expect((await call(sb, 'GET', `/v2/customers/${sb.customerId}/organizations?limit=0`)).body.errors[0].field).toBe('limit');
    expect((await call(sb, 'GET', `/v2/customers/${sb.customerId}/organizations?limit=abc`)).status).toBe(422);
    expect((await call(sb, 'GET', `/v2/customers/${sb.customerId}/organizations?cursor=bogus`)).body.errors[0].field).toBe('cursor');
  });

  test('403 across customers', async () => {
    const org = await organization();
    const c = await clinic(org.organizationId);
    const as = { key: OTHER.apiKey };
    expect((await call(sb, 'POST', '/v2/organizations', { customerId: sb.customerId, name: 'x' }, as)).status).toBe(403);
    expect((await call(sb, 'GET', `/v2/organizations/${org.organizationId}`, undefined, as)).status).toBe(403);
    expect((await call(sb, 'GET', `/v2/customers/${sb.customerId}/organizations`, undefined, as)).status).toBe(403);
    expect((await call(sb, 'GET', `/v2/clinics/${c.clinicId}`, undefined, as)).status).toBe(403);
    expect((await call(sb, 'POST', '/v2/clinics', { organizationId: org.organizationId, name: 'x' }, as)).status).toBe(403);
    expect((await call(sb, 'GET', `/v2/clinics/${c.clinicId}/portals/metdental/credentials`, undefined, as)).status).toBe(403);
  });
});

describe('payer and portal networks', () => {
  test('payers carry the three kinds of id, features and timestamps; sandbox-only fields are not served', async () => {
    const res = pageOf(Payer).parse((await call(sb, 'GET', '/v2/network/payers?limit=500')).body);
    expect(res.items.length).toBeGreaterThanOrEqual(15);
    for (const p of res.items) {
      expect(p.primaryPayerId).toMatch(/^[A-Z0-9]{6}$/);
      expect(p).not.toHaveProperty('planType');
      expect(p.features?.insuranceVerificationAsynchronous).toEqual(expect.objectContaining({ supported: expect.any(Boolean) }));
    }
    const names = res.items.map((p) => p.name);
    for (const n of ['Delta Dental of California', 'MetLife', 'Cigna Dental', 'Aetna Dental', 'Guardian', 'UnitedHealthcare Dental', 'Humana Dental', 'Ameritas', 'Principal Financial Group', 'Medi-Cal Dental']) {
      expect(names).toContain(n);
    }
    const shared = res.items.filter((p) => p.commonPayerId === '94276');
    expect(shared.length).toBe(2);
    expect(res.items.some((p) => p.features?.insuranceVerificationAsynchronous?.supported === false)).toBe(true);
    expect(res.items.some((p) => p.features?.insuranceVerificationAsynchronous?.supported === true)).toBe(true);
  });

  test('portals with each authentication and login method, and one that needs none', async () => {
    const portals = pageOf(Portal).parse((await call(sb, 'GET', '/v2/network/portals')).body).items;
    const methods = new Set(portals.flatMap((p) => p.authenticationMethods ?? []));
    const logins = new Set(portals.flatMap((p) => p.loginMethods ?? []));
    expect([...methods].sort()).toEqual(['TwoFactorEmail', 'TwoFactorSms']);
    expect([...logins].sort()).toEqual(['Native', 'SSO']);
    expect(portals.some((p) => p.requiresAuthentication === false)).toBe(true);
  });

  test('paging and updatedSince give an incremental sync', async () => {
    const a = pageOf(Payer).parse((await call(sb, 'GET', '/v2/network/payers?limit=5')).body);
    expect(a.items).toHaveLength(5);
    const b = pageOf(Payer).parse((await call(sb, 'GET', `/v2/network/payers?limit=5&cursor=${a.nextCursor}`)).body);
    expect(b.items.map((p) => p.primaryPayerId)).not.toContain(a.items[0]?.primaryPayerId);
    const since = new Date().toISOString();
    expect(pageOf(Payer).parse((await call(sb, 'GET', `/v2/network/payers?updatedSince=${since}`)).body).items).toEqual([]);
    await new Promise((r) => setTimeout(r, 5));
    sb.updatePayer('M6MET1', { name: 'MetLife Dental' });
    const changed = pageOf(Payer).parse((await call(sb, 'GET', `/v2/network/payers?updatedSince=${encodeURIComponent(since)}`)).body);
    expect(changed.items.map((p) => p.name)).toEqual(['MetLife Dental']);
    expect((await call(sb, 'GET', '/v2/network/payers?updatedSince=yesterday')).body.errors[0].field).toBe('updatedSince');
  });
});

describe('registrations, 2FA messages and credentials', () => {
  test('an email portal provisions an email only; an SMS portal a phone number too; welcome messages arrive', async () => {
    const c = await clinic((await organization()).organizationId);
    const email = Registration.parse((await call(sb, 'POST', '/v2/payer-portal-registrations', { portalId: 'metdental', clinicId: c.clinicId, forwardingEmail: 'front-desk@example.com' })).body);
    expect(email.registeredEmail).toMatch(/@inbox\.verification-sandbox\.invalid$/);
    expect(email.registeredPhoneNumber).toBeUndefined();
    const sms = Registration.parse((await call(sb, 'POST', '/v2/payer-portal-registrations', { portalId: 'cignaforhcp', clinicId: c.clinicId })).body);
    expect(sms.registeredPhoneNumber).toMatch(/^\+1\d{3}55501\d{2}$/);

    const mails = pageOf(Email).parse((await call(sb, 'GET', `/v2/payer-portal-registrations/${email.correlationId}/emails`)).body).items;
    expect(mails).toHaveLength(1);
    expect(mails[0]).toMatchObject({ to: email.registeredEmail, subject: expect.stringMatching(/Confirm/), forwardedTo: 'front-desk@example.com' });
    const texts = pageOf(SmsMessage).parse((await call(sb, 'GET', `/v2/payer-portal-registrations/${sms.correlationId}/sms-messages`)).body).items;
    expect(texts[0]?.body).toMatch(/verification code is \d{6}/);

    const all = pageOf(Email).parse((await call(sb, 'GET', '/v2/emails')).body).items;
    expect(all.map((m) => m.correlationId).sort()).toEqual([email.correlationId, sms.correlationId].sort());
    expect(pageOf(SmsMessage).parse((await call(sb, 'GET', '/v2/sms-messages?limit=10')).body).items).toHaveLength(1);
    const later = new Date(Date.now() + 60_000).toISOString();
    expect(pageOf(Email).parse((await call(sb, 'GET', `/v2/emails?since=${encodeURIComponent(later)}`)).body).items).toEqual([]);

    const listed = pageOf(Registration).parse((await call(sb, 'GET', `/v2/payer-portal-registrations?clinicId=${c.clinicId}`)).body).items;
    expect(listed).toHaveLength(2);
    // Registering again gives the same registration.
    const again = Registration.parse((await call(sb, 'POST', '/v2/payer-portal-registrations', { portalId: 'metdental', clinicId: c.clinicId })).body);
    expect(again.correlationId).toBe(email.correlationId);
  });

  test('registration errors: no-auth portal, unknown portal, unknown registration, other customer', async () => {
    const c = await clinic((await organization()).organizationId);
    const none = await call(sb, 'POST', '/v2/payer-portal-registrations', { portalId: 'principal-benefit-line', clinicId: c.clinicId });
    expect(none.body.errors).toEqual([expect.objectContaining({ field: 'portalId', code: 'portal_requires_no_authentication' })]);
    expect((await call(sb, 'POST', '/v2/payer-portal-registrations', { portalId: 'nope', clinicId: c.clinicId })).body.errors[0].code).toBe('not_found');
    expect((await call(sb, 'GET', '/v2/payer-portal-registrations/5f7c1a8e-0000-4000-8000-000000000000/emails')).status).toBe(404);
    const reg = Registration.parse((await call(sb, 'POST', '/v2/payer-portal-registrations', { portalId: 'metdental', clinicId: c.clinicId })).body);
    expect((await call(sb, 'GET', `/v2/payer-portal-registrations/${reg.correlationId}/emails`, undefined, { key: OTHER.apiKey })).status).toBe(403);
  });

  test('re-evaluating a registration after the portal switched to SMS provisions a phone number', async () => {
    const c = await clinic((await organization()).organizationId);
    const reg = Registration.parse((await call(sb, 'POST', '/v2/payer-portal-registrations', { portalId: 'metdental', clinicId: c.clinicId })).body);
    expect(reg.registeredPhoneNumber).toBeUndefined();
    sb.updatePortal('metdental', { authenticationMethods: ['TwoFactorSms'] });
    const res = await call(sb, 'PATCH', `/v2/payer-portal-registrations/offices/${c.clinicId}/portals/metdental`, {});
    expect(res.status).toBe(200);
    const updated = Registration.parse(res.body);
    expect(updated.correlationId).toBe(reg.correlationId);
    expect(updated.registeredPhoneNumber).toMatch(/^\+1/);
    expect((await call(sb, 'PATCH', `/v2/payer-portal-registrations/offices/${c.clinicId}/portals/cignaforhcp`, {})).status).toBe(404);
  });

  test('credentials: store, read without the password, update (304 when nothing changed), store again replaces', async () => {
    const c = await clinic((await organization()).organizationId);
    const path = `/v2/clinics/${c.clinicId}/portals/metdental/credentials`;
    expect((await call(sb, 'GET', path)).body.errors[0]).toMatchObject({ field: 'portalId', code: 'not_found' });
    const stored = await call(sb, 'POST', path, { username: 'office1', password: 's3cret!', loginMethod: 'Native', mfaEmail: 'mfa@example.com' });
    expect(stored.status).toBe(201);
    const got = await call(sb, 'GET', path);
    expect(CredentialsRecord.parse(got.body)).toMatchObject({ username: 'office1', passwordSet: true, loginMethod: 'Native' });
    expect(JSON.stringify(got.body)).not.toContain('s3cret!');

    expect((await call(sb, 'PATCH', path, { username: 'office1' })).status).toBe(304);
    const patched = await call(sb, 'PATCH', path, { password: 'new-one' });
    expect(patched.status).toBe(200);
    expect(JSON.stringify(patched.body)).not.toContain('new-one');
    expect((await call(sb, 'PATCH', path, {})).body.errors[0].message).toMatch(/at least one/);
    expect((await call(sb, 'POST', path, { username: 'office2', password: 'x', loginMethod: 'SSO' })).status).toBe(201);
    expect((await call(sb, 'GET', path)).body.username).toBe('office2');
    const bad = await call(sb, 'POST', path, { username: 'x', password: 'y', loginMethod: 'Password', mfaPhoneNumber: '555-1234' });
    expect(bad.body.errors.map((e: { field: string }) => e.field).sort()).toEqual(['loginMethod', 'mfaPhoneNumber']);
    expect((await call(sb, 'GET', `/v2/clinics/${c.clinicId}/portals/nope/credentials`)).body.errors[0].field).toBe('portalId');
  });

  test('credentials validation: Pending, then Valid (and a 2FA code arrives) or Invalid with problem details', async () => {
    await sb.close();
    // Long enough that the first GET surely comes before the result, even on a loaded machine.
    sb = await startSandbox({ timing: { ...FAST, validationMs: 400 }, customers: [OTHER] });
    const c = await clinic((await organization()).organizationId);
    const reg = Registration.parse((await call(sb, 'POST', '/v2/payer-portal-registrations', { portalId: 'metdental', clinicId: c.clinicId })).body);
    await call(sb, 'POST', `/v2/clinics/${c.clinicId}/portals/metdental/credentials`, { username: 'office1', password: 'good', loginMethod: 'Native', mfaEmail: reg.registeredEmail });

    const req = await call(sb, 'POST', '/v2/credentials-validation-requests', { clinicId: c.clinicId, portalId: 'metdental' });
    expect(req.status).toBe(202);
    const pending = CredentialsValidation.parse(req.body);
    expect(pending.status).toBe('Pending');
    expect(CredentialsValidation.parse((await call(sb, 'GET', `/v2/credentials-validations/${pending.correlationId}`)).body).status).toBe('Pending');
    await sb.settle();
    expect(CredentialsValidation.parse((await call(sb, 'GET', `/v2/credentials-validations/${pending.correlationId}`)).body).status).toBe('Valid');
    const mails = pageOf(Email).parse((await call(sb, 'GET', `/v2/payer-portal-registrations/${reg.correlationId}/emails`)).body).items;
    expect(mails.map((m) => m.subject)).toEqual([expect.stringMatching(/Confirm/), expect.stringMatching(/verification code/)]);

    const inline = CredentialsValidation.parse((await call(sb, 'POST', '/v2/credentials-validation-requests', { portalId: 'metdental', credentials: { username: 'x', password: 'wrong-password' } })).body);
    await sb.settle();
    const invalid = CredentialsValidation.parse((await call(sb, 'GET', `/v2/credentials-validations/${inline.correlationId}`)).body);
    expect(invalid.status).toBe('Invalid');
    expect(invalid.result?.type).toMatch(/\/InvalidCredentials$/);

    const none = await call(sb, 'POST', '/v2/credentials-validation-requests', { clinicId: c.clinicId, portalId: 'cignaforhcp' });
    expect(none.body.errors[0]).toMatchObject({ field: 'portalId', code: 'credentials_not_stored' });
    expect((await call(sb, 'GET', '/v2/credentials-validations/unknown')).status).toBe(404);
    expect((await call(sb, 'GET', `/v2/credentials-validations/${pending.correlationId}`, undefined, { key: OTHER.apiKey })).status).toBe(403);
  });
});

describe('the demo practice', () => {
  test('seed: true creates the clinics of mappings/clinics.json with credentials on every portal that needs them', async () => {
    const seeded = await startSandbox({ seed: true });
    try {
      for (const c of DEMO_PRACTICE.clinics) {
        expect(isValidNpi(c.npi)).toBe(true);
        expect(Clinic.parse((await call(seeded, 'GET', `/v2/clinics/${c.clinicId}`)).body).organizationId).toBe(DEMO_PRACTICE.organizationId);
        const cred = await call(seeded, 'GET', `/v2/clinics/${c.clinicId}/portals/cignaforhcp/credentials`);
        expect(cred.body).toMatchObject({ passwordSet: true, mfaPhoneNumber: expect.stringMatching(/^\+1/) });
      }
    } finally {
      await seeded.close();
    }
  });
});
