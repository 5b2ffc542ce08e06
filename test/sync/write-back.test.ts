import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { request } from 'undici';
import type { Bundle, Coverage, CoverageEligibilityRequest, CoverageEligibilityResponse, Organization, Patient, Resource } from 'fhir/r4';
import { EligibilityCheck } from '../../src/domain';
import { projectRoot } from '../../src/mapping-files';
import { startFhirServer, type FhirServer } from '../../src/sandbox/fhir-server';
import { ChartWriteError } from '../../src/sync/chart-errors';
import { fhirWriter, type EligibilityWriter } from '../../src/sync/write-back';
import { toOutcome } from '../../src/verification/outcome';
import { json, startScriptedServer, streamLarge } from '../support/http-server';

const fixture = (...p: string[]) => JSON.parse(readFileSync(path.join(projectRoot, 'fixtures', ...p), 'utf8')) as unknown;
const [check] = EligibilityCheck.array().parse(fixture('fhir', 'self.expected.json'));
const hl7Fixture = fixture('hl7', 'molarpms-siu-s12-two-insurances.expected.json') as { messages: Array<{ outcome: { checks: unknown[] } }> };
const [primary, secondary] = EligibilityCheck.array().parse(hl7Fixture.messages[0]?.outcome.checks);
const completed = toOutcome(fixture('results', 'completed-full.json'));
const withId = (body: object, correlationId: string) => toOutcome({ ...body, correlationId });

let server: FhirServer;
let writer: EligibilityWriter;

beforeAll(async () => {
  server = await startFhirServer({ validate: true });
  writer = await fhirWriter(server.url);
  const chart = fixture('fhir', 'self.bundle.json') as Bundle;
  await server.seed((chart.entry ?? []).flatMap((e) => (e.resource ? [e.resource] : [])));
});
afterAll(() => server.close());

async function search<T extends Resource>(type: string, query = ''): Promise<T[]> {
  const res = await request(`${server.url}/${type}?_count=200${query ? `&${query}` : ''}`);
  const bundle = (await res.body.json()) as Bundle;
  return (bundle.entry ?? []).map((e) => e.resource as T);
}
const read = async <T extends Resource>(type: string, id: string) => (await (await request(`${server.url}/${type}/${id}`)).body.json()) as T;
const CHART_TYPES = ['Patient', 'Coverage', 'Organization', 'CoverageEligibilityRequest', 'CoverageEligibilityResponse'] as const;
const counts = async () => Object.fromEntries(await Promise.all(CHART_TYPES.map(async (t) => [t, (await search(t)).length] as const))) as Record<(typeof CHART_TYPES)[number], number>;
const byCorrelation = (id: string) => `identifier=https://dental-elig.dev/fhir/sid/verification-correlation-id|${id}`;

function required<T>(value: T | undefined): T {
  if (value === undefined) throw new Error('fixture is missing a check');
  return value;
}

describe('write-back of a FHIR-sourced check', () => {
  it('writes the request and the response it answers, linked to the chart the check came from', async () => {
    const written = await writer.write(required(check), completed);
    const stored = await read<CoverageEligibilityResponse>('CoverageEligibilityResponse', written.responseId);
    expect(stored.request.reference).toBe(`CoverageEligibilityRequest/${written.requestId}`);
    expect(stored.patient.reference).toBe('Patient/pat-ellen');
    expect(stored.outcome).toBe('complete');
    expect([written.patientId, written.coverageId, written.changed]).toEqual(['pat-ellen', 'cov-ellen-delta', true]);
    const storedRequest = await read<CoverageEligibilityRequest>('CoverageEligibilityRequest', written.requestId);
    // The visit's date on both, so the response read alone says which visit it is for.
    expect([stored.servicedDate, storedRequest.servicedDate]).toEqual([required(check).dateOfService, required(check).dateOfService]);
    expect(storedRequest.supportingInfo?.[0]?.information).toEqual({ reference: 'Appointment/appt-1001' });
    expect(written.response.request.reference).toBe(`CoverageEligibilityRequest/${written.requestId}`);
  });

  it('writes the same result twice as one pair, and the second time sends nothing (no new version)', async () => {
    const partial = withId(fixture('results', 'partial.json') as object, 'ver_twice');
    const first = await writer.write(required(check), partial);
    const before = await counts();
    const version = (await read<Resource>('CoverageEligibilityResponse', first.responseId)).meta?.versionId;
    const again = await writer.write(required(check), partial);
    expect([again.requestId, again.responseId, again.changed]).toEqual([first.requestId, first.responseId, false]);
    expect(await counts()).toEqual(before);
    expect((await read<Resource>('CoverageEligibilityResponse', first.responseId)).meta?.versionId).toBe(version);
  });

  it('updates the one response in place when a later result for the same verification arrives', async () => {
    const failed = withId(fixture('results', 'failed-site-maintenance.json') as object, 'ver_failed_then_completed');
    const done = withId(fixture('results', 'completed-minimal.json') as object, 'ver_failed_then_completed');
    const first = await writer.write(required(check), failed);
    expect((await read<CoverageEligibilityResponse>('CoverageEligibilityResponse', first.responseId)).outcome).toBe('error');
    const second = await writer.write(required(check), done);
    expect([second.requestId, second.responseId]).toEqual([first.requestId, first.responseId]);
    const responses = await search<CoverageEligibilityResponse>('CoverageEligibilityResponse', byCorrelation('ver_failed_then_completed'));
    expect(responses.map((r) => [r.id, r.outcome, r.error])).toEqual([[first.responseId, 'complete', undefined]]);
    expect(await search('CoverageEligibilityRequest', byCorrelation('ver_failed_then_completed'))).toHaveLength(1);
    expect(responses[0]?.created).toBe(first.response.created);
  });

  it('gives a new verification of the same check its own request, linked to its own response', async () => {
    const failed = toOutcome(fixture('results', 'failed-site-maintenance.json'));
    const retried = withId(fixture('results', 'completed-minimal.json') as object, 'ver_retry_after_maintenance');
    const first = await writer.write(required(check), failed);
    const second = await writer.write(required(check), retried);
    expect(second.requestId).not.toBe(first.requestId);
    const stored = await read<CoverageEligibilityResponse>('CoverageEligibilityResponse', second.responseId);
    expect(stored.request.reference).toBe(`CoverageEligibilityRequest/${second.requestId}`);
  });

  it('writes a result reused for another appointment as that appointment\'s own pair, leaving the first as it was', async () => {
    const outcome = withId(fixture('results', 'completed-minimal.json') as object, 'ver_reused');
    const first = await writer.write(required(check), outcome);
    const firstVersions = await Promise.all([read<Resource>('CoverageEligibilityRequest', first.requestId), read<Resource>('CoverageEligibilityResponse', first.responseId)]);
    const later = { ...required(check), idempotencyKey: 'elig_later_visit', dateOfService: '2026-12-05', source: { ...required(check).source, appointment: 'Appointment/appt-1002' } };
    const reused = await writer.write(later, outcome, {}, { reusedFrom: 'ver_reused' });
    expect([reused.changed, reused.requestId === first.requestId, reused.responseId === first.responseId]).toEqual([true, false, false]);

    const requests = await search<CoverageEligibilityRequest>('CoverageEligibilityRequest', byCorrelation('ver_reused'));
    const pairs = requests.map((r) => [r.id, r.servicedDate, r.supportingInfo?.[0]?.information.reference]);
    expect(pairs.sort()).toEqual(
      [
        [first.requestId, '2026-12-01', 'Appointment/appt-1001'],
        [reused.requestId, '2026-12-05', 'Appointment/appt-1002'],
      ].sort(),
    );
    const responses = await search<CoverageEligibilityResponse>('CoverageEligibilityResponse', byCorrelation('ver_reused'));
    expect(responses.map((r) => [r.id, r.request.reference]).sort()).toEqual(
      [
        [first.responseId, `CoverageEligibilityRequest/${first.requestId}`],
        [reused.responseId, `CoverageEligibilityRequest/${reused.requestId}`],
      ].sort(),
    );
    const reusedResponse = responses.find((r) => r.id === reused.responseId);
    expect(reusedResponse?.disposition).toMatch(/ Reused: the result of verification ver_reused, made for another appointment of the same coverage\.$/);
    expect(reusedResponse?.identifier).toContainEqual({ system: 'https://dental-elig.dev/fhir/sid/eligibility-check', value: 'elig_later_visit' });
    // The first pair is untouched: same versions as before the reuse was written.
    const firstNow = await Promise.all([read<Resource>('CoverageEligibilityRequest', first.requestId), read<Resource>('CoverageEligibilityResponse', first.responseId)]);
    expect(firstNow.map((r) => r.meta?.versionId)).toEqual(firstVersions.map((r) => r.meta?.versionId));

    // Either written again sends nothing.
    const before = await counts();
    const again = await writer.write(later, outcome, {}, { reusedFrom: 'ver_reused' });
    const firstAgain = await writer.write(required(check), outcome);
    expect([again.requestId, again.responseId, again.changed, firstAgain.responseId, firstAgain.changed]).toEqual([reused.requestId, reused.responseId, false, first.responseId, false]);
    expect(await counts()).toEqual(before);
  });

  it('refuses an outcome it cannot map, before anything reaches the server, as a write that will not succeed later', async () => {
    const unknown = toOutcome({ correlationId: 'c-unknown', status: 'Escalated', result: {} });
    const before = await counts();
    const err = (await writer.write(required(check), unknown).catch((e: unknown) => e)) as ChartWriteError;
    expect(err).toBeInstanceOf(ChartWriteError);
    expect([err.retryable, err.status]).toEqual([false, undefined]);
    expect(err.message).toBe('write eligibility: status: is not Completed, Partial, Failed or Pending (or a known synonym)');
    expect(await counts()).toEqual(before);
  });
});

describe('write-back of an HL7-sourced check', () => {
  const p = () => required(primary);
  const s = () => required(secondary);

  it('creates the Patient and Coverage, finds the insurer the chart holds by payer id, and links the pair to them and the appointment', async () => {
    const before = await counts();
    const written = await writer.write(p(), withId(fixture('results', 'completed-minimal.json') as object, 'ver_hl7_primary'));
    expect(await counts()).toEqual({
      Patient: before.Patient + 1,
      Coverage: before.Coverage + 1,
      Organization: before.Organization,
      CoverageEligibilityRequest: before.CoverageEligibilityRequest + 1,
      CoverageEligibilityResponse: before.CoverageEligibilityResponse + 1,
    });
    const patient = await read<Patient>('Patient', written.patientId);
    expect(patient.identifier).toEqual([
      { type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'MR' }] }, system: 'https://dental-elig.dev/fhir/sid/hl7-patient-id/BSD-MAIN/MOLARPMS', value: 'MP10045' },
    ]);
    expect([patient.name?.[0]?.family, patient.birthDate, patient.gender]).toEqual(['RIVERA', '1985-04-12', 'female']);
    const coverage = await read<Coverage>('Coverage', written.coverageId);
    expect(coverage).toMatchObject({
      meta: { profile: ['http://hl7.org/fhir/us/core/StructureDefinition/us-core-coverage'] },
      status: 'active',
      subscriberId: 'DDC884512301',
      beneficiary: { reference: `Patient/${written.patientId}` },
      subscriber: { reference: `Patient/${written.patientId}` },
      relationship: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/subscriber-relationship', code: 'self' }] },
      payor: [{ reference: `Organization/${written.insurerId}` }],
      order: 1,
      class: [{ value: 'GRP-4410', name: 'ACME TOOLING' }],
    });
    expect(coverage.identifier?.[0]).toEqual({ type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'MB' }] }, value: 'DDC884512301' });
    expect(written.insurerId).toBe('org-delta-ca');
    const request = await read<CoverageEligibilityRequest>('CoverageEligibilityRequest', written.requestId);
    const response = await read<CoverageEligibilityResponse>('CoverageEligibilityResponse', written.responseId);
    for (const r of [request, response]) {
      expect(r.patient.reference).toBe(`Patient/${written.patientId}`);
      expect(r.insurer?.reference).toBe(`Organization/${written.insurerId}`);
    }
    expect(request.insurance?.[0]?.coverage.reference).toBe(`Coverage/${written.coverageId}`);
    expect(response.insurance?.[0]?.coverage.reference).toBe(`Coverage/${written.coverageId}`);
    expect(response.request.reference).toBe(`CoverageEligibilityRequest/${written.requestId}`);
    expect(request.supportingInfo?.[0]?.information).toEqual({
      type: 'Appointment',
      identifier: { system: 'https://dental-elig.dev/fhir/sid/hl7-appointment-id/BSD-MAIN', value: 'APT1001' },
    });
  });

  it('writes it again as nothing new; a second coverage of the same patient is one more Coverage on the same Patient, with its insurer created', async () => {
    const outcome = withId(fixture('results', 'completed-minimal.json') as object, 'ver_hl7_primary');
    const first = await writer.write(p(), outcome);
    const before = await counts();
    const again = await writer.write(p(), outcome);
    expect(await counts()).toEqual(before);
    expect([again.patientId, again.coverageId, again.insurerId, again.responseId, again.changed]).toEqual([first.patientId, first.coverageId, first.insurerId, first.responseId, false]);

    const other = await writer.write(s(), withId(fixture('results', 'completed-minimal.json') as object, 'ver_hl7_secondary'));
    expect(other.patientId).toBe(first.patientId);
    expect(other.coverageId).not.toBe(first.coverageId);
    expect(await counts()).toMatchObject({ Patient: before.Patient, Coverage: before.Coverage + 1, Organization: before.Organization + 1 });
    const insurer = await read<Organization>('Organization', other.insurerId ?? '');
    const resolution = s().coverage.resolution;
    const payer = resolution?.status === 'resolved' ? resolution : undefined;
    expect([insurer.name, insurer.identifier]).toEqual([payer?.name, [{ system: 'https://dental-elig.dev/fhir/sid/payer-id', value: payer?.commonPayerId }]]);
    const coverage = await read<Coverage>('Coverage', other.coverageId);
    expect([coverage.order, coverage.relationship?.coding?.[0]?.code, coverage.subscriber]).toEqual([2, 'spouse', undefined]);
  });

  it('finds a Patient the chart already holds by the identifier', async () => {
    const known: Patient = {
      resourceType: 'Patient',
      id: 'pat-known',
      identifier: [{ system: 'https://dental-elig.dev/fhir/sid/hl7-patient-id/BSD-MAIN/MOLARPMS', value: 'MP-KNOWN' }],
      name: [{ family: 'Known' }],
    };
    await server.seed([known]);
    const base = p();
    const knownCheck = { ...base, patient: { ...base.patient, identifiers: [{ system: 'MOLARPMS', type: 'MR', value: 'MP-KNOWN' }] } };
    const written = await writer.write(knownCheck, withId(fixture('results', 'completed-minimal.json') as object, 'ver_hl7_known'));
    expect(written.patientId).toBe('pat-known');
    expect((await read<Patient>('Patient', 'pat-known')).name?.[0]?.family).toBe('Known');
  });

  it('finds the Patient by an identifier holding a comma as that one identifier, not as either part (another patient\'s 10045)', async () => {
    await server.seed([{ resourceType: 'Patient', id: 'pat-part', identifier: [{ system: 'urn:oid:1.2.3', value: '10045' }], name: [{ family: 'Other' }] }]);
    const base = p();
    const commaCheck = { ...base, patient: { ...base.patient, identifiers: [{ system: 'MOLARPMS', type: 'MR', value: 'MP,10045' }] } };
    const outcome = withId(fixture('results', 'completed-minimal.json') as object, 'ver_hl7_comma');
    const written = await writer.write(commaCheck, outcome);
    expect(written.patientId).not.toBe('pat-part');
    expect((await read<Patient>('Patient', written.patientId)).identifier?.[0]?.value).toBe('MP,10045');
    const before = await counts();
    const again = await writer.write(commaCheck, outcome);
    expect([again.patientId, again.changed]).toEqual([written.patientId, false]);
    expect(await counts()).toEqual(before);
  });
});

describe('the identifier a Patient is found by: one practice\'s patients apart from another\'s', () => {
  const SID = 'https://dental-elig.dev/fhir/sid/hl7-patient-id';
  const outcome = (id: string) => withId(fixture('results', 'completed-minimal.json') as object, id);
  /** The primary or secondary check, as sent by another facility (undefined: none, as before facilities scoped identifiers) with another MRN and names. */
  const from = (base: EligibilityCheck, facility: string | undefined, identifier: EligibilityCheck['patient']['identifiers'][number], patient: Partial<EligibilityCheck['patient']> = {}): EligibilityCheck => {
    if (base.source.kind !== 'hl7') throw new Error('fixture check is not HL7-sourced');
    // Without a sender, no appointment id either: an appointment's id is scoped by its sender alone.
    const { sendingFacility: _facility, sendingApplication: _application, appointmentId, ...source } = base.source;
    const sender = facility ? { sendingFacility: facility, ...(appointmentId ? { appointmentId } : {}) } : {};
    return { ...base, source: { ...source, ...sender }, patient: { ...base.patient, identifiers: [identifier], ...patient } };
  };
  const mrn = (value: string) => ({ system: 'MOLARPMS', type: 'MR', value });

  it('two practices sending the same namespace and MRN get a Patient each, with its own Coverage', async () => {
    const before = await counts();
    const north = await writer.write(from(required(primary), 'NORTH-OFFICE', mrn('1042')), outcome('ver_sep_north'));
    const south = await writer.write(from(required(primary), 'SOUTH-OFFICE', mrn('1042'), { firstName: 'MARCUS', lastName: 'OKORO' }), outcome('ver_sep_south'));
    expect(south.patientId).not.toBe(north.patientId);
    expect(south.coverageId).not.toBe(north.coverageId);
    expect(await counts()).toMatchObject({ Patient: before.Patient + 2, Coverage: before.Coverage + 2 });
    const [n, s] = [await read<Patient>('Patient', north.patientId), await read<Patient>('Patient', south.patientId)];
    expect([n.identifier?.[0]?.system, n.name?.[0]?.family]).toEqual([`${SID}/NORTH-OFFICE/MOLARPMS`, 'RIVERA']);
    expect([s.identifier?.[0]?.system, s.name?.[0]?.family]).toEqual([`${SID}/SOUTH-OFFICE/MOLARPMS`, 'OKORO']);
    expect((await read<Coverage>('Coverage', south.coverageId)).beneficiary.reference).toBe(`Patient/${south.patientId}`);
  });

  it('an assigning authority written as an OID names the system, whoever sends it', async () => {
    const oid = { system: '2.16.840.1.113883.3.7711', type: 'MR', value: '1043' };
    const north = await writer.write(from(required(primary), 'NORTH-OFFICE', oid), outcome('ver_oid_north'));
    expect((await read<Patient>('Patient', north.patientId)).identifier?.[0]?.system).toBe('urn:oid:2.16.840.1.113883.3.7711');
    const south = await writer.write(from(required(primary), 'SOUTH-OFFICE', oid), outcome('ver_oid_south'));
    expect([south.patientId, south.coverageId]).toEqual([north.patientId, north.coverageId]);
  });

  it('ends a Coverage it wrote under the namespace alone, which no write has given the facility\'s identifier since, once its plan is dropped', async () => {
    const before = await writer.write(from(required(primary), undefined, mrn('1060')), outcome('ver_former_end'));
    expect(await writer.endCoverage?.(from(required(primary), 'NORTH-OFFICE', mrn('1060')), '2030-01-01T00:00:00Z')).toBe(true);
    expect((await read<Coverage>('Coverage', before.coverageId)).status).toBe('cancelled');
  });

  it('a Patient found under the namespace alone whose rekey would not be valid R4 is not taken by one practice and then found by another', async () => {
    // An extension without its url (ext-1), as a chart that does not validate may hold.
    await server.seed([{ resourceType: 'Patient', id: 'pat-former-invalid', identifier: [{ system: `${SID}/MOLARPMS`, value: '1048' }], name: [{ family: 'RIVERA' }], extension: [{ valueString: 'no url' } as never] }]);
    const north = await writer.write(from(required(primary), 'NORTH-OFFICE', mrn('1048')), outcome('ver_former_invalid_north'));
    const south = await writer.write(from(required(secondary), 'SOUTH-OFFICE', mrn('1048'), { firstName: 'MARCUS' }), outcome('ver_former_invalid_south'));
    expect(south.patientId).not.toBe(north.patientId);
  });

  it('finds what it wrote under the namespace alone, gives it the facility\'s identifier, and then another practice\'s patient with that MRN is not found by it', async () => {
    // Written as before: the namespace alone scoped the MRN. The patient's two plans, each a Coverage.
    const formerPrimary = await writer.write(from(required(primary), undefined, mrn('1044')), outcome('ver_former_1'));
    const formerSecondary = await writer.write(from(required(secondary), undefined, mrn('1044')), outcome('ver_former_2'));
    expect((await read<Patient>('Patient', formerPrimary.patientId)).identifier?.[0]?.system).toBe(`${SID}/MOLARPMS`);
    const before = await counts();

    // The north office's patient 1044 takes the Patient and the primary's Coverage over.
    const north = await writer.write(from(required(primary), 'NORTH-OFFICE', mrn('1044')), outcome('ver_former_north'));
    expect([north.patientId, north.coverageId]).toEqual([formerPrimary.patientId, formerPrimary.coverageId]);
    expect(await counts()).toMatchObject({ Patient: before.Patient, Coverage: before.Coverage });
    const taken = await read<Patient>('Patient', north.patientId);
    expect(taken.identifier?.map((i) => [i.system, i.value])).toEqual([[`${SID}/NORTH-OFFICE/MOLARPMS`, '1044']]);
    const again = await writer.write(from(required(primary), 'NORTH-OFFICE', mrn('1044')), outcome('ver_former_north'));
    expect(again.changed).toBe(false);

    // The south office's patient 1044, a different person on the secondary's plan: a Patient of its own, and that plan's Coverage moves to it.
    const south = await writer.write(from(required(secondary), 'SOUTH-OFFICE', mrn('1044'), { firstName: 'MARCUS' }), outcome('ver_former_south'));
    expect(south.patientId).not.toBe(north.patientId);
    expect(south.coverageId).toBe(formerSecondary.coverageId);
    expect(await counts()).toMatchObject({ Patient: before.Patient + 1, Coverage: before.Coverage });
    const moved = await read<Coverage>('Coverage', south.coverageId);
    expect(moved.beneficiary.reference).toBe(`Patient/${south.patientId}`);
    expect(moved.identifier?.filter((i) => i.system === 'https://dental-elig.dev/fhir/sid/coverage')).toHaveLength(1);
    expect((await read<Patient>('Patient', north.patientId)).meta?.versionId).toBe(taken.meta?.versionId);
    // Each found by its new identifier from now on: nothing left to change.
    const southAgain = await writer.write(from(required(secondary), 'SOUTH-OFFICE', mrn('1044'), { firstName: 'MARCUS' }), outcome('ver_former_south'));
    expect([southAgain.patientId, southAgain.coverageId, southAgain.changed]).toEqual([south.patientId, south.coverageId, false]);
  });
});

describe('the Coverage an HL7 check finds, kept up to date', () => {
  const outcome = (id: string) => withId(fixture('results', 'completed-minimal.json') as object, id);
  // A patient of their own, so what the other tests write is not in the way; received at a given time.
  const cob = (id: string, receivedAt: string, change: (c: EligibilityCheck) => EligibilityCheck = (c) => c): EligibilityCheck => {
    const base = required(primary);
    const source = base.source.kind === 'hl7' ? { ...base.source, receivedAt } : base.source;
    return change({ ...base, source, patient: { ...base.patient, identifiers: [{ system: 'MOLARPMS', type: 'MR', value: id }] } });
  };
  const turnedSecondary = (c: EligibilityCheck): EligibilityCheck => ({
    ...c,
    subscriber: { ...c.subscriber, relationship: 'spouse' },
    coverage: { ...c.coverage, order: 'secondary', groupNumber: 'GRP-9000', groupName: 'NEW EMPLOYER' },
  });
  const statedAt = (c: Coverage) => c.extension?.filter((e) => e.url === 'https://dental-elig.dev/fhir/StructureDefinition/coverage-stated-at').map((e) => e.valueInstant);

  it('a change of order, relationship and group updates the Coverage in place, keeping what the EHR added, and is then nothing new', async () => {
    const first = await writer.write(cob('MP-COB', '2026-11-02T09:00:00.000Z'), outcome('ver_cob_1'));
    const created = await read<Coverage>('Coverage', first.coverageId);
    expect([created.order, created.subscriber?.reference, statedAt(created)]).toEqual([1, `Patient/${first.patientId}`, ['2026-11-02T09:00:00.000Z']]);
    // What an EHR may add to a Coverage it holds: a period, its own identifier, a plan class.
    await request(`${server.url}/Coverage/${first.coverageId}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/fhir+json' },
      body: JSON.stringify({
        ...created,
        period: { start: '2026-01-01' },
        identifier: [...(created.identifier ?? []), { system: 'urn:oid:2.16.840.1.113883.3.9999', value: 'EHR-77' }],
        class: [...(created.class ?? []), { type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/coverage-class', code: 'plan' }] }, value: 'PLAN-A' }],
      }),
    });
    const before = await counts();
    const versionBefore = (await read<Coverage>('Coverage', first.coverageId)).meta?.versionId;

    const later = await writer.write(cob('MP-COB', '2026-11-20T09:00:00.000Z', turnedSecondary), outcome('ver_cob_2'));
    expect([later.coverageId, later.patientId, later.changed]).toEqual([first.coverageId, first.patientId, true]);
    const updated = await read<Coverage>('Coverage', first.coverageId);
    expect(updated.meta?.versionId).not.toBe(versionBefore);
    expect(updated.order).toBe(2);
    expect(updated.relationship?.coding?.[0]?.code).toBe('spouse');
    expect(updated.subscriber).toBeUndefined();
    expect(updated.class?.map((c) => [c.type.coding?.[0]?.code, c.value])).toEqual([
      ['group', 'GRP-9000'],
      ['plan', 'PLAN-A'],
    ]);
    expect(updated.period).toEqual({ start: '2026-01-01' });
    expect(statedAt(updated)).toEqual(['2026-11-20T09:00:00.000Z']);
    expect(updated.identifier?.map((i) => i.value)).toEqual(['DDC884512301', created.identifier?.[1]?.value, 'EHR-77']);
    expect(await counts()).toMatchObject({ Coverage: before.Coverage, Patient: before.Patient, CoverageEligibilityResponse: before.CoverageEligibilityResponse + 1 });
    const response = await read<CoverageEligibilityResponse>('CoverageEligibilityResponse', later.responseId);
    expect(response.insurance?.[0]?.coverage.reference).toBe(`Coverage/${first.coverageId}`);

    const again = await writer.write(cob('MP-COB', '2026-11-20T09:00:00.000Z', turnedSecondary), outcome('ver_cob_2'));
    expect(again.changed).toBe(false);
    // Another appointment's message received later stating the same: no new version of the Coverage, only its own pair.
    await writer.write(cob('MP-COB', '2026-11-21T09:00:00.000Z', turnedSecondary), outcome('ver_cob_3'));
    expect((await read<Coverage>('Coverage', first.coverageId)).meta?.versionId).toBe(updated.meta?.versionId);
  });

  it('a result of a message received before the one the Coverage holds does not turn it back', async () => {
    const first = await writer.write(cob('MP-COB-LATE', '2026-11-02T09:00:00.000Z'), outcome('ver_cob_late_1'));
    await writer.write(cob('MP-COB-LATE', '2026-11-20T09:00:00.000Z', turnedSecondary), outcome('ver_cob_late_2'));
    const secondary = await read<Coverage>('Coverage', first.coverageId);
    // An asynchronous result for an appointment booked in between, while the Coverage still said primary.
    const late = await writer.write(cob('MP-COB-LATE', '2026-11-10T09:00:00.000Z'), outcome('ver_cob_late_3'));
    expect([late.coverageId, late.changed]).toEqual([first.coverageId, true]);
    const after = await read<Coverage>('Coverage', first.coverageId);
    expect([after.order, after.meta?.versionId, statedAt(after)]).toEqual([2, secondary.meta?.versionId, ['2026-11-20T09:00:00.000Z']]);
  });

  it('a Coverage written before it carried coverage-stated-at takes it from the next message, so an older message\'s late result does not turn it back', async () => {
    const first = await writer.write(cob('MP-COB-OLD', '2026-11-02T09:00:00.000Z'), outcome('ver_cob_old_1'));
    const created = await read<Coverage>('Coverage', first.coverageId);
    // As a version of this plugin before coverage-stated-at wrote it.
    const { extension: _stamp, ...unstamped } = created;
    await server.seed([unstamped]);
    // A message received after the upgrade states the same plan, order and all.
    await writer.write(cob('MP-COB-OLD', '2026-11-20T09:00:00.000Z'), outcome('ver_cob_old_2'));
    expect(statedAt(await read<Coverage>('Coverage', first.coverageId))).toEqual(['2026-11-20T09:00:00.000Z']);
    // The result of a check from a message received in between, which said secondary, arrives late.
    await writer.write(cob('MP-COB-OLD', '2026-11-10T09:00:00.000Z', turnedSecondary), outcome('ver_cob_old_3'));
    expect((await read<Coverage>('Coverage', first.coverageId)).order).toBe(1);
  });

  it('leaves the status the EHR gave the Coverage: a later message stating the same plan makes no new version of it', async () => {
    const first = await writer.write(cob('MP-COB-STATUS', '2026-11-02T09:00:00.000Z'), outcome('ver_cob_status_1'));
    const created = await read<Coverage>('Coverage', first.coverageId);
    // The EHR marked it entered in error (or cancelled it): its own call, which a message saying nothing new must not undo.
    await server.seed([{ ...created, status: 'entered-in-error' }]);
    const marked = await read<Coverage>('Coverage', first.coverageId);
    await writer.write(cob('MP-COB-STATUS', '2026-11-20T09:00:00.000Z'), outcome('ver_cob_status_2'));
    const after = await read<Coverage>('Coverage', first.coverageId);
    expect([after.status, after.meta?.versionId]).toEqual(['entered-in-error', marked.meta?.versionId]);
  });

  it('drops a generated narrative that would describe the old order, and keeps one a person wrote', async () => {
    // extensions: generated from the data and its extensions (R4 NarrativeStatus), as stale as generated.
    for (const [id, status, kept] of [['MP-COB-GEN', 'generated', false], ['MP-COB-EXT-GEN', 'extensions', false], ['MP-COB-ADD', 'additional', true]] as const) {
      const first = await writer.write(cob(id, '2026-11-02T09:00:00.000Z'), outcome(`ver_${id}_1`));
      const created = await read<Coverage>('Coverage', first.coverageId);
      const text = { status, div: '<div xmlns="http://www.w3.org/1999/xhtml">Primary dental plan</div>' };
      await server.seed([{ ...created, text }]);
      await writer.write(cob(id, '2026-11-20T09:00:00.000Z', turnedSecondary), outcome(`ver_${id}_2`));
      const after = await read<Coverage>('Coverage', first.coverageId);
      expect([after.order, after.text]).toEqual([2, kept ? text : undefined]);
    }
  });

  it('a Coverage that would not be valid R4 once updated is left as it is, and the eligibility is still written against it', async () => {
    const first = await writer.write(cob('MP-COB-EXT', '2026-11-02T09:00:00.000Z'), outcome('ver_cob_ext_1'));
    const created = await read<Coverage>('Coverage', first.coverageId);
    // An extension without its url (ext-1), as a chart that does not validate may hold.
    await server.seed([{ ...created, extension: [...(created.extension ?? []), { valueString: 'no url' } as never] }]);
    const later = await writer.write(cob('MP-COB-EXT', '2026-11-20T09:00:00.000Z', turnedSecondary), outcome('ver_cob_ext_2'));
    expect([later.coverageId, later.changed]).toEqual([first.coverageId, true]);
    expect((await read<Coverage>('Coverage', first.coverageId)).order).toBe(1);
    const response = await read<CoverageEligibilityResponse>('CoverageEligibilityResponse', later.responseId);
    expect(response.insurance?.[0]?.coverage.reference).toBe(`Coverage/${first.coverageId}`);
  });

  it('ends its own Coverage once the plan no longer serves the visit: cancelled when dropped, dated when it ended early; not after a later message', async () => {
    const dropped = cob('P-END-1', '2026-03-01T10:00:00Z');
    const written = await writer.write(dropped, outcome('ver_end_1'));
    expect(await writer.endCoverage?.(dropped, '2026-03-02T10:00:00Z')).toBe(true);
    const cancelled = await read<Coverage>('Coverage', written.coverageId);
    expect(cancelled.status).toBe('cancelled');
    expect(cancelled.extension?.find((e) => e.url.endsWith('/coverage-ended'))?.valueInstant).toBe('2026-03-02T10:00:00Z');
    // Done once: nothing active is left to end.
    expect(await writer.endCoverage?.(dropped, '2026-03-02T10:00:00Z')).toBe(false);

    // Its plan ended before the visit: the Coverage stays active, with the plan's dates.
    const endedEarly = cob('P-END-2', '2026-03-01T10:00:00Z');
    const second = await writer.write(endedEarly, outcome('ver_end_2'));
    const redated = { ...endedEarly, coverage: { ...endedEarly.coverage, period: { end: '2024-01-31' } } };
    // A message received before the one the Coverage holds changes nothing.
    expect(await writer.endCoverage?.(redated, '2026-02-28T10:00:00Z')).toBe(false);
    expect(await writer.endCoverage?.(redated, '2026-03-02T10:00:00Z')).toBe(true);
    const dated = await read<Coverage>('Coverage', second.coverageId);
    expect([dated.status, dated.period, statedAt(dated)]).toEqual(['active', { end: '2024-01-31' }, ['2026-03-02T10:00:00Z']]);
  });
});

describe('a Coverage the patient no longer has, ended when its successor is written', () => {
  const outcome = (id: string) => withId(fixture('results', 'completed-minimal.json') as object, id);
  /** The fixture's primary or secondary for a patient of its own, received at a given time, under a member id of its own. */
  const plan = (which: EligibilityCheck | undefined, mrn: string, memberId: string, receivedAt: string): EligibilityCheck => {
    const base = required(which);
    const source = base.source.kind === 'hl7' ? { ...base.source, receivedAt } : base.source;
    return { ...base, source, patient: { ...base.patient, identifiers: [{ system: 'MOLARPMS', type: 'MR', value: mrn }] }, subscriber: { ...base.subscriber, memberId } };
  };
  const insured = (...memberIds: string[]) => ({ insuredUnder: async () => memberIds });
  const statuses = async (patientId: string) =>
    Object.fromEntries((await search<Coverage>('Coverage', `beneficiary=Patient/${patientId}`)).map((c) => [c.subscriberId, c.status]));

  it('a corrected member id ends the Coverage under the old one, and leaves the other plan and the EHR\'s own Coverage active', async () => {
    const first = await writer.write(plan(primary, 'MP-END', 'DDC-TYPO', '2026-11-02T09:00:00.000Z'), outcome('ver_end_1'), {}, insured('DDC-TYPO', 'MET-1'));
    await writer.write(plan(secondary, 'MP-END', 'MET-1', '2026-11-02T09:00:00.000Z'), outcome('ver_end_2'), {}, insured('DDC-TYPO', 'MET-1'));
    // A plan the EHR entered itself for the patient: not this plugin's to end.
    await server.seed([{ resourceType: 'Coverage', id: 'ehr-cov-end', status: 'active', subscriberId: 'EHR-OLD', beneficiary: { reference: `Patient/${first.patientId}` }, payor: [{ display: 'Aetna' }] }]);
    expect(await statuses(first.patientId)).toEqual({ 'DDC-TYPO': 'active', 'MET-1': 'active', 'EHR-OLD': 'active' });

    // The PMS corrects the member id (an A08); the check verified again under it is written.
    const corrected = await writer.write(plan(primary, 'MP-END', 'DDC-RIGHT', '2026-11-20T09:00:00.000Z'), outcome('ver_end_3'), {}, insured('DDC-RIGHT', 'MET-1'));
    expect(corrected.coverageId).not.toBe(first.coverageId);
    expect(await statuses(first.patientId)).toEqual({ 'DDC-TYPO': 'cancelled', 'MET-1': 'active', 'EHR-OLD': 'active', 'DDC-RIGHT': 'active' });
    // The old eligibility stays as it was, on the Coverage it was verified against.
    const old = await read<CoverageEligibilityResponse>('CoverageEligibilityResponse', first.responseId);
    expect(old.insurance?.[0]?.coverage.reference).toBe(`Coverage/${first.coverageId}`);
    // Written again, nothing is new.
    expect((await writer.write(plan(primary, 'MP-END', 'DDC-RIGHT', '2026-11-20T09:00:00.000Z'), outcome('ver_end_3'), {}, insured('DDC-RIGHT', 'MET-1'))).changed).toBe(false);
  });

  it('makes a Coverage it ended active again when a later message states it again, and ends the one that succeeded it', async () => {
    const first = await writer.write(plan(primary, 'MP-END-3', 'DDC-X', '2026-11-02T09:00:00.000Z'), outcome('ver_end3_1'), {}, insured('DDC-X'));
    await writer.write(plan(primary, 'MP-END-3', 'DDC-Y', '2026-11-10T09:00:00.000Z'), outcome('ver_end3_2'), {}, insured('DDC-Y'));
    const ended = await read<Coverage>('Coverage', first.coverageId);
    expect([ended.status, ended.extension?.find((e) => e.url.endsWith('/coverage-ended'))?.valueInstant]).toEqual(['cancelled', '2026-11-10T09:00:00.000Z']);
    // Back on the first plan (the correction undone, or the employer's plan again next year).
    const again = await writer.write(plan(primary, 'MP-END-3', 'DDC-X', '2026-11-20T09:00:00.000Z'), outcome('ver_end3_3'), {}, insured('DDC-X'));
    expect(again.coverageId).toBe(first.coverageId);
    expect(await statuses(first.patientId)).toEqual({ 'DDC-X': 'active', 'DDC-Y': 'cancelled' });
    expect((await read<Coverage>('Coverage', first.coverageId)).extension?.some((e) => e.url.endsWith('/coverage-ended'))).toBe(false);
  });

  it('finds the patient\'s Coverages by patient, the parameter US Core charts must support, not beneficiary', async () => {
    // A chart in front of the test's that, as those servers may, refuses a search parameter it does not support (here in the write's batch).
    const chart = await startScriptedServer(async (req, res) => {
      const searches = req.body ? ((JSON.parse(req.body) as Bundle).entry ?? []).map((e) => new URL(e.request?.url ?? '', 'http://chart')) : [];
      if (searches.some((url) => url.pathname === '/Coverage' && url.searchParams.has('beneficiary'))) {
        return json(res, 400, { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'not-supported', diagnostics: 'unknown search parameter: beneficiary' }] });
      }
      const answer = await request(`${server.url}${req.url}`, { method: req.method as 'GET', headers: { 'content-type': 'application/fhir+json' }, body: req.body || undefined });
      res.writeHead(answer.statusCode, { 'content-type': 'application/fhir+json' }).end(await answer.body.text());
    });
    try {
      const usCore = await fhirWriter(chart.url);
      const first = await usCore.write(plan(primary, 'MP-END-US', 'DDC-OLD', '2026-11-02T09:00:00.000Z'), outcome('ver_end5_1'), {}, insured('DDC-OLD'));
      await usCore.write(plan(primary, 'MP-END-US', 'DDC-NEW', '2026-11-20T09:00:00.000Z'), outcome('ver_end5_2'), {}, insured('DDC-NEW'));
      expect(await statuses(first.patientId)).toEqual({ 'DDC-OLD': 'cancelled', 'DDC-NEW': 'active' });
    } finally {
      await chart.close();
    }
  });

  it('a change of payer under the same member number ends the former payer\'s Coverage, unless the record names that number for two plans', async () => {
    const coverages = async (patientId: string) =>
      Object.fromEntries((await search<Coverage>('Coverage', `patient=Patient/${patientId}`)).map((c) => [c.id, [c.subscriberId, c.status]]));
    /** The same patient and member number with the secondary fixture's payer (MetLife) in the given order. */
    const metLife = (c: EligibilityCheck, order: EligibilityCheck['coverage']['order']) => ({ ...c, coverage: { ...required(secondary).coverage, order } });

    // The employer changes carriers; the member number is the employee's and stays.
    const delta = await writer.write(plan(primary, 'MP-END-5', 'EMP-4471', '2026-11-02T09:00:00.000Z'), outcome('ver_end7_1'), {}, insured('EMP-4471'));
    const met = await writer.write(metLife(plan(primary, 'MP-END-5', 'EMP-4471', '2026-11-20T09:00:00.000Z'), 'primary'), outcome('ver_end7_2'), {}, insured('EMP-4471'));
    expect(met.coverageId).not.toBe(delta.coverageId);
    expect(await coverages(delta.patientId)).toEqual({ [delta.coverageId]: ['EMP-4471', 'cancelled'], [met.coverageId]: ['EMP-4471', 'active'] });

    // Two plans the PMS keys on one number (both on the subscriber's SSN): the second is not the first's successor.
    const first = await writer.write(plan(primary, 'MP-END-6', 'SSN-0099', '2026-11-02T09:00:00.000Z'), outcome('ver_end8_1'), {}, insured('SSN-0099', 'SSN-0099'));
    const second = await writer.write(metLife(plan(primary, 'MP-END-6', 'SSN-0099', '2026-11-02T09:00:00.000Z'), 'secondary'), outcome('ver_end8_2'), {}, insured('SSN-0099', 'SSN-0099'));
    expect(await coverages(first.patientId)).toEqual({ [first.coverageId]: ['SSN-0099', 'active'], [second.coverageId]: ['SSN-0099', 'active'] });
  });

  it('ends nothing of a patient every sender shares (an OID authority): one sender\'s record does not name another\'s plans', async () => {
    const oid = (memberId: string, receivedAt: string) => {
      const c = plan(primary, 'MP-END-OID', memberId, receivedAt);
      return { ...c, patient: { ...c.patient, identifiers: [{ system: '2.16.840.1.113883.19.5', type: 'MR', value: 'MP-END-OID' }] } };
    };
    const first = await writer.write(oid('DDC-NORTH', '2026-11-02T09:00:00.000Z'), outcome('ver_end4_1'), {}, insured('DDC-NORTH'));
    await writer.write(oid('DDC-SOUTH', '2026-11-03T09:00:00.000Z'), outcome('ver_end4_2'), {}, insured('DDC-SOUTH'));
    expect(await statuses(first.patientId)).toEqual({ 'DDC-NORTH': 'active', 'DDC-SOUTH': 'active' });
  });

  it('ends nothing without knowing what the patient is insured under now, nor a Coverage a later message stated', async () => {
    const first = await writer.write(plan(primary, 'MP-END-2', 'DDC-A', '2026-11-10T09:00:00.000Z'), outcome('ver_end2_1'), {}, insured('DDC-A'));
    // A FHIR-sourced patient, or one with no record: nothing said, nothing ended.
    await writer.write(plan(primary, 'MP-END-2', 'DDC-B', '2026-11-11T09:00:00.000Z'), outcome('ver_end2_2'));
    expect(await statuses(first.patientId)).toEqual({ 'DDC-A': 'active', 'DDC-B': 'active' });
    // The late result of a check received before DDC-A was stated: DDC-A is what a later message said.
    await writer.write(plan(primary, 'MP-END-2', 'DDC-0', '2026-11-01T09:00:00.000Z'), outcome('ver_end2_3'), {}, insured('DDC-0'));
    expect(await statuses(first.patientId)).toMatchObject({ 'DDC-A': 'active', 'DDC-0': 'active' });
  });

  describe('through a chart that pages its searches one resource a page', () => {
    let proxy: Awaited<ReturnType<typeof startScriptedServer>>;
    let nextLinkTo: string | undefined;
    /** Next links as some servers give them: the query alone, on the search's own path. */
    let queryOnly = false;
    beforeAll(async () => {
      // The chart in front of the embedded one: it caps every page at one resource, as a server may cap _count.
      proxy = await startScriptedServer(async (req, res) => {
        const upstream = await request(`${server.url}${req.url.replace(/_count=\d+/, '_count=1')}`, {
          method: req.method as 'GET',
          headers: { 'content-type': req.headers['content-type'] ?? 'application/fhir+json' },
          ...(req.body && { body: req.body.replace(/_count=\d+/g, '_count=1') }),
        });
        const answer = await upstream.body.text();
        const text = (queryOnly ? answer.replaceAll(`"${server.url}/Coverage?`, '"?') : answer).replaceAll(server.url, nextLinkTo ?? proxy.url);
        res.writeHead(upstream.statusCode, { 'content-type': 'application/fhir+json' });
        res.end(text);
      });
    });
    afterAll(() => proxy.close());

    it('reads every page of the patient\'s active Coverages: the plan on the last page is ended too', async () => {
      const paged = await fhirWriter(proxy.url);
      // Written first, the other plan comes first: the one to end is on a later page.
      const other = await paged.write(plan(secondary, 'MP-END-PAGE', 'MET-P', '2026-11-02T09:00:00.000Z'), outcome('ver_page_1'), {}, insured('DDC-P1', 'MET-P'));
      await paged.write(plan(primary, 'MP-END-PAGE', 'DDC-P1', '2026-11-02T09:00:00.000Z'), outcome('ver_page_2'), {}, insured('DDC-P1', 'MET-P'));
      await paged.write(plan(primary, 'MP-END-PAGE', 'DDC-P2', '2026-11-20T09:00:00.000Z'), outcome('ver_page_3'), {}, insured('DDC-P2', 'MET-P'));
      expect(await statuses(other.patientId)).toEqual({ 'MET-P': 'active', 'DDC-P1': 'cancelled', 'DDC-P2': 'active' });
      expect(proxy.requests.filter((r) => r.method === 'GET' && r.url.includes('_offset=')).length).toBeGreaterThan(0);
    });

    it('reads a next link of the query alone against the search\'s own URL, as a browser would: the plan on the last page is ended too', async () => {
      const paged = await fhirWriter(proxy.url);
      const other = await paged.write(plan(secondary, 'MP-END-QUERY', 'MET-Q', '2026-11-02T09:00:00.000Z'), outcome('ver_query_1'), {}, insured('DDC-Q1', 'MET-Q'));
      await paged.write(plan(primary, 'MP-END-QUERY', 'DDC-Q1', '2026-11-02T09:00:00.000Z'), outcome('ver_query_2'), {}, insured('DDC-Q1', 'MET-Q'));
      queryOnly = true;
      try {
        await paged.write(plan(primary, 'MP-END-QUERY', 'DDC-Q2', '2026-11-20T09:00:00.000Z'), outcome('ver_query_3'), {}, insured('DDC-Q2', 'MET-Q'));
      } finally {
        queryOnly = false;
      }
      expect(await statuses(other.patientId)).toEqual({ 'MET-Q': 'active', 'DDC-Q1': 'cancelled', 'DDC-Q2': 'active' });
      expect(proxy.requests.filter((r) => r.method === 'GET' && r.url.startsWith('/Coverage?') && r.url.includes('_offset=')).length).toBeGreaterThan(0);
    });

    it('does not follow a next link to another origin with its token: the write fails saying so', async () => {
      const paged = await fhirWriter(proxy.url);
      const first = await paged.write(plan(secondary, 'MP-END-AWAY', 'MET-A', '2026-11-02T09:00:00.000Z'), outcome('ver_away_1'), {}, insured('DDC-A1', 'MET-A'));
      await paged.write(plan(primary, 'MP-END-AWAY', 'DDC-A1', '2026-11-02T09:00:00.000Z'), outcome('ver_away_2'), {}, insured('DDC-A1', 'MET-A'));
      nextLinkTo = 'https://elsewhere.example';
      try {
        const away = paged.write(plan(primary, 'MP-END-AWAY', 'DDC-A2', '2026-11-20T09:00:00.000Z'), outcome('ver_away_3'), {}, insured('DDC-A2', 'MET-A'));
        await expect(away).rejects.toMatchObject({
          name: 'ChartWriteError',
          retryable: false,
          message: "write eligibility: Coverage: the FHIR server's search gave a next link leaving it for https://elsewhere.example; not followed, it would carry the chart's access token there",
        });
      } finally {
        nextLinkTo = undefined;
      }
      expect(await statuses(first.patientId)).toEqual({ 'MET-A': 'active', 'DDC-A1': 'active' });
    });
  });
});

describe('the Patient an HL7 check finds, kept up to date when this plugin created it', () => {
  const outcome = (id: string) => withId(fixture('results', 'completed-minimal.json') as object, id);
  const stated = (id: string, receivedAt: string, patient: Partial<EligibilityCheck['patient']> = {}): EligibilityCheck => {
    const base = required(primary);
    const source = base.source.kind === 'hl7' ? { ...base.source, receivedAt } : base.source;
    return { ...base, source, patient: { ...base.patient, identifiers: [{ system: 'MOLARPMS', type: 'MR', value: id }], ...patient } };
  };
  const statedAt = (p: Patient) => p.extension?.filter((e) => e.url === 'https://dental-elig.dev/fhir/StructureDefinition/patient-stated-at').map((e) => e.valueInstant);

  it('a corrected name and birth date update it in place, keeping what the EHR added, and an older message\'s late result does not turn them back', async () => {
    const first = await writer.write(stated('MP-PAT', '2026-11-02T09:00:00.000Z', { lastName: 'RIVERRA' }), outcome('ver_pat_1'));
    const created = await read<Patient>('Patient', first.patientId);
    expect([created.name?.[0]?.family, statedAt(created)]).toEqual(['RIVERRA', ['2026-11-02T09:00:00.000Z']]);
    // What an EHR may add to a Patient: a phone number, a name it goes by, an identifier of its own.
    await server.seed([
      {
        ...created,
        telecom: [{ system: 'phone', value: '555-0100' }],
        name: [...(created.name ?? []), { use: 'nickname', given: ['Sofi'] }],
        identifier: [...(created.identifier ?? []), { system: 'urn:oid:2.16.840.1.113883.3.9999', value: 'EHR-12' }],
      },
    ]);

    // The PMS also names a second number now: the Patient is found by the first, and keeps the identifiers it has.
    const identifiers = [{ system: 'MOLARPMS', type: 'MR', value: 'MP-PAT' }, { system: 'MOLARPMS', type: 'PI', value: 'ALT-7' }];
    const corrected = stated('MP-PAT', '2026-11-20T09:00:00.000Z', { birthDate: '1985-04-21', identifiers });
    const later = await writer.write(corrected, outcome('ver_pat_2'));
    expect([later.patientId, later.changed]).toEqual([first.patientId, true]);
    const updated = await read<Patient>('Patient', first.patientId);
    expect(updated.name).toEqual([{ family: 'RIVERA', given: ['SOFIA', 'M'] }, { use: 'nickname', given: ['Sofi'] }]);
    expect([updated.birthDate, updated.gender, updated.telecom, statedAt(updated)]).toEqual(['1985-04-21', 'female', [{ system: 'phone', value: '555-0100' }], ['2026-11-20T09:00:00.000Z']]);
    expect(updated.identifier?.map((i) => i.value)).toEqual(['MP-PAT', 'EHR-12']);

    // The same stated again by a later message, and an older message's late result: no new version.
    await writer.write(stated('MP-PAT', '2026-11-21T09:00:00.000Z', { birthDate: '1985-04-21' }), outcome('ver_pat_3'));
    await writer.write(stated('MP-PAT', '2026-11-10T09:00:00.000Z', { lastName: 'RIVERRA' }), outcome('ver_pat_4'));
    const after = await read<Patient>('Patient', first.patientId);
    expect([after.meta?.versionId, after.name?.[0]?.family, after.birthDate]).toEqual([updated.meta?.versionId, 'RIVERA', '1985-04-21']);
  });

  it('writes two checks of one patient at once, both bringing its Patient up to date: the one whose update conflicts reads again and succeeds', async () => {
    const first = await writer.write(stated('MP-PAT-BOTH', '2026-11-02T09:00:00.000Z'), outcome('ver_pat_both_1'));
    // The primary and the secondary of one corrected message, written by two workers at the same moment.
    const base = required(secondary);
    const source = base.source.kind === 'hl7' ? { ...base.source, receivedAt: '2026-11-20T09:00:00.000Z' } : base.source;
    const other: EligibilityCheck = { ...base, source, patient: { ...base.patient, identifiers: [{ system: 'MOLARPMS', type: 'MR', value: 'MP-PAT-BOTH' }], birthDate: '1985-04-21' } };
    const written = await Promise.all([
      writer.write(stated('MP-PAT-BOTH', '2026-11-20T09:00:00.000Z', { birthDate: '1985-04-21' }), outcome('ver_pat_both_2')),
      writer.write(other, outcome('ver_pat_both_3')),
    ]);
    expect(written.map((w) => [w.patientId, w.changed])).toEqual([
      [first.patientId, true],
      [first.patientId, true],
    ]);
    expect((await read<Patient>('Patient', first.patientId)).birthDate).toBe('1985-04-21');
  });

  it('redoes at once an update a server refuses with 409, as HAPI answers an If-Match on an older version', async () => {
    const first = await writer.write(stated('MP-PAT-409', '2026-11-02T09:00:00.000Z'), outcome('ver_pat_409_1'));
    // A proxy that answers the first transaction as a server would whose Patient another write had just updated.
    let transactions = 0;
    const proxy = await startScriptedServer(async (req, res) => {
      if (req.method === 'POST' && (JSON.parse(req.body) as Bundle).type === 'transaction' && ++transactions === 1) {
        json(res, 409, { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'conflict', diagnostics: 'not the current version' }] });
        return;
      }
      const answer = await request(`${new URL(server.url).origin}${req.url}`, { method: req.method as 'GET', headers: { 'content-type': 'application/fhir+json' }, ...(req.body ? { body: req.body } : {}) });
      json(res, answer.statusCode, await answer.body.json());
    });
    try {
      const conflicted = await fhirWriter(`${proxy.url}/fhir/R4`);
      const later = await conflicted.write(stated('MP-PAT-409', '2026-11-20T09:00:00.000Z', { birthDate: '1985-04-21' }), outcome('ver_pat_409_2'));
      expect([later.patientId, later.changed, transactions]).toEqual([first.patientId, true, 2]);
      expect((await read<Patient>('Patient', first.patientId)).birthDate).toBe('1985-04-21');
    } finally {
      await proxy.close();
    }
  });

  it('leaves a Patient this plugin did not create (no patient-stated-at) as the EHR keeps it', async () => {
    await server.seed([{ resourceType: 'Patient', id: 'pat-ehr', identifier: [{ system: 'https://dental-elig.dev/fhir/sid/hl7-patient-id/BSD-MAIN/MOLARPMS', value: 'MP-EHR' }], name: [{ family: 'Ehr-Own' }], birthDate: '1985-04-12' }]);
    const before = await read<Patient>('Patient', 'pat-ehr');
    const written = await writer.write(stated('MP-EHR', '2026-11-20T09:00:00.000Z'), outcome('ver_pat_ehr'));
    expect(written.patientId).toBe('pat-ehr');
    expect(await read<Patient>('Patient', 'pat-ehr')).toEqual(before);
  });
});

describe('failures', () => {
  it('a transaction the server refuses part of leaves nothing behind, and is not retryable', async () => {
    // A proxy that breaks the last entry of each transaction, as a server refusing one entry would.
    const proxy = await startScriptedServer(async (req, res) => {
      let body = req.body;
      const parsed = body ? (JSON.parse(body) as Bundle) : undefined;
      const last = parsed?.type === 'transaction' ? parsed.entry?.at(-1) : undefined;
      if (parsed && last?.request) {
        last.request = { ...last.request, method: 'POST', url: 'Patient' };
        body = JSON.stringify(parsed);
      }
      const target = new URL(server.url);
      const answer = await request(`${target.origin}${req.url}`, { method: req.method as 'GET', headers: { 'content-type': 'application/fhir+json' }, ...(body ? { body } : {}) });
      json(res, answer.statusCode, await answer.body.json());
    });
    try {
      const broken = await fhirWriter(`${proxy.url}/fhir/R4`);
      const base = required(primary);
      const fresh = { ...base, patient: { ...base.patient, identifiers: [{ system: 'MOLARPMS', value: 'MP-ATOMIC' }] }, coverage: { ...base.coverage, payer: { id: 'ATOMIC1', name: 'Atomic Dental' }, resolution: undefined } };
      const before = await counts();
      const err = (await broken.write(fresh, withId(fixture('results', 'completed-minimal.json') as object, 'ver_atomic')).catch((e: unknown) => e)) as ChartWriteError;
      expect(err).toBeInstanceOf(ChartWriteError);
      expect([err.retryable, err.status]).toEqual([false, 400]);
      expect(err.message).toMatch(/^write eligibility: the FHIR server answered 400 to the transaction/);
      expect(await counts()).toEqual(before);
      expect(await search('Patient', 'identifier=https://dental-elig.dev/fhir/sid/hl7-patient-id/BSD-MAIN/MOLARPMS|MP-ATOMIC')).toEqual([]);
    } finally {
      await proxy.close();
    }
  });

  it('the FHIR server down is a retryable ChartWriteError that names no patient data', async () => {
    const down = await startFhirServer();
    const url = down.url;
    await down.close();
    const err = (await (await fhirWriter(url)).write(required(primary), completed).catch((e: unknown) => e)) as ChartWriteError;
    expect(err).toBeInstanceOf(ChartWriteError);
    expect([err.retryable, err.status]).toEqual([true, undefined]);
    expect(err.message).toBe('write eligibility: the FHIR server could not be reached for the search for what the chart holds (ECONNREFUSED)');
  });

  it.each([
    [503, true],
    [429, true],
    [408, true],
    [403, false],
    [422, false],
  ])('answered %i: retryable %s, with the status, and no patient data from the URL or the body', async (status, retryable) => {
    const stub = await startScriptedServer((_req, res) =>
      json(res, status, { resourceType: 'OperationOutcome', issue: [{ severity: 'error', code: 'processing', diagnostics: 'Patient RIVERA DDC884512301', expression: ['Bundle.entry[0]'] }] }),
    );
    try {
      const err = (await (await fhirWriter(stub.url)).write(required(primary), completed).catch((e: unknown) => e)) as ChartWriteError;
      expect([err.name, err.retryable, err.status]).toEqual(['ChartWriteError', retryable, status]);
      expect(err.message).toBe(`write eligibility: the FHIR server answered ${status} to the search for what the chart holds: Bundle.entry[0] (processing)`);
      expect(stub.requests[0]?.url).toBe('/');
    } finally {
      await stub.close();
    }
  });

  it("names the element the chart's issue is about without the values its expression quotes: a FHIRPath's literals, the resource a validator names", async () => {
    const expressions = ["Bundle.entry[0].resource/*Patient/pat-ellen-zygmuntowicz*/.birthDate", "CoverageEligibilityResponse.patient.where(display='Ellen \\'Zygmuntowicz\\'')", 'Patient.name.where(family="Zygmuntowicz")'];
    const stub = await startScriptedServer((_req, res) =>
      json(res, 422, { resourceType: 'OperationOutcome', issue: expressions.map((e) => ({ severity: 'error', code: 'invalid', diagnostics: 'rejected', expression: [e] })) }),
    );
    try {
      const err = (await (await fhirWriter(stub.url)).write(required(primary), completed).catch((e: unknown) => e)) as ChartWriteError;
      // The message goes into the warning `chart write refused`, a log line.
      expect(err.message).toBe('write eligibility: the FHIR server answered 422 to the search for what the chart holds: Bundle.entry[0].resource/*Patient*/.birthDate (invalid) (+2 more)');
      expect(err.issues.map((i) => i.expression)).toEqual(['Bundle.entry[0].resource/*Patient*/.birthDate', "CoverageEligibilityResponse.patient.where(display='…')", "Patient.name.where(family='…')"]);
    } finally {
      await stub.close();
    }
  });

  it.each([307, 308, 302])('a chart answering %i is refused as a redirect, not followed: its search and the patient data after it go nowhere else', async (status) => {
    const elsewhere = await startScriptedServer((_req, res) => json(res, 200, { resourceType: 'Bundle', type: 'batch-response', entry: [] }));
    const redirecting = await startScriptedServer((req, res) => void res.writeHead(status, { location: `${elsewhere.url}${req.url}` }).end());
    try {
      const err = (await (await fhirWriter(`${redirecting.url}/fhir`, { bearerToken: 'chart-token' })).write(required(primary), completed).catch((e: unknown) => e)) as ChartWriteError;
      expect([err.name, err.retryable, err.status]).toEqual(['ChartWriteError', false, status]);
      expect(err.message).toBe(`write eligibility: the FHIR server answered ${status} to the search for what the chart holds, a redirect, not followed: set the FHIR URL to where the chart answers`);
      expect(elsewhere.requests).toEqual([]);
    } finally {
      await redirecting.close();
      await elsewhere.close();
    }
  });

  it('says a success that is not FHIR JSON is one (a proxy\'s sign-in page answered 200), not a bare 200', async () => {
    const proxy = await startScriptedServer((_req, res) => void res.writeHead(200, { 'content-type': 'text/html' }).end('<html><body>Sign in</body></html>'));
    try {
      const err = (await (await fhirWriter(proxy.url)).write(required(primary), completed).catch((e: unknown) => e)) as ChartWriteError;
      expect([err.name, err.retryable, err.status]).toEqual(['ChartWriteError', false, 200]);
      expect(err.message).toBe('write eligibility: the FHIR server answered 200 to the search for what the chart holds, not in FHIR JSON');
    } finally {
      await proxy.close();
    }
  });

  it('gives up on a server that does not answer, as retryable', async () => {
    const silent = await startScriptedServer(() => undefined);
    try {
      const err = (await (await fhirWriter(silent.url, { timeoutMs: 200 })).write(required(check), completed).catch((e: unknown) => e)) as ChartWriteError;
      expect([err.retryable, err.message]).toEqual([true, 'write eligibility: the FHIR server did not answer the search for what the chart holds in time']);
    } finally {
      await silent.close();
    }
  });

  it('refuses an answer larger than it reads as it arrives, declared or streamed, and not as a chart out of reach', async () => {
    // The first request declares its size; the next streams it without one.
    const huge = await startScriptedServer((_req, res, index) => streamLarge(res, 33, { declared: index === 0 }));
    try {
      for (let i = 0; i < 2; i++) {
        const err = (await (await fhirWriter(huge.url)).write(required(check), completed).catch((e: unknown) => e)) as ChartWriteError;
        expect([err.retryable, err.message]).toEqual([false, "write eligibility: the FHIR server's answer to the search for what the chart holds is larger than this plugin reads; not read"]);
      }
    } finally {
      await huge.close();
    }
  });

  it('refuses options it cannot use, naming the option', async () => {
    await expect(fhirWriter(server.url, { bearerToken: 't', smart: { clientId: 'c', privateKey: 'k' } })).rejects.toThrow('write eligibility: options.(root): give bearerToken or smart, not both');
    await expect(fhirWriter(server.url, { timeoutMs: -1 })).rejects.toThrow(/^write eligibility: options\.timeoutMs: /);
  });
});
