import { request } from 'undici';
import type { Bundle, CoverageEligibilityResponse, OperationOutcome, Patient, Resource } from 'fhir/r4';
import type { Client, FhirResource } from 'fhir-kit-client' with { 'resolution-mode': 'import' };
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
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
