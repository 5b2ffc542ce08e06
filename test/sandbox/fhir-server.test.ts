import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import type { Bundle, CapabilityStatement, CoverageEligibilityResponse, OperationOutcome, Patient, Resource } from 'fhir/r4';
import { r4Errors } from '../../src/adapters/fhir/validate';
import type { Client, FhirResource } from 'fhir-kit-client' with { 'resolution-mode': 'import' };
import { createFhirHandler, startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import { CREATED, readResult, RESULT_REFS } from '../adapters/fhir/corpus';
import { toCoverageEligibilityResponse } from '../../src/adapters/fhir/out';
import { toOutcome } from '../../src/verification/outcome';

/** The embedded FHIR server over real HTTP, driven by fhir-kit-client as the write-back will be. */

/** fhir-kit-client types bodies as an open record; @types/fhir resources have no index signature. */
const body = (resource: Resource) => resource as unknown as FhirResource;
const as = <T extends Resource>(response: FhirResource) => response as unknown as T;

let server: FhirServer;
let validating: FhirServer;
let client: Client;
let validatingClient: Client;

beforeAll(async () => {
  const { Client } = await import('fhir-kit-client');
  server = await startFhirServer();
  validating = await startFhirServer({ validate: true, maxBodyBytes: 64 * 1024 });
  client = new Client({ baseUrl: server.url });
  validatingClient = new Client({ baseUrl: validating.url });
});

afterAll(async () => {
  await server?.close();
  await validating?.close();
});

/** fhir-kit-client throws `HTTP <status>` errors carrying the parsed OperationOutcome. */
async function failure(run: () => Promise<unknown>): Promise<{ status: number; data: OperationOutcome }> {
  try {
    await run();
  } catch (err) {
    const response = (err as { response?: { status: number; data: OperationOutcome } }).response;
    if (response) return response;
    throw err;
  }
  throw new Error('expected the request to fail');
}

const patient: Patient = {
  resourceType: 'Patient',
  identifier: [{ system: 'urn:oid:2.16.840.1.113883.3.9999.2', value: 'MRN-1' }],
  name: [{ family: 'Whitaker', given: ['Ellen'] }],
  birthDate: '1978-03-14',
};

describe('startFhirServer', () => {
  it('listens on loopback with an OS-assigned port under /fhir/R4', () => {
    expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/fhir\/R4$/);
    expect(server.url).not.toBe(validating.url);
  });

  it('answers GET [base]/metadata with a valid R4 CapabilityStatement, as a client or a health check reads it', async () => {
    const statement = as<CapabilityStatement>(await client.capabilityStatement());
    expect(statement.resourceType).toBe('CapabilityStatement');
    expect(statement.fhirVersion).toBe('4.0.1');
    expect(statement.rest?.[0]?.resource?.map((r) => r.type)).toEqual(expect.arrayContaining(['Patient', 'Coverage', 'CoverageEligibilityResponse']));
    // R4's own FHIR-version value set stops at 4.0.0, though R4 is 4.0.1, which servers report and clients compare against.
    expect(r4Errors(statement).map((i) => i.expression)).toEqual(['CapabilityStatement.fhirVersion']);
  });

  it('creates, reads and searches resources', async () => {
    const created = as<Patient>(await client.create({ resourceType: 'Patient', body: body(patient) }));
    expect(created.id).toEqual(expect.any(String));
    const read = as<Patient>(await client.read({ resourceType: 'Patient', id: created.id ?? '' }));
    expect(read.name).toEqual(patient.name);
    const found = as<Bundle>(await client.search({ resourceType: 'Patient', searchParams: { identifier: 'urn:oid:2.16.840.1.113883.3.9999.2|MRN-1' } }));
    expect(found.entry?.map((e) => e.resource?.id)).toEqual([created.id]);
    expect(await server.repo.readResource('Patient', created.id ?? '')).toMatchObject({ birthDate: '1978-03-14' });
  });

  it('answers a create with 201, Location and ETag', async () => {
    const res = await request(`${server.url}/Patient`, {
      method: 'POST',
      headers: { 'content-type': 'application/fhir+json' },
      body: JSON.stringify({ ...patient, identifier: [{ system: 'urn:x', value: 'loc' }] }),
    });
    const body = (await res.body.json()) as Patient;
    expect(res.statusCode).toBe(201);
    expect(res.headers.location).toBe(`${server.url}/Patient/${body.id}/_history/${body.meta?.versionId}`);
    expect(res.headers.etag).toBe(`W/"${body.meta?.versionId}"`);
    expect(res.headers['content-type']).toMatch(/^application\/fhir\+json/);
  });

  it('makes a conditional create (If-None-Exist) idempotent: twice gives one resource', async () => {
    const response = toCoverageEligibilityResponse(toOutcome(readResult('completed-full')), RESULT_REFS, { created: CREATED });
    const ifNoneExist = `identifier=${response.identifier?.[0]?.system}|${response.identifier?.[0]?.value}`;
    const conditionalCreate = async () =>
      as<CoverageEligibilityResponse>(
        await validatingClient.create({ resourceType: 'CoverageEligibilityResponse', body: body(response), options: { headers: { 'If-None-Exist': ifNoneExist } } }),
      );
    const first = await conditionalCreate();
    const second = await conditionalCreate();
    expect(second.id).toBe(first.id);
    const all = as<Bundle>(await validatingClient.search({ resourceType: 'CoverageEligibilityResponse', searchParams: { identifier: ifNoneExist.slice('identifier='.length) } }));
    expect(all.entry).toHaveLength(1);
  });

  it('with validate: true, refuses an invalid write with 422 and an OperationOutcome naming the element', async () => {
    const bad = { ...toCoverageEligibilityResponse(toOutcome(readResult('pending')), RESULT_REFS, { created: CREATED }), outcome: 'done' };
    const { status, data } = await failure(() => validatingClient.create({ resourceType: 'CoverageEligibilityResponse', body: body(bad as Resource) }));
    expect(status).toBe(422);
    expect(data.resourceType).toBe('OperationOutcome');
    expect(data.issue.map((i) => i.expression?.[0])).toContain('CoverageEligibilityResponse.outcome');
    // The server without validation takes what it is given, as Medplum's repository does.
    expect(as<CoverageEligibilityResponse>(await client.create({ resourceType: 'CoverageEligibilityResponse', body: body(bad as Resource) })).id).toBeDefined();
  });

  it('with validate: true, checks every entry of a transaction', async () => {
    const bundle: Bundle = {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        { fullUrl: 'urn:uuid:0b4c6f1e-5b0f-4d8e-9a33-6f4f1a2b3c4d', resource: patient, request: { method: 'POST', url: 'Patient' } },
        { resource: { resourceType: 'Patient', gender: 'F' } as unknown as Patient, request: { method: 'POST', url: 'Patient' } },
      ],
    };
    const { status, data } = await failure(() => validatingClient.transaction({ body: body(bundle) }));
    expect(status).toBe(422);
    expect(data.issue.map((i) => i.expression?.[0])).toContain('Bundle.entry[1].resource.gender');
    const valid: Bundle = { ...bundle, entry: bundle.entry?.slice(0, 1) };
    const ok = as<Bundle>(await validatingClient.transaction({ body: body(valid) }));
    expect(ok.entry?.[0]?.response?.status).toMatch(/^201/);
  });

  it('answers errors as OperationOutcomes: unknown resource 404, bad JSON 400, outside the base 404, too large 413', async () => {
    expect((await failure(() => client.read({ resourceType: 'Patient', id: 'nope' }))).status).toBe(404);
    const badJson = await request(`${server.url}/Patient`, { method: 'POST', headers: { 'content-type': 'application/fhir+json' }, body: '{"resourceType":' });
    expect(badJson.statusCode).toBe(400);
    expect(((await badJson.body.json()) as OperationOutcome).issue[0]?.diagnostics).toBe('request body is not valid JSON');
    const outside = await request(server.url.replace('/fhir/R4', '/admin'));
    expect(outside.statusCode).toBe(404);
    expect(((await outside.body.json()) as OperationOutcome).resourceType).toBe('OperationOutcome');
    const big = await request(`${validating.url}/Patient`, {
      method: 'POST',
      headers: { 'content-type': 'application/fhir+json' },
      body: JSON.stringify({ ...patient, text: { status: 'generated', div: `<div xmlns="http://www.w3.org/1999/xhtml">${'x'.repeat(70 * 1024)}</div>` } }),
    });
    expect(big.statusCode).toBe(413);
    expect(((await big.body.json()) as OperationOutcome).issue[0]?.code).toBe('too-costly');
  });
});

describe('transactions', () => {
  const mrn = (value: string): Patient => ({ ...patient, identifier: [{ system: 'urn:x:tx', value }] });
  const count = async (target: FhirServer, type: string) => (as<Bundle>(await new (client.constructor as typeof Client)({ baseUrl: target.url }).search({ resourceType: type, searchParams: { _count: 100 } })).entry ?? []).length;

  it('leaves nothing behind when one entry fails (not validated: the router itself refuses it)', async () => {
    const before = await count(server, 'Patient');
    const bundle: Bundle = {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        { fullUrl: 'urn:uuid:5e7a1c0e-1b2c-4d3e-8f40-5a6b7c8d9e01', resource: mrn('TX-1'), request: { method: 'POST', url: 'Patient' } },
        // A resource of another type than the URL names: the router answers 400 after the Patient is stored.
        { resource: { resourceType: 'Organization', name: 'Wrong place' }, request: { method: 'POST', url: 'Patient' } },
      ],
    };
    const { status } = await failure(() => client.transaction({ body: body(bundle) }));
    expect(status).toBe(400);
    expect(await count(server, 'Patient')).toBe(before);
    const found = as<Bundle>(await client.search({ resourceType: 'Patient', searchParams: { identifier: 'urn:x:tx|TX-1' } }));
    expect(found.entry ?? []).toHaveLength(0);
  });

  it('rolls back an update too: a stale If-Match fails the whole transaction and the create with it', async () => {
    const stored = as<Patient>(await client.create({ resourceType: 'Patient', body: body(mrn('TX-2')) }));
    const bundle: Bundle = {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        { resource: mrn('TX-3'), request: { method: 'POST', url: 'Patient' } },
        { resource: { ...stored, gender: 'female' }, request: { method: 'PUT', url: `Patient/${stored.id}`, ifMatch: 'W/"not-the-version"' } },
      ],
    };
    expect((await failure(() => client.transaction({ body: body(bundle) }))).status).toBe(412);
    const after = as<Patient>(await client.read({ resourceType: 'Patient', id: stored.id ?? '' }));
    expect(after.gender).toBeUndefined();
    expect(after.meta?.versionId).toBe(stored.meta?.versionId);
    expect(as<Bundle>(await client.search({ resourceType: 'Patient', searchParams: { identifier: 'urn:x:tx|TX-3' } })).entry ?? []).toHaveLength(0);
  });

  it('resolves conditional creates and a conditional update by identifier, rewriting urn:uuid references', async () => {
    const patientUrn = 'urn:uuid:6f1d2c3b-4a59-4e6f-8a7b-9c0d1e2f3a4b';
    const bundle = (gender: Patient['gender']): Bundle => ({
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [
        { fullUrl: patientUrn, resource: mrn('TX-4'), request: { method: 'POST', url: 'Patient', ifNoneExist: 'identifier=urn:x:tx|TX-4' } },
        {
          resource: { resourceType: 'Observation', status: 'final', code: { text: gender ?? 'none' }, subject: { reference: patientUrn }, identifier: [{ system: 'urn:x:obs', value: 'O-4' }] },
          request: { method: 'PUT', url: 'Observation?identifier=urn:x:obs|O-4' },
        },
      ],
    });
    const first = as<Bundle>(await client.transaction({ body: body(bundle('female')) }));
    const second = as<Bundle>(await client.transaction({ body: body(bundle('male')) }));
    expect(first.entry?.map((e) => e.response?.status)).toEqual(['201', '201']);
    expect(second.entry?.map((e) => e.response?.status)).toEqual(['200', '200']);
    const [patientId, observationId] = [second.entry?.[0]?.resource?.id, second.entry?.[1]?.resource?.id];
    expect([patientId, observationId]).toEqual([first.entry?.[0]?.resource?.id, first.entry?.[1]?.resource?.id]);
    const observations = as<Bundle>(await client.search({ resourceType: 'Observation', searchParams: { identifier: 'urn:x:obs|O-4' } }));
    expect(observations.entry).toHaveLength(1);
    expect(observations.entry?.[0]?.resource).toMatchObject({ code: { text: 'male' }, subject: { reference: `Patient/${patientId}` } });
  });

  it('searches by a posted form, so identifiers stay out of the URL', async () => {
    await client.create({ resourceType: 'Patient', body: body(mrn('TX-5')) });
    const found = as<Bundle>(await client.search({ resourceType: 'Patient', searchParams: { identifier: 'urn:x:tx|TX-5' }, options: { postSearch: true } }));
    expect(found.entry).toHaveLength(1);
  });

  it('with Prefer: return=minimal, answers each entry with its status and location and leaves the resources out', async () => {
    const bundle: Bundle = {
      resourceType: 'Bundle',
      type: 'transaction',
      entry: [{ fullUrl: 'urn:uuid:0b5e6a1c-2d3f-4e4a-9b5c-6d7e8f9a0b1c', resource: mrn('TX-6'), request: { method: 'POST', url: 'Patient', ifNoneExist: 'identifier=urn:x:tx|TX-6' } }],
    };
    const post = (prefer?: string) =>
      request(server.url, { method: 'POST', headers: { 'content-type': 'application/fhir+json', ...(prefer && { prefer }) }, body: JSON.stringify(bundle) }).then(async (r) => (await r.body.json()) as Bundle);
    const minimal = await post('return=minimal');
    const full = await post();
    expect(minimal.entry?.map((e) => ({ status: e.response?.status, resource: e.resource }))).toEqual([{ status: '201', resource: undefined }]);
    const location = minimal.entry?.[0]?.response?.location ?? '';
    expect(location).toMatch(/^Patient\/[^/]+/);
    // Without the header the same conditional create matches what the first made, and sends it back.
    expect(full.entry?.map((e) => [e.response?.status, `Patient/${e.resource?.id}`])).toEqual([['200', location.split('/_history')[0]]]);
  });
});

describe('createFhirHandler', () => {
  let host: Server;
  let base: string;

  beforeAll(async () => {
    const fhir = createFhirHandler({ basePath: '/fhir', validate: true });
    host = createServer((req, res) => {
      if (req.url?.startsWith('/fhir')) return void fhir.handle(req, res);
      res.writeHead(200, { 'content-type': 'text/plain' }).end('the host server');
    });
    await new Promise<void>((resolve) => host.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(host.address() as AddressInfo).port}`;
    await fhir.seed([{ ...patient, id: 'seeded-1' }]);
  });
  afterAll(() => new Promise<void>((resolve) => host.close(() => resolve())));

  it('serves FHIR under the base path of another server, which keeps its own routes', async () => {
    const read = await request(`${base}/fhir/Patient/seeded-1`);
    expect(read.statusCode).toBe(200);
    expect(((await read.body.json()) as Patient).birthDate).toBe('1978-03-14');
    const created = await request(`${base}/fhir/Patient`, { method: 'POST', headers: { 'content-type': 'application/fhir+json' }, body: JSON.stringify(patient) });
    expect(created.statusCode).toBe(201);
    expect(created.headers.location).toMatch(new RegExp(`^${base}/fhir/Patient/[^/]+/_history/`));
    await created.body.dump();
    const own = await request(`${base}/healthz`);
    expect(await own.body.text()).toBe('the host server');
  });

  it('validates writes as the standalone server does', async () => {
    const res = await request(`${base}/fhir/Patient`, { method: 'POST', headers: { 'content-type': 'application/fhir+json' }, body: JSON.stringify({ resourceType: 'Patient', gender: 'F' }) });
    expect(res.statusCode).toBe(422);
    expect(((await res.body.json()) as OperationOutcome).issue.map((i) => i.expression?.[0])).toContain('Patient.gender');
  });
});
