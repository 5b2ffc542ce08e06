/**
 * Insurance verification (synchronous, asynchronous, get by correlationId) and claims retrieval.
 *
 * A request goes through, in order: the body (422 with errors[]); the clinic (404 when unknown,
 * 403 when another customer's); an idempotent replay of the same externalId; the member's
 * HTTP-level scenario (503, 429); then the checks docs/service.md lists before an asynchronous
 * verification, each a 422:
 *   1. clinicId or portalId missing while no inline credentials are given (in the body check);
 *   2. the payer is not in the payer network;
 *   3. the payer does not support this mode (asynchronous, or synchronous);
 *   4. the portal is not among the payer's portals for the mode, or (asynchronous, stored
 *      credentials) it needs no authentication;
 *   5. no credentials are stored for the clinic and portal;
 *   6. the stored login method is not one the portal takes;
 *   7. the portal needs TwoFactorEmail and the stored credentials have no mfaEmail;
 *   8. the portal needs TwoFactorSms and the stored credentials have no mfaPhoneNumber.
 */
import { createHash } from 'node:crypto';
import { fieldErrors } from '../domain/issues';
import {
  ClaimRetrievalRequest,
  FEATURE_ASYNC,
  FEATURE_SYNC,
  VerificationRequest,
  type FieldError,
} from '../verification/wire';
import { portalRefuses, type SandboxCore } from './core';
import type { Reply, Route } from './http';
import { lookupPayer, type SandboxPayer, type SandboxPortal } from './network';
import {
  fieldError,
  invalidField,
  notFound,
  parseBody,
  rateLimited,
  unavailable,
  unprocessable,
} from './problems';
import {
  derivedResult,
  FAILURE_KIND_TEXT,
  failureResult,
  fullResult,
  legacyCoinsuranceResult,
  legacyFailureResult,
  minimalResult,
  outOfNetworkResult,
  partialResult,
  scenarioFor,
  type ResultContext,
  type Scenario,
} from './scenarios';
import { secondFactor } from './setup';
import { newCorrelationId, type ClinicRec, type CredentialsRec, type CustomerRec, type VerificationRec } from './state';

/** Claims retrieval answers 404 for this member: no claims on file. */
export const NO_CLAIMS_MEMBER_ID = 'SBX-NO-CLAIMS';

type Mode = 'sync' | 'async';

/** The body check, with the two refinements of the wire schema given as `required` fields. */
function parseVerificationRequest(body: unknown): VerificationRequest {
  const parsed = VerificationRequest.safeParse(body);
  if (parsed.success) return parsed.data;
  const errors: FieldError[] = [];
  for (const issue of parsed.error.issues) {
    const at = issue.path.join('.');
    if (issue.code === 'custom' && at === 'clinicId') {
      const given = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
      for (const field of ['clinicId', 'portalId']) {
        if (given[field] === undefined) errors.push(fieldError(field, 'required', issue.message));
      }
    } else if (issue.code === 'custom' && at === 'payer') {
      errors.push(fieldError('payer', 'required', issue.message));
    } else {
      errors.push(...fieldErrors([issue], body));
    }
  }
  throw unprocessable(errors);
}

/** A stable identity for a request body: the same fields and values give the same fingerprint. */
function fingerprint(value: unknown): string {
  const canonical = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(canonical)
      : typeof v === 'object' && v !== null
        ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical((v as Record<string, unknown>)[k])]))
        : v;
  return createHash('sha256').update(JSON.stringify(canonical(value))).digest('hex');
}

interface Checked {
  payer: SandboxPayer;
  portal: SandboxPortal;
  stored?: CredentialsRec | undefined;
  credentials?: { username: string; password: string } | undefined;
}

/** Checks 2 to 8, in the service's order. */
function check(core: SandboxCore, mode: Mode, req: VerificationRequest, clinic: ClinicRec | undefined): Checked {
  const { state } = core;
  const lookup = lookupPayer(state.payers, req.payer, req.portalId);
  if (lookup.status === 'primary-id') {
    throw invalidField('payer.payerId', 'primary_payer_id_not_accepted', 'a primary payer id is for syncing lists only; name the payer by its common or alternate id');
  }
  if (lookup.status === 'ambiguous') {
    throw invalidField('payer.payerId', 'ambiguous', `this id covers several payers (${lookup.candidates.map((p) => p.name).join('; ')}); add the payer name or a portalId`);
  }
  if (lookup.status === 'unknown') throw invalidField('payer', 'payer_not_in_network', 'the payer is not in the payer network');
  const payer = lookup.payer;

  const feature = payer.features[mode === 'async' ? FEATURE_ASYNC : FEATURE_SYNC];
  if (!feature?.supported) {
    throw mode === 'async'
      ? invalidField('payer', 'async_not_supported', 'the payer does not support asynchronous verification')
      : invalidField('payer', 'sync_not_supported', 'the payer does not support synchronous verification');
  }

  const portals = feature.portals ?? [];
  const portalId = req.portalId ?? portals[0];
  const portal = portalId ? state.portal(portalId) : undefined;
  if (!portal || !portals.includes(portal.portalId)) {
    throw invalidField('portalId', 'portal_not_supported', `the portal is not among the payer's ${mode === 'async' ? 'asynchronous' : 'synchronous'} portals (${portals.join(', ')})`);
  }
  if (req.credentials) return { payer, portal, credentials: req.credentials };
  if (!portal.requiresAuthentication) {
    if (mode === 'async') {
      throw invalidField('portalId', 'portal_requires_no_authentication', 'the portal needs no authentication, so it cannot be used with stored credentials');
    }
    return { payer, portal };
  }

  const stored = clinic ? state.credentialsFor(clinic.clinicId, portal.portalId) : undefined;
  if (!stored) throw invalidField('portalId', 'credentials_not_stored', 'no credentials are stored for this clinic and portal');
  if (!portal.loginMethods.includes(stored.loginMethod)) {
    throw invalidField('loginMethod', 'login_method_mismatch', `the stored login method is ${stored.loginMethod}; the portal takes ${portal.loginMethods.join(' or ')}`);
  }
  if (portal.authenticationMethods.includes('TwoFactorEmail') && !stored.mfaEmail) {
    throw invalidField('mfaEmail', 'mfa_email_missing', 'the portal sends codes by email and the stored credentials have no mfaEmail');
  }
  if (portal.authenticationMethods.includes('TwoFactorSms') && !stored.mfaPhoneNumber) {
    throw invalidField('mfaPhoneNumber', 'mfa_phone_missing', 'the portal sends codes by SMS and the stored credentials have no mfaPhoneNumber');
  }
  return { payer, portal, stored, credentials: { username: stored.username, password: stored.password } };
}

/** What the verification comes to. */
function decide(core: SandboxCore, scenario: Scenario, ctx: ResultContext, checked: Checked): { status: string; result: unknown } {
  const portalId = checked.portal.portalId;
  // A portal down for maintenance is not logged into: no credentials or second factor are tried.
  if (core.state.inMaintenance.has(portalId)) return { status: 'Failed', result: failureResult('SiteMaintenance', portalId) };
  if (checked.portal.requiresAuthentication && checked.credentials && portalRefuses(checked.credentials)) {
    return { status: 'Failed', result: failureResult('InvalidCredentials', portalId) };
  }
  if (checked.stored && checked.portal.authenticationMethods.includes('TwoFactorSms')) {
    const reg = core.state.registrationFor(checked.stored.clinicId, portalId);
    if (reg && !reg.registeredPhoneNumber) return { status: 'Failed', result: failureResult('TwoFactorAuthenticationConfiguration', portalId) };
  }
  switch (scenario.kind) {
    case 'full':
      return { status: 'Completed', result: fullResult(ctx) };
    case 'minimal':
      return { status: 'Completed', result: minimalResult(ctx) };
    case 'out-of-network':
      return { status: 'Completed', result: outOfNetworkResult(ctx) };
    case 'partial':
      return { status: 'Partial', result: partialResult(ctx) };
    case 'failed':
      return { status: 'Failed', result: failureResult(scenario.failure, portalId) };
    case 'legacy-coinsurance':
      return { status: 'Completed', result: legacyCoinsuranceResult(ctx) };
    case 'legacy-error':
      return { status: 'Failed', result: legacyFailureResult() };
    default:
      return { status: 'Completed', result: derivedResult(ctx) };
  }
}

/** The verification as GET, the synchronous answer and the webhook show it. */
export function publicVerification(v: VerificationRec) {
  return {
    correlationId: v.correlationId,
    externalId: v.externalId,
    status: v.status,
    createdAt: v.createdAt,
    completedAt: v.completedAt,
    result: v.result,
    sandbox: true,
  };
}

/** Reveals the outcome once its time has come (or when its timer fires), and sends the webhook of an asynchronous one; idempotent. */
function complete(core: SandboxCore, v: VerificationRec, force = false): void {
  if (v.status !== 'Pending' || (!force && core.now().getTime() < v.readyAt)) return;
  v.status = v.outcome.status;
  v.result = v.outcome.result;
  v.completedAt = core.now().toISOString();
  if (v.mode !== 'async') return;
  const customer = core.state.customers.get(v.customerId);
  if (!customer) return;
  customer.deliveries.push(
    customer.webhook
      ? core.webhooks.deliver(customer.webhook, v.correlationId, publicVerification(v))
      : { webhookId: '', correlationId: v.correlationId, url: '', state: 'skipped', attempts: [] },
  );
}

const accepted = (v: VerificationRec): Reply => ({ status: 201, body: { correlationId: v.correlationId, status: v.status } });

async function submit(core: SandboxCore, mode: Mode, body: unknown, customer: CustomerRec): Promise<Reply> {
  const { state } = core;
  const req = parseVerificationRequest(body);
  const clinic = req.clinicId
    ? state.ownClinic(customer.customerId, req.clinicId, { unknown: () => notFound('no clinic has this clinicId') })
    : undefined;
  const print = fingerprint(req);

  if (req.externalId) {
    const previous = [...state.verifications.values()].find(
      (v) => v.customerId === customer.customerId && v.mode === mode && v.externalId === req.externalId,
    );
    if (previous) {
      if (previous.fingerprint !== print) {
        throw invalidField('externalId', 'conflict', 'this externalId was already used for a different request');
      }
      complete(core, previous);
      return mode === 'sync' ? { status: 201, body: publicVerification(previous) } : accepted(previous);
    }
  }

  const scenario = scenarioFor(req.subscriber.memberId);
  if (scenario.kind === 'failed' && !FAILURE_KIND_TEXT.test(scenario.failure)) {
    throw invalidField('subscriber.memberId', 'invalid_value', 'SBX-FAIL- must be followed by a failure kind in letters and digits, e.g. SBX-FAIL-PatientNotFound');
  }
  const attemptKey = `${customer.customerId}|${mode}|${print}`;
  const attempt = (state.attempts.get(attemptKey) ?? 0) + 1;
  state.attempts.set(attemptKey, attempt);
  const retryAfter = core.timing.retryAfterSeconds;
  if (scenario.kind === 'unavailable' || (scenario.kind === 'unavailable-twice' && attempt <= 2)) throw unavailable(retryAfter);
  if (scenario.kind === 'rate-limited-once' && attempt <= 1) throw rateLimited(retryAfter);

  const checked = check(core, mode, req, clinic);
  const ctx: ResultContext = { request: req, payer: checked.payer, portalId: checked.portal.portalId, clinic };
  const delay = (mode === 'async' ? core.timing.asyncCompletionMs : 0) + (scenario.kind === 'slow' ? core.timing.slowMs : 0);
  const v: VerificationRec = {
    correlationId: newCorrelationId(),
    customerId: customer.customerId,
    mode,
    externalId: req.externalId,
    fingerprint: print,
    status: 'Pending',
    createdAt: core.now().toISOString(),
    outcome: decide(core, scenario, ctx, checked),
    readyAt: core.now().getTime() + delay,
    clinicId: clinic?.clinicId,
    portalId: checked.portal.portalId,
  };
  state.verifications.set(v.correlationId, v);
  if (!state.inMaintenance.has(checked.portal.portalId)) secondFactor(core, v.clinicId, v.portalId);

  if (mode === 'async') {
    core.scheduler.later(delay, () => complete(core, v, true));
    return accepted(v);
  }
  if (delay > 0) await new Promise<void>((resolve) => core.scheduler.later(delay, resolve));
  complete(core, v, true);
  return { status: 201, body: publicVerification(v) };
}

export function verificationRoutes(core: SandboxCore): Route[] {
  const { state } = core;
  return [
    {
      method: 'POST',
      path: '/v2/insurance-verifications',
      handler: ({ body, customer }) => submit(core, 'sync', body, customer),
    },
    {
      method: 'POST',
      path: '/v2/insurance-verification-requests',
      handler: ({ body, customer }) => submit(core, 'async', body, customer),
    },
    {
      method: 'GET',
      path: '/v2/insurance-verifications/:correlationId',
      handler: ({ params, customer }) => {
        const v = state.own(customer.customerId, state.verifications.get(params.correlationId as string), 'insurance verification');
        complete(core, v);
        return { status: 200, body: publicVerification(v) };
      },
    },
    {
      method: 'POST',
      path: '/v2/claim-retrieval-requests',
      handler: ({ body, customer }) => {
        const req = parseBody(ClaimRetrievalRequest, body);
        state.ownClinic(customer.customerId, req.clinicId, { unknown: () => notFound('no clinic has this clinicId') });
        if (!state.portal(req.portalId)) throw notFound('no portal has this portalId');
        if (req.serviceDateFrom > req.serviceDateTo) throw invalidField('serviceDateTo', 'invalid_value', 'must not be before serviceDateFrom');
        if (req.subscriber.memberId.toUpperCase() === NO_CLAIMS_MEMBER_ID) throw notFound('no claims were found for this member in the date range');
        const print = fingerprint(req);
        // The client repeats a POST that carries externalId after a lost answer: the same key is the same retrieval.
        const previous = req.externalId
          ? [...state.claimRetrievals.values()].find((c) => c.customerId === customer.customerId && c.externalId === req.externalId)
          : undefined;
        if (previous) {
          if (previous.fingerprint !== print) throw invalidField('externalId', 'conflict', 'this externalId was already used for a different request');
          return { status: 201, body: { correlationId: previous.correlationId, status: previous.status } };
        }
        const correlationId = newCorrelationId();
        state.claimRetrievals.set(correlationId, {
          correlationId,
          customerId: customer.customerId,
          externalId: req.externalId,
          fingerprint: print,
          status: 'Pending',
          createdAt: core.now().toISOString(),
        });
        return { status: 201, body: { correlationId, status: 'Pending' } };
      },
    },
  ];
}
