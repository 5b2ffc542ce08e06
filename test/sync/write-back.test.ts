import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { Bundle } from 'fhir/r4';
import { EligibilityCheck } from '../../src/domain';
import { FhirInputError } from '../../src/adapters/fhir/operation-outcome';
import { projectRoot } from '../../src/mapping-files';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import { fhirWriter, type EligibilityWriter } from '../../src/sync/write-back';
import { toOutcome } from '../../src/verification/outcome';

const fixture = (...p: string[]) => JSON.parse(readFileSync(path.join(projectRoot, 'fixtures', ...p), 'utf8')) as unknown;
const [check] = EligibilityCheck.array().parse(fixture('fhir', 'self.expected.json'));
const completed = toOutcome(fixture('results', 'completed-full.json'));

let server: FhirServer;
let writer: EligibilityWriter;

beforeAll(async () => {
  server = await startFhirServer({ validate: true });
  writer = await fhirWriter(server.url);
  const chart = fixture('fhir', 'self.bundle.json') as Bundle;
  await server.seed((chart.entry ?? []).flatMap((e) => (e.resource ? [e.resource] : [])));
});
afterAll(() => server.close());

async function search(type: string): Promise<Array<{ id?: string }>> {
  const res = await fetch(`${server.url}/${type}`);
  const bundle = (await res.json()) as Bundle;
  return (bundle.entry ?? []).map((e) => e.resource as { id?: string });
}

describe('write-back into the chart', () => {
  it('writes the request and the response it answers, linked, validated by the server', async () => {
    if (!check) throw new Error('fixture has no check');
    const written = await writer.write(check, completed);
    const res = await fetch(`${server.url}/CoverageEligibilityResponse/${written.responseId}`);
    expect(res.status).toBe(200);
    const stored = (await res.json()) as { request: { reference: string }; patient: { reference: string }; outcome: string };
    expect(stored.request.reference).toBe(`CoverageEligibilityRequest/${written.requestId}`);
    expect(stored.patient.reference).toBe('Patient/pat-ellen');
    expect(stored.outcome).toBe('complete');
  });

  it('writes the same result twice as one request and one response', async () => {
    if (!check) throw new Error('fixture has no check');
    const partial = toOutcome(fixture('results', 'partial.json'));
    const first = await writer.write(check, partial);
    const before = (await search('CoverageEligibilityResponse')).length;
    const again = await writer.write(check, partial);
    expect(again.responseId).toBe(first.responseId);
    expect(again.requestId).toBe(first.requestId);
    expect((await search('CoverageEligibilityResponse')).length).toBe(before);
    const res = await fetch(`${server.url}/CoverageEligibilityResponse/${again.responseId}`);
    expect(((await res.json()) as { request: { reference: string } }).request.reference).toBe(`CoverageEligibilityRequest/${first.requestId}`);
  });

  it('gives a new verification of the same check its own request, linked to its own response', async () => {
    if (!check) throw new Error('fixture has no check');
    const failed = toOutcome(fixture('results', 'failed-site-maintenance.json'));
    const retried = toOutcome({ ...(fixture('results', 'completed-minimal.json') as object), correlationId: 'ver_retry_after_maintenance' });
    const first = await writer.write(check, failed);
    const second = await writer.write(check, retried);
    expect(second.requestId).not.toBe(first.requestId);
    const res = await fetch(`${server.url}/CoverageEligibilityResponse/${second.responseId}`);
    expect(((await res.json()) as { request: { reference: string } }).request.reference).toBe(`CoverageEligibilityRequest/${second.requestId}`);
  });

  it('refuses a check whose chart resources are not known, naming the element, and writes nothing', async () => {
    if (!check) throw new Error('fixture has no check');
    const hl7Check = { ...check, source: { kind: 'hl7' as const, messageControlId: 'X1', messageType: 'SIU^S12', receivedAt: '2026-11-20T15:00:00Z' } };
    const before = (await search('CoverageEligibilityRequest')).length;
    const err = (await writer.write(hl7Check, completed).catch((e: unknown) => e)) as FhirInputError;
    expect(err).toBeInstanceOf(FhirInputError);
    expect(err.message).toBe('Patient: the chart resource for this check is not known; pass it in refs');
    expect((await search('CoverageEligibilityRequest')).length).toBe(before);
  });

  it('refuses an outcome it cannot map, before anything reaches the server', async () => {
    if (!check) throw new Error('fixture has no check');
    const unknown = toOutcome({ correlationId: 'c-unknown', status: 'Escalated', result: {} });
    const before = [(await search('CoverageEligibilityRequest')).length, (await search('CoverageEligibilityResponse')).length];
    await expect(writer.write(check, unknown)).rejects.toThrow('status: is not Completed, Partial, Failed or Pending');
    expect([(await search('CoverageEligibilityRequest')).length, (await search('CoverageEligibilityResponse')).length]).toEqual(before);
  });
});
