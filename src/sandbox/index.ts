/**
 * The embedded sandbox: a faithful in-process simulator of the Dental Insurance Verification
 * Service v2 on node:http, serving exactly the wire shapes of src/verification/wire.ts. Used by
 * the demo, by tests, and by integrators who have no sandbox key yet.
 *
 *   const sandbox = await startSandbox({ webhook: { url, secret } });
 *   // point the client at sandbox.url with sandbox.apiKey …
 *   await sandbox.close();
 *
 * State is in memory. Every answer says it is the sandbox (`x-sandbox: true`, `"sandbox": true`,
 * and a Sandbox disclaimer in every verification result).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEFAULT_TIMING, requestLatencyMs, type SandboxCore, type SandboxTiming } from './core';
import { Front, type Fault, type LoggedRequest } from './http';
import type { SandboxPayer, SandboxPortal } from './network';
import { Scheduler } from './scheduler';
import { createRegistration, setupRoutes } from './setup';
import { SandboxState } from './state';
import { verificationRoutes } from './verifications';
import { checkWebhookConfig, WebhookSender, type WebhookConfig, type WebhookDelivery } from './webhooks';
import { httpOrigin } from '../url-checks';

export { DEFAULT_TIMING, portalRefuses, requestLatencyMs, type SandboxTiming } from './core';
export type { Fault, LoggedRequest } from './http';
export { defaultPayers, defaultPortals, lookupPayer, type SandboxPayer, type SandboxPortal } from './network';
export { ERROR_TYPE_BASE } from './problems';
export { FAILURE_KINDS, SCENARIOS, UNLISTED_FAILURE_KIND, type ScenarioEntry } from './scenarios';
export { NO_CLAIMS_MEMBER_ID } from './verifications';
export { checkWebhookConfig, generateWebhookSecret, signedHeaders, type WebhookConfig, type WebhookDelivery } from './webhooks';

export const DEFAULT_API_KEY = 'sk_sandbox_0000000000000000';
export const DEFAULT_CUSTOMER_ID = 'cus_sandbox';

/** What `seed: true` creates: the practice of mappings/clinics.json, ready to verify on every portal. */
export const DEMO_PRACTICE = {
  organizationId: 'org_sandbox_bright_smiles',
  name: 'Bright Smiles Dental Group',
  clinics: [
    {
      clinicId: 'cln_sandbox_main',
      name: 'Bright Smiles Dental - Main St',
      npi: '1234567893',
      taxId: '12-3456789',
      address: { line1: '120 Main St', line2: 'Suite 200', city: 'Springfield', state: 'IL', postalCode: '62701' },
    },
    {
      clinicId: 'cln_sandbox_north',
      name: 'Bright Smiles Dental - North',
      npi: '1245319599',
      taxId: '12-3456789',
      address: { line1: '48 Lake Shore Rd', city: 'Springfield', state: 'IL', postalCode: '62704' },
    },
  ],
} as const;

export interface SandboxCustomer {
  customerId: string;
  apiKey: string;
  webhook?: WebhookConfig | undefined;
}

export interface SandboxOptions {
  /** 127.0.0.1 unless told otherwise. */
  host?: string;
  /** 0 (the default) lets the OS choose. */
  port?: number;
  /** The default customer's key and id. */
  apiKey?: string;
  customerId?: string;
  /** Where the default customer's asynchronous results go. */
  webhook?: WebhookConfig | undefined;
  /** More customers, e.g. to test 403 across customers. */
  customers?: SandboxCustomer[];
  /** `authorization` (Bearer, the default) or another header carrying the key as is, e.g. `x-api-key`. */
  apiKeyHeader?: string;
  timing?: Partial<SandboxTiming>;
  /** Create the demo practice (DEMO_PRACTICE) for the default customer, with credentials stored on every portal. */
  seed?: boolean;
  /** The clock; timers still run in real time. */
  now?: () => Date;
}

export interface Sandbox {
  /** Base URL, e.g. http://127.0.0.1:41234 (paths carry /v2). */
  readonly url: string;
  readonly port: number;
  readonly apiKey: string;
  readonly customerId: string;
  readonly timing: Readonly<SandboxTiming>;
  addCustomer(customer: SandboxCustomer): void;
  /** Sets (or with undefined, removes) a customer's webhook; the default customer when none is named. */
  configureWebhook(config: WebhookConfig | undefined, customerId?: string): void;
  /** Every webhook delivery made for a customer, with each attempt, in order. */
  webhookDeliveries(customerId?: string): readonly WebhookDelivery[];
  /** Serve a fault (status, raw body, reset, delay) to the next matching requests. */
  injectFault(fault: Fault): void;
  /** Ends every fault injected, however many requests each had left: the service answering again. */
  clearFaults(): void;
  /** Changes a portal in the network, e.g. its authenticationMethods; updatedAt moves to now. */
  updatePortal(portalId: string, patch: Partial<Omit<SandboxPortal, 'portalId'>>): void;
  /**
   * Takes a portal down for maintenance (`down` true) or brings it back: meanwhile every verification
   * sent to it, of any member id, is Failed with SiteMaintenance, as SBX-FAIL-SiteMaintenance is, a
   * payer's night or weekend of maintenance being of its portal, not of a member.
   */
  portalMaintenance(portalId: string, down: boolean): void;
  /** Changes a payer in the network; updatedAt moves to now. */
  updatePayer(primaryPayerId: string, patch: Partial<Omit<SandboxPayer, 'primaryPayerId'>>): void;
  /** Method, path and status of every request, in order; never a body or a key. */
  readonly requestLog: readonly LoggedRequest[];
  /** Resolves when nothing is pending: asynchronous completions, validations and webhook attempts. */
  settle(): Promise<void>;
  close(): Promise<void>;
}

export async function startSandbox(options: SandboxOptions = {}): Promise<Sandbox> {
  const now = options.now ?? (() => new Date());
  const timing: SandboxTiming = { ...DEFAULT_TIMING, ...options.timing };
  const scheduler = new Scheduler();
  const state = new SandboxState();
  const core: SandboxCore = {
    state,
    scheduler,
    timing,
    now,
    webhooks: new WebhookSender({ attempts: 3, backoffMs: timing.webhookBackoffMs, timeoutMs: timing.webhookTimeoutMs }, scheduler, now),
  };

  const apiKey = options.apiKey ?? DEFAULT_API_KEY;
  const customerId = options.customerId ?? DEFAULT_CUSTOMER_ID;
  const addCustomer = (c: SandboxCustomer) => {
    checkWebhookConfig(c.webhook);
    if (state.customerByKey(c.apiKey) && state.customerByKey(c.apiKey)?.customerId !== c.customerId) {
      throw new Error(`sandbox: API key already belongs to customer ${state.customerByKey(c.apiKey)?.customerId}`);
    }
    state.customers.set(c.customerId, { customerId: c.customerId, apiKey: c.apiKey, webhook: c.webhook, deliveries: [] });
  };
  addCustomer({ customerId, apiKey, webhook: options.webhook });
  for (const c of options.customers ?? []) addCustomer(c);
  if (options.seed) seedDemoPractice(core, customerId);

  const front = new Front([...setupRoutes(core), ...verificationRoutes(core)], {
    apiKeyHeader: options.apiKeyHeader ?? 'authorization',
    customerByKey: (key) => state.customerByKey(key),
    now,
    latencyMs: () => requestLatencyMs(timing),
  });
  const server = createServer(front.listener);
  const host = options.host ?? '127.0.0.1';
  await listen(server, options.port ?? 0, host);
  const port = (server.address() as AddressInfo).port;
  const customer = (id: string) => {
    const c = state.customers.get(id);
    if (!c) throw new Error(`sandbox: no customer ${id}`);
    return c;
  };
  const stamp = () => now().toISOString();

  return {
    url: httpOrigin(host, port),
    port,
    apiKey,
    customerId,
    timing,
    addCustomer,
    configureWebhook: (config, id = customerId) => {
      checkWebhookConfig(config);
      customer(id).webhook = config;
    },
    webhookDeliveries: (id = customerId) => customer(id).deliveries,
    injectFault: (fault) => front.injectFault(fault),
    clearFaults: () => front.clearFaults(),
    updatePortal: (portalId, patch) => {
      const portal = state.portal(portalId);
      if (!portal) throw new Error(`sandbox: no portal ${portalId}`);
      Object.assign(portal, patch, { updatedAt: stamp() });
    },
    portalMaintenance: (portalId, down) => {
      if (!state.portal(portalId)) throw new Error(`sandbox: no portal ${portalId}`);
      if (down) state.inMaintenance.add(portalId);
      else state.inMaintenance.delete(portalId);
    },
    updatePayer: (primaryPayerId, patch) => {
      const payer = state.payers.find((p) => p.primaryPayerId === primaryPayerId);
      if (!payer) throw new Error(`sandbox: no payer ${primaryPayerId}`);
      Object.assign(payer, patch, { updatedAt: stamp() });
    },
    requestLog: front.log,
    settle: () => scheduler.settle(),
    close: async () => {
      scheduler.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/**
 * The demo practice: the organization and clinics of mappings/clinics.json, registered on every
 * portal that needs an account, with credentials stored (login method the portal takes, MFA
 * email and phone from the registration), so any payer can be verified at once.
 */
function seedDemoPractice(core: SandboxCore, customerId: string): void {
  const { state } = core;
  const at = core.now().toISOString();
  state.organizations.set(DEMO_PRACTICE.organizationId, {
    organizationId: DEMO_PRACTICE.organizationId,
    customerId,
    name: DEMO_PRACTICE.name,
    createdAt: at,
  });
  for (const c of DEMO_PRACTICE.clinics) {
    state.clinics.set(c.clinicId, { ...c, organizationId: DEMO_PRACTICE.organizationId, createdAt: at });
    for (const portal of state.portals.filter((p) => p.requiresAuthentication)) {
      const reg = createRegistration(core, c.clinicId, portal);
      state.putCredentials({
        clinicId: c.clinicId,
        portalId: portal.portalId,
        username: `brightsmiles.${c.clinicId.replace(/^cln_sandbox_/, '')}`,
        password: 'sandbox-password',
        loginMethod: portal.loginMethods[0] === 'SSO' ? 'SSO' : 'Native',
        mfaEmail: reg.registeredEmail,
        ...(reg.registeredPhoneNumber ? { mfaPhoneNumber: reg.registeredPhoneNumber } : {}),
        createdAt: at,
        updatedAt: at,
      });
    }
  }
}
