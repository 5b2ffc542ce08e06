import { ZodError, z } from 'zod';
import { describeIssue, fieldErrors } from '../domain/issues';
import type { ClientConfigInput } from './config';
import { ServiceError, UNREADABLE_ANSWER } from './errors';
import { ServiceHttp, type Log } from './http';
import { inResult, toOutcome, validationKindOf, type VerificationOutcome } from './outcome';
import {
  Accepted,
  ClaimRetrievalRequest,
  Clinic,
  CreateClinicRequest,
  CreateOrganizationRequest,
  CreateRegistrationRequest,
  CredentialsPatch,
  CredentialsRecord,
  CredentialsRequest,
  CredentialsValidation,
  CredentialsValidationRequest,
  Email,
  Id,
  MessagesQuery,
  NetworkQuery,
  Organization,
  PageQuery,
  Payer,
  Portal,
  Registration,
  SmsMessage,
  Verification,
  VerificationRequest,
  pageOf,
  type Page,
} from './wire';

/**
 * One id of a path, checked as a request body is (strict), then escaped: a blank one names another
 * path (GET /v2/clinics/ is no clinic's), which answers a 404 or 405 that names no field.
 */
const seg = (operation: string, field: string, value: string): string => encodeURIComponent(strict(z.object({ [field]: Id }), { [field]: value }, operation)[field] as string);

export interface ClientOptions {
  log?: Log;
  now?: () => Date;
  random?: () => number;
  /** Cut out of whatever the service answers: the portal passwords sent inline, which a later poll's Failed result may quote. */
  secrets?: readonly string[];
}

export interface WaitOptions {
  /** The service asks for no poll sooner than 3 s after the request. */
  firstDelayMs?: number;
  maxDelayMs?: number;
  /** Give up (with the last status) after this long. */
  timeoutMs?: number;
  onPoll?: (status: string, elapsedMs: number) => void;
  sleep?: (ms: number) => Promise<void>;
}

/**
 * A typed client for every operation of the verification service v2. Requests are validated
 * strictly before they are sent; responses permissively (wire.ts). Every non-2xx is a
 * ServiceError.
 */
export class VerificationClient {
  private readonly http: ServiceHttp;

  constructor(config: ClientConfigInput, options: ClientOptions = {}) {
    this.http = new ServiceHttp(config, options);
  }

  close(): Promise<void> {
    return this.http.close();
  }

  // ------------------------------------------------------------ organizations and clinics

  async createOrganization(body: CreateOrganizationRequest): Promise<Organization> {
    return this.post('create organization', '/v2/organizations', strict(CreateOrganizationRequest, body, 'create organization'), Organization, false);
  }

  async getOrganization(organizationId: string): Promise<Organization> {
    return this.get('get organization', `/v2/organizations/${seg('get organization', 'organizationId', organizationId)}`, Organization);
  }

  async listOrganizations(customerId: string, page: PageQuery = {}): Promise<Page<Organization>> {
    return this.get('list organizations', `/v2/customers/${seg('list organizations', 'customerId', customerId)}/organizations`, pageOf(Organization), strict(PageQuery, page, 'list organizations'));
  }

  async createClinic(body: CreateClinicRequest): Promise<Clinic> {
    return this.post('create clinic', '/v2/clinics', strict(CreateClinicRequest, body, 'create clinic'), Clinic, false);
  }

  async getClinic(clinicId: string): Promise<Clinic> {
    return this.get('get clinic', `/v2/clinics/${seg('get clinic', 'clinicId', clinicId)}`, Clinic);
  }

  async listClinics(organizationId: string, page: PageQuery = {}): Promise<Page<Clinic>> {
    return this.get('list clinics', `/v2/organizations/${seg('list clinics', 'organizationId', organizationId)}/clinics`, pageOf(Clinic), strict(PageQuery, page, 'list clinics'));
  }

  // ------------------------------------------------------------ payer and portal network

  async listPayers(query: NetworkQuery = {}): Promise<Page<Payer>> {
    return this.get('list payer network', '/v2/network/payers', pageOf(Payer), strict(NetworkQuery, query, 'list payer network'));
  }

  async listPortals(query: NetworkQuery = {}): Promise<Page<Portal>> {
    return this.get('list portal network', '/v2/network/portals', pageOf(Portal), strict(NetworkQuery, query, 'list portal network'));
  }

  // ------------------------------------------------------------ portal registrations and 2FA messages

  async createRegistration(body: CreateRegistrationRequest): Promise<Registration> {
    return this.post('create payer portal registration', '/v2/payer-portal-registrations', strict(CreateRegistrationRequest, body, 'create payer portal registration'), Registration, false);
  }

  async listRegistrations(page: PageQuery = {}): Promise<Page<Registration>> {
    return this.get('list payer portal registrations', '/v2/payer-portal-registrations', pageOf(Registration), strict(PageQuery, page, 'list payer portal registrations'));
  }

  /** Asks the service to look at the portal again (e.g. it switched to SMS 2FA); officeId is the clinicId. */
  async reevaluateRegistration(officeId: string, portalId: string): Promise<Registration> {
    const operation = 're-evaluate payer portal registration';
    const { body } = await this.http.call({
      operation,
      method: 'PATCH',
      path: `/v2/payer-portal-registrations/offices/${seg(operation, 'officeId', officeId)}/portals/${seg(operation, 'portalId', portalId)}`,
      body: {},
      response: Registration,
      // Only GETs and POSTs carrying externalId are repeated: a PATCH whose answer was lost is not.
      idempotent: false,
    });
    return required(body, operation);
  }

  async registrationEmails(correlationId: string, page: PageQuery = {}): Promise<Page<Email>> {
    return this.get('list registration emails', `/v2/payer-portal-registrations/${seg('list registration emails', 'correlationId', correlationId)}/emails`, pageOf(Email), strict(PageQuery, page, 'list registration emails'));
  }

  async registrationSmsMessages(correlationId: string, page: PageQuery = {}): Promise<Page<SmsMessage>> {
    return this.get(
      'list registration sms messages',
      `/v2/payer-portal-registrations/${seg('list registration sms messages', 'correlationId', correlationId)}/sms-messages`,
      pageOf(SmsMessage),
      strict(PageQuery, page, 'list registration sms messages'),
    );
  }

  async listEmails(query: MessagesQuery = {}): Promise<Page<Email>> {
    return this.get('list emails', '/v2/emails', pageOf(Email), strict(MessagesQuery, query, 'list emails'));
  }

  async listSmsMessages(query: MessagesQuery = {}): Promise<Page<SmsMessage>> {
    return this.get('list sms messages', '/v2/sms-messages', pageOf(SmsMessage), strict(MessagesQuery, query, 'list sms messages'));
  }

  // ------------------------------------------------------------ credentials and their validation

  async createCredentials(clinicId: string, portalId: string, body: CredentialsRequest): Promise<CredentialsRecord | undefined> {
    const { body: record } = await this.http.call({
      operation: 'store credentials',
      method: 'POST',
      path: credentialsPath('store credentials', clinicId, portalId),
      body: strict(CredentialsRequest, body, 'store credentials'),
      response: CredentialsRecord,
      idempotent: false,
    });
    return record;
  }

  async getCredentials(clinicId: string, portalId: string): Promise<CredentialsRecord> {
    return this.get('get credentials', credentialsPath('get credentials', clinicId, portalId), CredentialsRecord);
  }

  /** Updates stored credentials; `changed` is false when the service answered 304 (nothing changed). */
  async updateCredentials(clinicId: string, portalId: string, patch: CredentialsPatch): Promise<{ changed: boolean; record?: CredentialsRecord }> {
    const { status, body } = await this.http.call({
      operation: 'update credentials',
      method: 'PATCH',
      path: credentialsPath('update credentials', clinicId, portalId),
      body: strict(CredentialsPatch, patch, 'update credentials'),
      response: CredentialsRecord,
      // A repeat after a lost answer would see 304 and report "unchanged" for a change that was made.
      idempotent: false,
      accept: [304],
    });
    return status === 304 ? { changed: false } : { changed: true, ...(body ? { record: body } : {}) };
  }

  /** The interface promises only a correlationId in the answer: read as any asynchronous request's (Accepted), its status when given. */
  async requestCredentialsValidation(body: CredentialsValidationRequest): Promise<Accepted> {
    return this.post('request credentials validation', '/v2/credentials-validation-requests', strict(CredentialsValidationRequest, body, 'request credentials validation'), Accepted, false);
  }

  async getCredentialsValidation(correlationId: string): Promise<CredentialsValidation> {
    return this.get('get credentials validation', `/v2/credentials-validations/${seg('get credentials validation', 'correlationId', correlationId)}`, askedFor(CredentialsValidation, correlationId));
  }

  /**
   * Polls a credentials validation until it leaves Pending: first poll no sooner than 3 s after
   * the request, then backing off. Resolves with the last status seen, Pending on timeout.
   */
  async waitForCredentialsValidation(correlationId: string, options: WaitOptions = {}): Promise<CredentialsValidation> {
    return this.poll(() => this.getCredentialsValidation(correlationId), (v) => v.status, (v) => validationKindOf(v.status) === 'pending', options);
  }

  // ------------------------------------------------------------ insurance verification

  /** Synchronous verification: the outcome comes in the answer. */
  async verify(body: VerificationRequest): Promise<VerificationOutcome> {
    const request = strict(VerificationRequest, body, 'verify insurance');
    const answer = request.externalId === undefined ? Verification : sentFor(Verification, request.externalId);
    const verification = await this.post('verify insurance', '/v2/insurance-verifications', request, answer, request.externalId !== undefined, request.portalId);
    return readOutcome(verification, 'verify insurance');
  }

  /** Asynchronous verification: queued; the outcome arrives by webhook (or getVerification). */
  async requestVerification(body: VerificationRequest): Promise<Accepted> {
    const request = strict(VerificationRequest, body, 'request insurance verification');
    return this.post('request insurance verification', '/v2/insurance-verification-requests', request, Accepted, request.externalId !== undefined, request.portalId);
  }

  /**
   * A verification by its correlationId; given the externalId it was sent under, one naming another is refused
   * (sentFor): the id an asynchronous send was answered with may itself be another request's, as a synchronous answer may.
   */
  async getVerification(correlationId: string, externalId?: string): Promise<VerificationOutcome> {
    const asked = askedFor(Verification, correlationId);
    const answer = externalId === undefined ? asked : sentFor(asked, externalId);
    return readOutcome(await this.get('get insurance verification', `/v2/insurance-verifications/${seg('get insurance verification', 'correlationId', correlationId)}`, answer), 'get insurance verification');
  }

  /** Polls an asynchronous verification until it is no longer pending (the webhook's fallback). */
  async waitForVerification(correlationId: string, options: WaitOptions & { externalId?: string } = {}): Promise<VerificationOutcome> {
    return this.poll(() => this.getVerification(correlationId, options.externalId), (o) => o.verification.status, (o) => o.kind === 'pending', options);
  }

  // ------------------------------------------------------------ claims

  async requestClaimRetrieval(body: ClaimRetrievalRequest): Promise<Accepted> {
    const request = strict(ClaimRetrievalRequest, body, 'request claim retrieval');
    return this.post('request claim retrieval', '/v2/claim-retrieval-requests', request, Accepted, request.externalId !== undefined);
  }

  // ------------------------------------------------------------ helpers

  /**
   * Every item of a paged listing, following nextCursor. A cursor the service already gave would
   * list the same pages forever: that is a ServiceError, not a silent stop with half a list. Items
   * a page could not read are left out and handed to `unreadable`, described (pageOf).
   */
  async *all<T>(list: (page: PageQuery) => Promise<Page<T>>, options: { limit?: number; unreadable?: (described: string[]) => void } = {}): AsyncGenerator<T> {
    const followed = new Set<string>();
    let cursor: string | undefined;
    do {
      const page = await list({ limit: options.limit ?? 100, ...(cursor ? { cursor } : {}) });
      if (page.unreadable) options.unreadable?.(page.unreadable);
      yield* page.items;
      cursor = page.nextCursor ?? undefined;
      if (cursor !== undefined) {
        if (followed.has(cursor)) {
          throw new ServiceError({
            operation: 'list',
            problem: { title: 'Repeated page cursor', detail: `the service gave a nextCursor it had given before, after ${followed.size + 1} pages; listing stopped` },
          });
        }
        followed.add(cursor);
      }
    } while (cursor);
  }

  private async get<T extends z.ZodType>(operation: string, path: string, response: T, query?: Record<string, string | number | boolean | undefined>): Promise<z.infer<T>> {
    const { body } = await this.http.call({ operation, method: 'GET', path, query, response, idempotent: true });
    return required(body, operation);
  }

  private async post<T extends z.ZodType>(operation: string, path: string, body: unknown, response: T, idempotent: boolean, portalId?: string): Promise<z.infer<T>> {
    const result = await this.http.call({ operation, method: 'POST', path, body, response, idempotent, portalId });
    return required(result.body, operation);
  }

  private async poll<T>(fetch: () => Promise<T>, statusOf: (t: T) => string, pending: (t: T) => boolean, options: WaitOptions): Promise<T> {
    const { firstDelayMs = 3000, maxDelayMs = 30_000, timeoutMs = 5 * 60_000, onPoll, sleep = delay } = options;
    const started = Date.now();
    let wait = firstDelayMs;
    for (;;) {
      await sleep(wait);
      const current = await fetch();
      const status = statusOf(current);
      const elapsed = Date.now() - started;
      onPoll?.(status, elapsed);
      if (!pending(current) || elapsed + wait >= timeoutMs) return current;
      wait = Math.min(Math.max(wait, 1000) * 1.5, maxDelayMs);
    }
  }
}

/** A 2xx verification whose result cannot be read is the service's fault, reported like one. */
function readOutcome(verification: Verification, operation: string): VerificationOutcome {
  try {
    return toOutcome(verification);
  } catch (err) {
    if (!(err instanceof ZodError)) throw err;
    throw new ServiceError({
      operation,
      code: UNREADABLE_ANSWER,
      problem: { title: 'Unexpected response body', detail: describeIssue(err, 'result', ['result']), errors: fieldErrors(inResult(err.issues), verification) },
      received: verification,
    });
  }
}

/**
 * Requests are checked against the wire schema before they are sent. A failure is a ServiceError
 * like the service's own 422, with errors[] naming each field, so callers handle one shape.
 */
function strict<T extends z.ZodType>(schema: T, value: unknown, operation: string): z.infer<T> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  throw new ServiceError({ operation, code: 'invalid_request', problem: { title: 'Request not sent', errors: fieldErrors(parsed.error.issues, value) } });
}

/**
 * A body fetched by its correlationId. The interface shows only status and result for the GET of a
 * verification, and nothing of a validation's: one that does not repeat the id is the one asked for.
 * One that names another is refused: its result is another patient's (a proxy's cache, a service
 * fault), and read as this one's it would be written into this patient's chart. A UUID the service
 * writes in capitals is the same id.
 */
function askedFor<T extends z.ZodType<{ correlationId: string }>>(schema: T, correlationId: string) {
  return z
    .preprocess((body) => {
      if (typeof body !== 'object' || body === null || Array.isArray(body)) return body;
      const given = (body as { correlationId?: unknown }).correlationId;
      return given === undefined || given === null ? { ...body, correlationId } : body;
    }, schema)
    .refine((body) => body.correlationId.toLowerCase() === correlationId.toLowerCase(), {
      error: 'is not the one asked for',
      path: ['correlationId'],
    });
}

/**
 * The answer to a request sent with an externalId: one that names another is refused, as askedFor
 * refuses a body naming another correlationId. It is another request's result (a proxy mixing two
 * answers, a service fault), another patient's, to be written into this patient's chart. One that
 * does not repeat it, as the interface does not say it does, is this request's.
 */
function sentFor<T extends z.ZodType<{ externalId?: string | null | undefined }>>(schema: T, externalId: string) {
  return schema.refine((body) => body.externalId === undefined || body.externalId === null || body.externalId === externalId, {
    error: 'is not the one sent',
    path: ['externalId'],
  });
}

function credentialsPath(operation: string, clinicId: string, portalId: string): string {
  return `/v2/clinics/${seg(operation, 'clinicId', clinicId)}/portals/${seg(operation, 'portalId', portalId)}/credentials`;
}

function required<T>(body: T | undefined, operation: string): T {
  if (body === undefined) throw new ServiceError({ operation, problem: { title: 'Empty response', detail: 'the service answered 2xx with no body' } });
  return body;
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
