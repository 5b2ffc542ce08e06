/**
 * The sandbox's state, in memory: customers and their API keys, organizations, clinics,
 * registrations and their messages, credentials, validations and verifications. Ownership
 * checks (403 across customers) and paging live here so every route answers them the same way.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import type { Address, InlineCredentials, LoginMethod, PageQuery, ProblemDetails } from '../verification/wire';
import { defaultPayers, defaultPortals, type SandboxPayer, type SandboxPortal } from './network';
import { forbidden, HttpProblem, invalidField, type FieldCode } from './problems';
import type { WebhookConfig, WebhookDelivery } from './webhooks';

export interface CustomerRec {
  customerId: string;
  apiKey: string;
  webhook?: WebhookConfig | undefined;
  deliveries: WebhookDelivery[];
}

export interface OrganizationRec {
  organizationId: string;
  customerId: string;
  name: string;
  createdAt: string;
}

export interface ClinicRec {
  clinicId: string;
  organizationId: string;
  name: string;
  npi?: string | undefined;
  taxId?: string | undefined;
  address?: Address | undefined;
  createdAt: string;
}

export interface RegistrationRec {
  correlationId: string;
  portalId: string;
  clinicId: string;
  registeredEmail: string;
  registeredPhoneNumber?: string | undefined;
  forwardingEmail?: string | undefined;
  status: string;
  createdAt: string;
  updatedAt: string;
}

export interface MessageRec {
  id: string;
  correlationId: string;
  from: string;
  to: string;
  subject?: string;
  body: string;
  receivedAt: string;
  forwardedTo?: string;
}

export interface CredentialsRec {
  clinicId: string;
  portalId: string;
  username: string;
  password: string;
  loginMethod: LoginMethod;
  mfaEmail?: string | undefined;
  mfaPhoneNumber?: string | undefined;
  createdAt: string;
  updatedAt: string;
}

export interface ValidationRec {
  correlationId: string;
  customerId: string;
  clinicId?: string | undefined;
  portalId: string;
  credentials: InlineCredentials;
  createdAt: string;
  readyAt: number;
  status: 'Pending' | 'Valid' | 'Invalid';
  result?: ProblemDetails;
}

export interface VerificationRec {
  correlationId: string;
  customerId: string;
  mode: 'sync' | 'async';
  externalId?: string | undefined;
  /** Identifies the request body, for idempotent retries and the SBX-503-TWICE count. */
  fingerprint: string;
  status: string;
  createdAt: string;
  completedAt?: string | undefined;
  result?: unknown;
  /** What the verification comes to, revealed at readyAt. */
  outcome: { status: string; result: unknown };
  readyAt: number;
  clinicId?: string | undefined;
  portalId: string;
}

export interface ClaimRetrievalRec {
  correlationId: string;
  customerId: string;
  /** The caller's idempotency key: the same key and body again is the same retrieval. */
  externalId?: string | undefined;
  fingerprint?: string;
  status: string;
  createdAt: string;
}

export const newId = (prefix: string) => `${prefix}_${randomBytes(8).toString('hex')}`;
export const newCorrelationId = () => randomUUID();

export class SandboxState {
  readonly customers = new Map<string, CustomerRec>();
  readonly organizations = new Map<string, OrganizationRec>();
  readonly clinics = new Map<string, ClinicRec>();
  readonly registrations = new Map<string, RegistrationRec>();
  readonly emails: MessageRec[] = [];
  readonly sms: MessageRec[] = [];
  /** Keyed by `${clinicId}\u0000${portalId}`. */
  readonly credentials = new Map<string, CredentialsRec>();
  readonly validations = new Map<string, ValidationRec>();
  readonly verifications = new Map<string, VerificationRec>();
  readonly claimRetrievals = new Map<string, ClaimRetrievalRec>();
  /** How often a request (customer + fingerprint) was sent; drives the SBX-503-TWICE and SBX-429-ONCE scenarios. */
  readonly attempts = new Map<string, number>();
  readonly payers: SandboxPayer[] = defaultPayers();
  readonly portals: SandboxPortal[] = defaultPortals();
  /** The portals down for maintenance (portalMaintenance): every verification sent to one is Failed, SiteMaintenance. */
  readonly inMaintenance = new Set<string>();

  customerByKey(apiKey: string): CustomerRec | undefined {
    for (const c of this.customers.values()) if (c.apiKey === apiKey) return c;
    return undefined;
  }

  portal(portalId: string): SandboxPortal | undefined {
    return this.portals.find((p) => p.portalId === portalId);
  }

  /** The organization, checked to belong to `customerId`; unknown ids are a 422 naming `field`. */
  ownOrganization(customerId: string, organizationId: string, field = 'organizationId'): OrganizationRec {
    const org = this.organizations.get(organizationId);
    if (!org) throw invalidField(field, 'not_found', 'no organization has this id');
    if (org.customerId !== customerId) throw forbidden('this organization');
    return org;
  }

  /**
   * The clinic, checked to belong to `customerId`. Unknown ids are a 422 naming `field`, or the
   * given problem where the operation documents another status (404 on verifications).
   */
  ownClinic(customerId: string, clinicId: string, options: { field?: string; unknown?: () => HttpProblem } = {}): ClinicRec {
    const clinic = this.clinics.get(clinicId);
    if (!clinic) throw options.unknown?.() ?? invalidField(options.field ?? 'clinicId', 'not_found', 'no clinic has this id');
    this.ownOrganization(customerId, clinic.organizationId);
    return clinic;
  }

  /** The portal, or a 422 naming `field`. */
  knownPortal(portalId: string, field = 'portalId', code: FieldCode = 'not_found'): SandboxPortal {
    const portal = this.portal(portalId);
    if (!portal) throw invalidField(field, code, 'is not a portal in the portal network');
    return portal;
  }

  /** A record owned through a clinic or directly by a customer; unknown ids are a 404. */
  own<T extends { customerId?: string; clinicId?: string | undefined }>(customerId: string, rec: T | undefined, what: string): T {
    if (!rec) throw new HttpProblem(404, 'NotFound', 'Not Found', `no ${what} has this id`);
    const owner = rec.customerId ?? (rec.clinicId ? this.customerOfClinic(rec.clinicId) : undefined);
    if (owner !== customerId) throw forbidden(`this ${what}`);
    return rec;
  }

  customerOfClinic(clinicId: string): string | undefined {
    const clinic = this.clinics.get(clinicId);
    return clinic ? this.organizations.get(clinic.organizationId)?.customerId : undefined;
  }

  credentialsFor(clinicId: string, portalId: string): CredentialsRec | undefined {
    return this.credentials.get(`${clinicId}\u0000${portalId}`);
  }

  putCredentials(rec: CredentialsRec): void {
    this.credentials.set(`${rec.clinicId}\u0000${rec.portalId}`, rec);
  }

  registrationFor(clinicId: string, portalId: string): RegistrationRec | undefined {
    for (const r of this.registrations.values()) if (r.clinicId === clinicId && r.portalId === portalId) return r;
    return undefined;
  }
}

/** Cursors are opaque to callers: an offset, encoded. */
const encodeCursor = (offset: number) => Buffer.from(JSON.stringify({ o: offset })).toString('base64url');

function decodeCursor(cursor: string): number {
  try {
    const o = (JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as { o?: unknown }).o;
    if (typeof o === 'number' && Number.isInteger(o) && o >= 0) return o;
  } catch {
    // fall through
  }
  throw invalidField('cursor', 'invalid_value', 'is not a cursor this service issued');
}

export const DEFAULT_PAGE_SIZE = 50;

/** One page of `items` as the service lists them, each shown through `show`. */
export function page<T, U = T>(items: T[], query: PageQuery, show: (item: T) => U = (item) => item as unknown as U): { items: U[]; nextCursor: string | null } {
  const offset = query.cursor ? decodeCursor(query.cursor) : 0;
  const limit = query.limit ?? DEFAULT_PAGE_SIZE;
  const slice = items.slice(offset, offset + limit).map(show);
  return { items: slice, nextCursor: offset + limit < items.length ? encodeCursor(offset + limit) : null };
}
