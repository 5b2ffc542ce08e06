/**
 * Setup operations: organizations, clinics, the payer and portal networks, payer portal
 * registrations and their 2FA messages, credentials and their validation.
 *
 * Where the interface dropped 404 (organization, clinic and credential endpoints), an unknown id
 * is a 422 whose errors[] names the field with code not_found; elsewhere it is a 404.
 */
import { randomBytes, randomInt } from 'node:crypto';
import {
  CreateClinicRequest,
  CreateOrganizationRequest,
  CreateRegistrationRequest,
  CredentialsPatch,
  CredentialsRequest,
  CredentialsValidationRequest,
  MessagesQuery,
  NetworkQuery,
  PageQuery,
} from '../verification/wire';
import { portalRefuses, type SandboxCore } from './core';
import { queryObject, type Route } from './http';
import { publicPayer, type SandboxPortal } from './network';
import { forbidden, invalidField, parseBody } from './problems';
import { failureResult } from './scenarios';
import {
  newCorrelationId,
  newId,
  page,
  type ClinicRec,
  type CredentialsRec,
  type MessageRec,
  type OrganizationRec,
  type RegistrationRec,
  type ValidationRec,
} from './state';

const created = (body: unknown) => ({ status: 201, body });
const ok = (body: unknown) => ({ status: 200, body });

/**
 * What the service shows of each record: fields named one by one, so nothing internal leaks (the
 * stored password above all); undefined fields are left out of the JSON.
 */
function publicOrganization(o: OrganizationRec) {
  return { organizationId: o.organizationId, customerId: o.customerId, name: o.name, createdAt: o.createdAt };
}

function publicClinic(c: ClinicRec) {
  return {
    clinicId: c.clinicId,
    organizationId: c.organizationId,
    name: c.name,
    npi: c.npi,
    taxId: c.taxId,
    address: c.address,
    createdAt: c.createdAt,
  };
}

function publicRegistration(r: RegistrationRec) {
  return {
    correlationId: r.correlationId,
    portalId: r.portalId,
    clinicId: r.clinicId,
    registeredEmail: r.registeredEmail,
    registeredPhoneNumber: r.registeredPhoneNumber,
    forwardingEmail: r.forwardingEmail,
    status: r.status,
    createdAt: r.createdAt,
    updatedAt: r.updatedAt,
  };
}

function publicCredentials(c: CredentialsRec) {
  return {
    clinicId: c.clinicId,
    portalId: c.portalId,
    username: c.username,
    passwordSet: true,
    loginMethod: c.loginMethod,
    mfaEmail: c.mfaEmail,
    mfaPhoneNumber: c.mfaPhoneNumber,
    updatedAt: c.updatedAt,
  };
}

function publicValidation(v: ValidationRec) {
  return { correlationId: v.correlationId, status: v.status, result: v.result };
}

const smsOnly = (portal: SandboxPortal) => portal.authenticationMethods.includes('TwoFactorSms');

/** Fictional numbers: the 555-01xx block, across a few area codes. */
function provisionPhone(): string {
  const area = ['202', '312', '415', '512', '617', '720'][randomInt(6)] as string;
  return `+1${area}55501${String(randomInt(100)).padStart(2, '0')}`;
}

/** A message from the portal to a registration: the account's welcome mail, or a one-time code. */
export function portalMessage(core: SandboxCore, reg: RegistrationRec, purpose: 'welcome' | 'code'): void {
  const portal = core.state.portal(reg.portalId);
  const portalName = portal?.name ?? reg.portalId;
  const receivedAt = core.now().toISOString();
  const code = String(randomInt(1_000_000)).padStart(6, '0');
  const viaSms = purpose === 'code' ? Boolean(portal && smsOnly(portal) && reg.registeredPhoneNumber) : false;
  if (viaSms || (purpose === 'welcome' && reg.registeredPhoneNumber)) {
    const sms: MessageRec = {
      id: newId('sms'),
      correlationId: reg.correlationId,
      from: '+18885550100',
      to: reg.registeredPhoneNumber as string,
      body: `${portalName}: your verification code is ${code}. It expires in 10 minutes.`,
      receivedAt,
    };
    core.state.sms.push(sms);
    if (viaSms) return;
  }
  const email: MessageRec = {
    id: newId('eml'),
    correlationId: reg.correlationId,
    from: `no-reply@${reg.portalId}.portal.example`,
    to: reg.registeredEmail,
    subject: purpose === 'welcome' ? `Confirm your email address for ${portalName}` : `${portalName} verification code`,
    body:
      purpose === 'welcome'
        ? `Welcome to ${portalName}. Confirm this address to finish creating the office's account: https://${reg.portalId}.portal.example/confirm?token=${newId('tok')}`
        : `Your one-time verification code is ${code}. It expires in 10 minutes.`,
    receivedAt,
    ...(reg.forwardingEmail ? { forwardedTo: reg.forwardingEmail } : {}),
  };
  core.state.emails.push(email);
}

/** When the portal logs a clinic in and asks for a second factor, the code arrives for its registration. */
export function secondFactor(core: SandboxCore, clinicId: string | undefined, portalId: string): void {
  const portal = core.state.portal(portalId);
  if (!clinicId || !portal?.requiresAuthentication || portal.authenticationMethods.length === 0) return;
  const reg = core.state.registrationFor(clinicId, portalId);
  if (reg) portalMessage(core, reg, 'code');
}

/** Provisions a registration for a clinic on a portal, or returns the one it has; the welcome mail arrives at once. */
export function createRegistration(core: SandboxCore, clinicId: string, portal: SandboxPortal, forwardingEmail?: string): RegistrationRec {
  const existing = core.state.registrationFor(clinicId, portal.portalId);
  if (existing) return existing;
  const at = core.now().toISOString();
  const reg: RegistrationRec = {
    correlationId: newCorrelationId(),
    portalId: portal.portalId,
    clinicId,
    registeredEmail: `reg-${randomBytes(6).toString('hex')}@inbox.verification-sandbox.invalid`,
    ...(smsOnly(portal) ? { registeredPhoneNumber: provisionPhone() } : {}),
    ...(forwardingEmail ? { forwardingEmail } : {}),
    status: 'Provisioned',
    createdAt: at,
    updatedAt: at,
  };
  core.state.registrations.set(reg.correlationId, reg);
  portalMessage(core, reg, 'welcome');
  return reg;
}

function publicMessage(m: MessageRec, kind: 'email' | 'sms') {
  return kind === 'email'
    ? { id: m.id, correlationId: m.correlationId, from: m.from, to: m.to, subject: m.subject, body: m.body, receivedAt: m.receivedAt, forwardedTo: m.forwardedTo }
    : { id: m.id, correlationId: m.correlationId, from: m.from, to: m.to, body: m.body, receivedAt: m.receivedAt };
}

/** Finishes a validation once its time has come (or when its timer fires); idempotent. */
function settleValidation(core: SandboxCore, v: ValidationRec, force = false): void {
  if (v.status !== 'Pending' || (!force && core.now().getTime() < v.readyAt)) return;
  if (portalRefuses(v.credentials)) {
    v.status = 'Invalid';
    v.result = failureResult('InvalidCredentials', v.portalId);
  } else {
    v.status = 'Valid';
    secondFactor(core, v.clinicId, v.portalId);
  }
}

/** A page of the payer or portal network, with ?updatedSince for incremental sync. */
function networkPage<T extends { updatedAt: string }, U>(entries: T[], query: URLSearchParams, show?: (entry: T) => U) {
  const q = parseBody(NetworkQuery, queryObject(query, ['limit', 'cursor', 'updatedSince']));
  const since = q.updatedSince ? Date.parse(q.updatedSince) : undefined;
  return page(
    entries.filter((e) => since === undefined || Date.parse(e.updatedAt) > since),
    q,
    show,
  );
}

export function setupRoutes(core: SandboxCore): Route[] {
  const { state } = core;
  const now = () => core.now().toISOString();

  return [
    // ------------------------------------------------------------ organizations
    {
      method: 'POST',
      path: '/v2/organizations',
      handler: ({ body, customer }) => {
        const req = parseBody(CreateOrganizationRequest, body);
        if (req.customerId !== customer.customerId) throw forbidden('this customerId');
        const org: OrganizationRec = { organizationId: newId('org'), customerId: req.customerId, name: req.name, createdAt: now() };
        state.organizations.set(org.organizationId, org);
        return created(publicOrganization(org));
      },
    },
    {
      method: 'GET',
      path: '/v2/organizations/:organizationId',
      handler: ({ params, customer }) =>
        ok(publicOrganization(state.ownOrganization(customer.customerId, params.organizationId as string))),
    },
    {
      method: 'GET',
      path: '/v2/customers/:customerId/organizations',
      handler: ({ params, query, customer }) => {
        if (params.customerId !== customer.customerId) throw forbidden("another customer's organizations");
        const q = parseBody(PageQuery, queryObject(query, ['limit', 'cursor']));
        const orgs = [...state.organizations.values()].filter((o) => o.customerId === customer.customerId);
        return ok(page(orgs, q, publicOrganization));
      },
    },

    // ------------------------------------------------------------ clinics
    {
      method: 'POST',
      path: '/v2/clinics',
      handler: ({ body, customer }) => {
        const req = parseBody(CreateClinicRequest, body);
        state.ownOrganization(customer.customerId, req.organizationId);
        const clinic: ClinicRec = { clinicId: newId('cln'), ...req, createdAt: now() };
        state.clinics.set(clinic.clinicId, clinic);
        return created(publicClinic(clinic));
      },
    },
    {
      method: 'GET',
      path: '/v2/clinics/:clinicId',
      handler: ({ params, customer }) => ok(publicClinic(state.ownClinic(customer.customerId, params.clinicId as string))),
    },
    {
      method: 'GET',
      path: '/v2/organizations/:organizationId/clinics',
      handler: ({ params, query, customer }) => {
        const org = state.ownOrganization(customer.customerId, params.organizationId as string);
        const q = parseBody(PageQuery, queryObject(query, ['limit', 'cursor']));
        return ok(page([...state.clinics.values()].filter((c) => c.organizationId === org.organizationId), q, publicClinic));
      },
    },

    // ------------------------------------------------------------ payer and portal networks
    {
      method: 'GET',
      path: '/v2/network/payers',
      handler: ({ query }) => ok(networkPage(state.payers, query, publicPayer)),
    },
    {
      method: 'GET',
      path: '/v2/network/portals',
      handler: ({ query }) => ok(networkPage(state.portals, query)),
    },

    // ------------------------------------------------------------ payer portal registrations
    {
      method: 'POST',
      path: '/v2/payer-portal-registrations',
      handler: ({ body, customer }) => {
        const req = parseBody(CreateRegistrationRequest, body);
        state.ownClinic(customer.customerId, req.clinicId);
        const portal = state.knownPortal(req.portalId);
        if (!portal.requiresAuthentication) {
          throw invalidField('portalId', 'portal_requires_no_authentication', 'this portal needs no account, so there is nothing to register');
        }
        return created(publicRegistration(createRegistration(core, req.clinicId, portal, req.forwardingEmail)));
      },
    },
    {
      method: 'GET',
      path: '/v2/payer-portal-registrations',
      handler: ({ query, customer }) => {
        const q = parseBody(PageQuery, queryObject(query, ['limit', 'cursor']));
        const clinicId = query.get('clinicId');
        const portalId = query.get('portalId');
        const regs = [...state.registrations.values()].filter(
          (r) =>
            state.customerOfClinic(r.clinicId) === customer.customerId &&
            (clinicId === null || r.clinicId === clinicId) &&
            (portalId === null || r.portalId === portalId),
        );
        return ok(page(regs, q, publicRegistration));
      },
    },
    {
      // Re-evaluate, e.g. after the portal switched to SMS 2FA: provisions what the portal now needs.
      method: 'PATCH',
      path: '/v2/payer-portal-registrations/offices/:officeId/portals/:portalId',
      handler: ({ params, customer }) => {
        const clinicId = params.officeId as string;
        const portalId = params.portalId as string;
        if (!state.clinics.has(clinicId)) throw invalidField('officeId', 'not_found', 'no clinic (office) has this id');
        state.ownClinic(customer.customerId, clinicId);
        const portal = state.knownPortal(portalId);
        const reg = state.own(customer.customerId, state.registrationFor(clinicId, portalId), 'registration for this office and portal');
        if (smsOnly(portal) && !reg.registeredPhoneNumber) reg.registeredPhoneNumber = provisionPhone();
        reg.status = 'Provisioned';
        reg.updatedAt = now();
        return ok(publicRegistration(reg));
      },
    },
    {
      method: 'GET',
      path: '/v2/payer-portal-registrations/:correlationId/emails',
      handler: ({ params, customer }) => {
        const reg = state.own(customer.customerId, state.registrations.get(params.correlationId as string), 'registration');
        return ok({ items: state.emails.filter((m) => m.correlationId === reg.correlationId).map((m) => publicMessage(m, 'email')), nextCursor: null });
      },
    },
    {
      method: 'GET',
      path: '/v2/payer-portal-registrations/:correlationId/sms-messages',
      handler: ({ params, customer }) => {
        const reg = state.own(customer.customerId, state.registrations.get(params.correlationId as string), 'registration');
        return ok({ items: state.sms.filter((m) => m.correlationId === reg.correlationId).map((m) => publicMessage(m, 'sms')), nextCursor: null });
      },
    },
    ...(['emails', 'sms-messages'] as const).map(
      (what): Route => ({
        method: 'GET',
        path: `/v2/${what}`,
        handler: ({ query, customer }) => {
          const q = parseBody(MessagesQuery, queryObject(query, ['limit', 'cursor', 'since']));
          const since = q.since ? Date.parse(q.since) : undefined;
          const kind = what === 'emails' ? 'email' : 'sms';
          const mine = (kind === 'email' ? state.emails : state.sms).filter((m) => {
            const reg = state.registrations.get(m.correlationId);
            return reg && state.customerOfClinic(reg.clinicId) === customer.customerId && (since === undefined || Date.parse(m.receivedAt) > since);
          });
          return ok(page(mine, q, (m) => publicMessage(m, kind)));
        },
      }),
    ),

    // ------------------------------------------------------------ credentials
    {
      method: 'POST',
      path: '/v2/clinics/:clinicId/portals/:portalId/credentials',
      handler: ({ params, body, customer }) => {
        const clinic = state.ownClinic(customer.customerId, params.clinicId as string);
        const portal = state.knownPortal(params.portalId as string);
        const req = parseBody(CredentialsRequest, body);
        const at = now();
        const previous = state.credentialsFor(clinic.clinicId, portal.portalId);
        // 409 is no longer returned: storing again replaces what was stored.
        const rec: CredentialsRec = { clinicId: clinic.clinicId, portalId: portal.portalId, ...req, createdAt: previous?.createdAt ?? at, updatedAt: at };
        state.putCredentials(rec);
        return created(publicCredentials(rec));
      },
    },
    {
      method: 'GET',
      path: '/v2/clinics/:clinicId/portals/:portalId/credentials',
      handler: ({ params, customer }) => {
        const clinic = state.ownClinic(customer.customerId, params.clinicId as string);
        const portal = state.knownPortal(params.portalId as string);
        const rec = state.credentialsFor(clinic.clinicId, portal.portalId);
        if (!rec) throw invalidField('portalId', 'not_found', 'no credentials are stored for this clinic and portal');
        return ok(publicCredentials(rec));
      },
    },
    {
      method: 'PATCH',
      path: '/v2/clinics/:clinicId/portals/:portalId/credentials',
      handler: ({ params, body, customer }) => {
        const clinic = state.ownClinic(customer.customerId, params.clinicId as string);
        const portal = state.knownPortal(params.portalId as string);
        const patch = parseBody(CredentialsPatch, body);
        const rec = state.credentialsFor(clinic.clinicId, portal.portalId);
        if (!rec) throw invalidField('portalId', 'not_found', 'no credentials are stored for this clinic and portal');
        const changed = (Object.keys(patch) as Array<keyof typeof patch>).some((k) => patch[k] !== rec[k]);
        if (!changed) return { status: 304 };
        Object.assign(rec, patch, { updatedAt: now() });
        return ok(publicCredentials(rec));
      },
    },

    // ------------------------------------------------------------ credentials validation
    {
      method: 'POST',
      path: '/v2/credentials-validation-requests',
      handler: ({ body, customer }) => {
        const req = parseBody(CredentialsValidationRequest, body);
        const portal = state.knownPortal(req.portalId);
        let credentials: { username: string; password: string };
        let clinicId: string | undefined;
        if ('credentials' in req) {
          credentials = req.credentials;
        } else {
          clinicId = state.ownClinic(customer.customerId, req.clinicId).clinicId;
          const stored = state.credentialsFor(clinicId, portal.portalId);
          if (!stored) throw invalidField('portalId', 'credentials_not_stored', 'no credentials are stored for this clinic and portal');
          credentials = { username: stored.username, password: stored.password };
        }
        const v: ValidationRec = {
          correlationId: newCorrelationId(),
          customerId: customer.customerId,
          clinicId,
          portalId: portal.portalId,
          credentials,
          createdAt: now(),
          readyAt: core.now().getTime() + core.timing.validationMs,
          status: 'Pending',
        };
        state.validations.set(v.correlationId, v);
        core.scheduler.later(core.timing.validationMs, () => settleValidation(core, v, true));
        return { status: 202, body: publicValidation(v) };
      },
    },
    {
      method: 'GET',
      path: '/v2/credentials-validations/:correlationId',
      handler: ({ params, customer }) => {
        const v = state.own(customer.customerId, state.validations.get(params.correlationId as string), 'credentials validation');
        settleValidation(core, v);
        return ok(publicValidation(v));
      },
    },
  ];
}
