import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { CodeableConcept, CoverageEligibilityResponse, CoverageEligibilityResponseInsuranceItem, Extension } from 'fhir/r4';
import { FhirInputError } from '../../../../src/adapters/fhir/operation-outcome';
import { EXTENSION_KEYS, extensionBase, toCoverageEligibilityResponse } from '../../../../src/adapters/fhir/out';
import { extensionsFile } from '../../../../src/adapters/fhir/out/extensions';
import { validateR4 } from '../../../../src/adapters/fhir/validate';
import { toOutcome, type VerificationOutcome } from '../../../../src/verification/outcome';
import { freshModules } from '../../../support/fresh-modules';
import { CREATED, convertResult, leaves, readResult, RESULT_DIR, RESULT_REFS, resultNames } from '../corpus';

/**
 * Golden files for every fixtures/results/<name>.json, then rules over every output: valid R4 by
 * both validators, ces-1, contained resources referenced, extensions declared, and every element
 * of the input findable in the output (nothing silently dropped).
 */
const names = resultNames();
const outputs = new Map(names.map((n) => [n, convertResult(n)]));
const outputOf = (name: string) => outputs.get(name) as CoverageEligibilityResponse;
const items = (r: CoverageEligibilityResponse) => r.insurance?.flatMap((i) => i.item ?? []) ?? [];
const convert = (body: unknown, refs = RESULT_REFS) => toCoverageEligibilityResponse(toOutcome(body), refs, { created: CREATED });
const codes = (concept: CodeableConcept | undefined) => (concept?.coding ?? []).map((c) => `${c.system}#${c.code}`);
/** A Completed result of an Active plan with this benefit data. */
const completedWith = (data: object) => convert({ correlationId: 'ver-data', status: 'Completed', result: { plan: { status: 'Active', payer: { name: 'Delta Dental of California' } }, data } });

function allExtensions(value: unknown): Extension[] {
  if (Array.isArray(value)) return value.flatMap(allExtensions);
  if (typeof value !== 'object' || value === null) return [];
  const own = 'extension' in value && Array.isArray(value.extension) ? (value.extension as Extension[]) : [];
  return [...own, ...Object.entries(value).flatMap(([k, v]) => (k === 'extension' ? own.flatMap((e) => allExtensions(e)) : allExtensions(v)))];
}

describe('each fixture gives its expected CoverageEligibilityResponse', () => {
  it.each(names)('%s', (name) => {
    const expected = JSON.parse(readFileSync(path.join(RESULT_DIR, `${name}.expected.json`), 'utf8')) as unknown;
    expect(outputOf(name)).toEqual(expected);
  });
});

describe('the corpus', () => {
  it('describes every result in fixtures/results/README.md', () => {
    const readme = readFileSync(path.join(RESULT_DIR, 'README.md'), 'utf8');
    for (const name of names) expect({ name, described: readme.includes(`\`${name}\``) }).toEqual({ name, described: true });
  });

  it('has every outcome and several failure kinds', () => {
    expect(new Set(names.map((n) => outputOf(n).outcome))).toEqual(new Set(['complete', 'partial', 'error', 'queued']));
    expect(names.filter((n) => n.startsWith('failed-')).length).toBeGreaterThanOrEqual(5);
  });

  it.each(names)('%s validates with @medplum/core and the R4 JSON schema, without even a warning', (name) => {
    expect(validateR4(outputOf(name))).toEqual([]);
  });

  it('gives every item a category or a productOrService, never both (ces-1)', () => {
    const all = names.flatMap((n) => items(outputOf(n)));
    expect(all.length).toBeGreaterThan(30);
    for (const item of all) expect(Boolean(item.category) !== Boolean(item.productOrService)).toBe(true);
  });

  it('references every contained resource from the response', () => {
    for (const name of names) {
      const response = outputOf(name);
      const text = JSON.stringify({ ...response, contained: undefined });
      for (const contained of response.contained ?? []) expect(text).toContain(`"reference":"#${contained.id}"`);
    }
  });

  it('uses only extensions declared in mappings/fhir/extensions.json, with their declared parts', () => {
    const declared = extensionsFile().extensions;
    const used = new Set<string>();
    for (const name of names) {
      for (const ext of allExtensions(outputOf(name))) {
        if (!ext.url.startsWith('http')) continue; // a part of a complex extension, checked below
        expect(ext.url.startsWith(extensionBase())).toBe(true);
        const key = ext.url.slice(extensionBase().length) as (typeof EXTENSION_KEYS)[number];
        const definition = declared[key];
        expect(definition).toBeDefined();
        used.add(key);
        if (definition.value === 'complex') {
          for (const part of ext.extension ?? []) expect(definition.parts).toContain(part.url);
        } else {
          expect(Object.keys(ext).filter((k) => k.startsWith('value'))).toEqual([`value${definition.value[0]?.toUpperCase()}${definition.value.slice(1)}`]);
        }
      }
    }
    // Every one declared for the response; the Coverage's and the Patient's own are the write-back's (test/sync/write-back.test.ts).
    const forResponses = EXTENSION_KEYS.filter((key) => /^CoverageEligibilityResponse\b/.test(declared[key].context));
    expect(EXTENSION_KEYS.filter((key) => !forResponses.includes(key))).toEqual(['coverage-stated-at', 'coverage-ended', 'patient-stated-at']);
    expect([...used].sort()).toEqual(forResponses.sort());
  });

  it.each(names)('%s: every element of the input is findable in the output (nothing silently dropped)', (name) => {
    const outcome = toOutcome(readResult(name));
    const input = inputOf(outcome);
    const response = outputOf(name);
    const out = leaves(response);
    const strings = out.map((l) => String(l.value));
    const unmapped = allExtensions(response)
      .filter((e) => e.url.endsWith('/unmapped-element'))
      .map((e) => ({ path: e.extension?.[0]?.valueString ?? '', value: e.extension?.[1]?.valueString ?? '' }));
    for (const leaf of leaves(input)) {
      const carrier = unmapped.find((u) => leaf.path === u.path || leaf.path.startsWith(`${u.path}.`) || leaf.path.startsWith(`${u.path}[`));
      if (carrier) {
        expect(carrier.value).toContain(JSON.stringify(leaf.value));
      } else if (typeof leaf.value === 'number') {
        expect({ path: leaf.path, found: out.some((l) => l.value === leaf.value) }).toEqual({ path: leaf.path, found: true });
      } else {
        // Short values must be an element of their own; longer ones may sit inside a text (disposition).
        const wanted = String(leaf.value);
        const found = strings.some((s) => s === wanted || (wanted.length >= 5 && s.includes(wanted)));
        expect({ path: leaf.path, found }).toEqual({ path: leaf.path, found: true });
      }
    }
  });
});

/** What the writer is given: the verification's own fields and the parsed result or problem. */
function inputOf(outcome: VerificationOutcome): unknown {
  const { result: _raw, ...verification } = outcome.verification;
  switch (outcome.kind) {
    case 'completed':
    case 'partial':
      return { ...verification, result: outcome.result };
    case 'failed':
      return { ...verification, result: outcome.problem };
    default:
      return verification;
  }
}

describe('toCoverageEligibilityResponse', () => {
  it('maps Completed, Partial, Failed and Pending to complete, partial, error and queued', () => {
    expect(outputOf('completed-full').outcome).toBe('complete');
    expect(outputOf('partial').outcome).toBe('partial');
    expect(outputOf('failed-invalid-credentials').outcome).toBe('error');
    expect(outputOf('pending').outcome).toBe('queued');
    expect(items(outputOf('pending'))).toEqual([]);
  });

  it('refuses a status it does not know, naming status', () => {
    const run = () => convert({ correlationId: 'c1', status: 'Teleported' });
    expect(run).toThrow(FhirInputError);
    expect(run).toThrow(/^status: /);
  });

  it('identifies the response by correlationId and externalId, and finds the request by correlationId', () => {
    const response = outputOf('completed-full');
    expect(response.identifier).toEqual([
      { system: 'https://dental-elig.dev/fhir/sid/verification-correlation-id', value: 'ver_01JDX4T9Q2M7K8N3P5R6S7T8V9' },
      { system: 'https://dental-elig.dev/fhir/sid/verification-external-id', value: 'elig_9f3d27f0fb1d9414eabcc13f8ac00bf1' },
    ]);
    expect(response.request).toEqual({ type: 'CoverageEligibilityRequest', identifier: response.identifier?.[0] });
  });

  it('names the check it is written for, and says so when the result was made for another appointment', () => {
    const options = { created: CREATED, checkKey: 'elig_check_f2', servicedDate: '2026-12-10', reusedFrom: 'ver_01JDX4T9Q2M7K8N3P5R6S7T8V9' };
    const response = toCoverageEligibilityResponse(toOutcome(readResult('completed-full')), RESULT_REFS, options);
    expect(response.identifier?.map((i) => `${i.system?.split('/').pop()}|${i.value}`)).toEqual([
      'verification-correlation-id|ver_01JDX4T9Q2M7K8N3P5R6S7T8V9',
      'eligibility-check|elig_check_f2',
      'verification-external-id|elig_9f3d27f0fb1d9414eabcc13f8ac00bf1',
    ]);
    expect(response.disposition).toBe(
      `${outputOf('completed-full').disposition} Reused: the result of verification ver_01JDX4T9Q2M7K8N3P5R6S7T8V9, made for another appointment of the same coverage.`,
    );
    // The visit it is for, as the request states it; in R4's order, after patient.
    expect(response.servicedDate).toBe('2026-12-10');
    expect(Object.keys(response).indexOf('servicedDate')).toBe(Object.keys(response).indexOf('patient') + 1);
    expect(validateR4(response)).toEqual([]);
  });

  it('uses the chart references when given, keeping the payer id, name and phone on the insurer', () => {
    const response = convert(readResult('completed-full'), { ...RESULT_REFS, request: 'CoverageEligibilityRequest/cer-1', insurer: 'Organization/org-delta-ca' });
    expect(response.request).toEqual({ reference: 'CoverageEligibilityRequest/cer-1' });
    expect(response.insurer).toMatchObject({
      reference: 'Organization/org-delta-ca',
      identifier: { system: 'https://dental-elig.dev/fhir/sid/payer-id', value: 'CDCA1' },
      display: 'Delta Dental of California',
      extension: [{ valueContactPoint: { system: 'phone', value: '800-765-6003' } }],
    });
  });

  it('names the payer of a Failed result from the check, and asks for an insurer when nothing names one', () => {
    expect(outputOf('failed-site-maintenance').insurer).toEqual({
      type: 'Organization',
      identifier: { system: 'https://dental-elig.dev/fhir/sid/payer-id', value: 'CDCA1' },
      display: 'Delta Dental of California',
    });
    const { payer: _payer, ...bare } = RESULT_REFS;
    expect(() => convert(readResult('failed-site-maintenance'), bare)).toThrow('insurer: the result names no payer: give an Organization reference');
  });

  it('writes a problem type or instance with whitespace inside, or a v1 error code with a space, as a URI with it percent-encoded', () => {
    const failed = (result: object) => convert({ correlationId: 'ver-1', status: 'Failed', result }, { ...RESULT_REFS, payer: { name: 'Delta Dental of California' } });
    const uris = (response: CoverageEligibilityResponse) =>
      (response.error?.[0]?.extension ?? []).filter((e) => e.url.endsWith('/problem-type') || e.url.endsWith('/problem-instance')).map((e) => e.valueUri);
    const modern = failed({ type: 'https://errors.example/Site Maintenance', instance: 'urn:x:portal\tdown', title: 'Maintenance' });
    expect(validateR4(modern)).toEqual([]);
    expect(uris(modern)).toEqual(['https://errors.example/Site%20Maintenance', 'urn:x:portal%09down']);
    const legacy = failed({ details: { code: 'PORTAL LOCKED', message: 'The portal account is locked' } });
    expect(validateR4(legacy)).toEqual([]);
    expect(uris(legacy)).toEqual(['urn:v1-error:PORTAL%20LOCKED']);
  });

  it("reads a portal's blank category, procedure code or payer name as none given: the item is general dental care, the insurer the check's payer", () => {
    const body = readResult('completed-full') as { result: { plan: { payer: Record<string, unknown> }; data: Record<string, Array<Record<string, unknown>>> } };
    const data = body.result.data;
    (data.maximums?.[0] as Record<string, unknown>).category = ' ';
    (data.coinsurance?.[10] as Record<string, unknown>).procedureCodes = [' '];
    (data.deductibles?.[0] as Record<string, unknown>).waivedCategories = ['', 'Preventive'];
    (data.history?.[0] as Record<string, unknown>).procedureCode = '';
    (data.history?.[1] as Record<string, unknown>).procedureCode = ' ';
    body.result.plan.payer = { name: ' ' };
    const response = convert(body, { ...RESULT_REFS, payer: { name: 'Delta Dental of California' } });
    expect(validateR4(response)).toEqual([]);
    const general = codes(outputOf('completed-full').insurance?.[0]?.item?.find((i) => i.name === 'Deductible')?.category);
    const [maximum] = items(response).filter((i) => i.name === 'Maximum');
    expect(codes(maximum?.category)).toEqual(general);
    const waived = items(response).find((i) => i.name === 'Deductible')?.benefit?.[0]?.extension?.filter((e) => e.url.endsWith('/waived-category'));
    expect(waived?.map((e) => e.valueCodeableConcept?.text)).toEqual(['Preventive']);
    const history = items(response).filter((i) => i.name === 'Service history');
    expect(history.slice(0, 2).map((i) => codes(i.category))).toEqual([general, general]);
    expect(response.insurer?.display).toBe('Delta Dental of California');
    const { payer: _payer, ...bare } = RESULT_REFS;
    expect(() => convert(body, bare)).toThrow('insurer: the result names no payer: give an Organization reference');
  });

  it("writes no identifier of a system alone, nor an assigned office or provider of nothing, for a portal's blank office, NPI or tax id", () => {
    const blank = ' ';
    const response = convert({
      correlationId: 'ver-1',
      status: 'Completed',
      result: {
        plan: { status: 'Active', assignment: { office: { name: blank, officeId: blank, address: { line1: blank, city: '' } }, provider: { firstName: blank, npi: blank } } },
        verificationProvider: { firstName: 'Grace', lastName: 'Chen', taxId: blank, participation: { status: 'Participating' } },
      },
    });
    expect(response.contained).toEqual([{ resourceType: 'Practitioner', id: 'verification-provider', name: [{ family: 'Chen', given: ['Grace'] }] }]);
    expect(response.disposition).toBe('Completed. Plan: Active.');
    expect(response.insurance?.[0]?.extension?.map((e) => e.url.split('/').pop())).toEqual(['plan']);
    expect(validateR4(response)).toEqual([]);
  });

  it('says in the disposition which office and provider the plan assigns the member to, where the front desk reads it: a visit elsewhere is not covered', () => {
    const assigned = (assignment: object) => convert({ correlationId: 'ver-1', status: 'Completed', result: { plan: { name: 'Guardian DHMO', status: 'Active', assignment } } }).disposition;
    expect(assigned({ office: { name: 'Uptown Family Dental', officeId: 'OF-17' }, provider: { firstName: 'Grace', lastName: 'Chen', npi: '1234567893' } })).toBe(
      'Completed. Plan Guardian DHMO: Active. Assigned to office Uptown Family Dental (OF-17), provider Grace Chen.',
    );
    expect(assigned({ office: { officeId: 17 } })).toBe('Completed. Plan Guardian DHMO: Active. Assigned to office 17.');
    expect(assigned({ provider: { npi: '1234567893' } })).toBe('Completed. Plan Guardian DHMO: Active. Assigned to provider NPI 1234567893.');
  });

  it('keeps a benefit period the portal gives reversed as it came, rather than write a Period R4 refuses (per-1), and writes the rest', () => {
    const body = readResult('completed-full') as { result: { plan: Record<string, unknown> } };
    body.result.plan.benefitPeriod = { start: '2026-12-31', end: '2026-01-01' };
    const response = convert(body);
    expect(response.insurance?.[0]?.benefitPeriod).toBeUndefined();
    const kept = response.extension?.filter((e) => e.url.endsWith('/unmapped-element')).map((e) => e.extension?.map((x) => x.valueString));
    expect(kept).toContainEqual(['result.plan.benefitPeriod', '{"start":"2026-12-31","end":"2026-01-01"}']);
    expect(response.outcome).toBe('complete');
    expect(response.insurance?.[0]?.item?.length).toBe(convert(readResult('completed-full')).insurance?.[0]?.item?.length);
    expect(validateR4(response)).toEqual([]);
  });

  it("reads a portal's blank date as none given, never as a malformed one that keeps the whole result out of the chart", () => {
    const body = readResult('completed-full') as { createdAt: string; result: { patient: Record<string, unknown>; plan: Record<string, unknown>; data: Record<string, Array<Record<string, unknown>>> } };
    body.createdAt = ' ';
    body.result.plan.terminationDate = '';
    body.result.plan.benefitPeriod = { start: '2026-01-01', end: ' ' };
    body.result.patient.dateOfBirth = '';
    (body.result.data.frequencies?.[0] as Record<string, unknown>).lastServiceDate = '';
    (body.result.data.waitingPeriods?.[0] as Record<string, unknown>).endsOn = ' ';
    (body.result.data.history?.[0] as Record<string, unknown>).date = '';
    const response = convert(body);
    expect(validateR4(response)).toEqual([]);
    expect(response.insurance?.[0]?.benefitPeriod).toEqual({ start: '2026-01-01' });
    const plan = response.insurance?.[0]?.extension?.find((e) => e.url.endsWith('/plan'));
    expect(plan?.extension?.map((e) => e.url)).not.toContain('terminationDate');
    expect(response.extension?.map((e) => e.url.split('/').pop())).not.toContain('verification-created');
  });

  it("reads the service's timestamps in ISO 8601's other forms, and keeps one it cannot read as sent, never keeping the whole result out of the chart", () => {
    const at = (value: string) => {
      const response = convert({ ...(readResult('completed-full') as object), createdAt: value, completedAt: value });
      expect(validateR4(response)).toEqual([]);
      const kept = response.extension?.filter((e) => e.url.endsWith('/unmapped-element')).map((e) => e.extension?.map((x) => x.valueString)) ?? [];
      return { written: response.extension?.filter((e) => e.valueDateTime !== undefined).map((e) => e.valueDateTime), kept: kept.filter((pair) => pair?.[0]?.endsWith('At')) };
    };
    // Without seconds, with an hour's offset, with a space for the T: the instant each names.
    expect(at('2026-11-24T10:00Z').written).toEqual(['2026-11-24T10:00:00Z', '2026-11-24T10:00:00Z']);
    expect(at('2026-11-24T10:00:03+05').written).toEqual(['2026-11-24T10:00:03+05:00', '2026-11-24T10:00:03+05:00']);
    expect(at('2026-11-24 10:00:03.5-0330').written).toEqual(['2026-11-24T10:00:03.5-03:30', '2026-11-24T10:00:03.5-03:30']);
    // No instant at all: left out, kept as sent, and the result charted.
    expect(at('24/11/2026 10:00')).toEqual({ written: [], kept: [['createdAt', '"24/11/2026 10:00"'], ['completedAt', '"24/11/2026 10:00"']] });
    expect(at('2026-11-24T10:00:03+14:30').kept).toHaveLength(2);
  });

  it('refuses references that are not Type/id, naming the option', () => {
    expect(() => convert(readResult('pending'), { ...RESULT_REFS, patient: 'pat-ellen' })).toThrow('patient: must be a reference Patient/<id>');
    expect(() => convert(readResult('pending'), { ...RESULT_REFS, coverage: 'Patient/x' })).toThrow('coverage: must be a reference Coverage/<id>');
  });

  it('stores the share the plan pays, says so, and gives a range as valueRange with a plain value beside it', () => {
    const coinsurance = items(outputOf('completed-full')).filter((i) => i.name === 'Coinsurance');
    const byText = (text: string) => coinsurance.find((i) => i.category?.text === text) as CoverageEligibilityResponseInsuranceItem;
    const basic = byText('Basic').benefit?.[0];
    expect(codes(basic?.type)).toEqual(['https://dental-elig.dev/fhir/CodeSystem/benefit-type#plan-pays-percent']);
    expect(basic?.type.coding?.[0]?.display).toMatch(/plan pays.*patient pays the rest/);
    expect(basic?.allowedUnsignedInt).toBe(80);
    const endo = byText('Endodontics').benefit?.[0];
    expect(endo?.allowedUnsignedInt).toBeUndefined();
    expect(endo?.allowedString).toBe('60-80%');
    expect(endo?.extension?.[0]?.valueRange).toEqual({
      low: { value: 60, unit: '%', system: 'http://unitsofmeasure.org', code: '%' },
      high: { value: 80, unit: '%', system: 'http://unitsofmeasure.org', code: '%' },
    });
    const implant = coinsurance.find((i) => i.productOrService)?.benefit?.[0];
    expect(implant?.allowedString).toBe('42.5%');
  });

  it("writes a v1 percentage that is no number, such as Not covered, as the item's plan-pays value, where the front desk reads it", () => {
    const ortho = items(outputOf('v1-legacy-percentages')).find((i) => i.category?.text === 'Orthodontics');
    expect(ortho?.benefit).toEqual([{ type: ortho?.benefit?.[0]?.type, allowedString: 'Not covered' }]);
    expect(codes(ortho?.benefit?.[0]?.type)).toEqual(['https://dental-elig.dev/fhir/CodeSystem/benefit-type#plan-pays-percent']);
    expect((outputOf('v1-legacy-percentages').extension ?? []).filter((e) => e.url.endsWith('/unmapped-element'))).toEqual([]);
  });

  it('marks a category the plan does not cover excluded, as R4 reads an item without it as covered', () => {
    expect(items(outputOf('v1-legacy-percentages')).map((i) => [i.category?.text, i.excluded])).toEqual([
      ['Preventive', undefined],
      ['Basic', undefined],
      ['Major', undefined],
      ['Orthodontics', true],
    ]);
    const worded = (final: string) => completedWith({ coinsurance: [{ category: 'Orthodontics', percentage: { final } }] });
    expect(['NOT COVERED', 'not-covered', 'Excluded', 'Refer to plan'].map((final) => items(worded(final))[0]?.excluded)).toEqual([true, true, true, undefined]);
    expect(validateR4(outputOf('v1-legacy-percentages'))).toEqual([]);
  });

  it('codes categories in X12 service types, adding ex-benefitcategory only where it has the code', () => {
    const categories = items(outputOf('completed-full'))
      .filter((i) => i.name === 'Coinsurance' && i.category)
      .map((i) => [i.category?.text, codes(i.category)]);
    const x12 = (c: string) => `https://x12.org/codes/service-type-codes#${c}`;
    const fhir = (c: string) => `http://terminology.hl7.org/CodeSystem/ex-benefitcategory#${c}`;
    expect(categories).toEqual([
      ['Diagnostic', [x12('23'), fhir('23')]],
      ['Preventive', [x12('41')]],
      ['Basic', [x12('25'), fhir('25')]],
      ['Restorative', [x12('25'), fhir('25')]],
      ['Endodontics', [x12('26'), fhir('26')]],
      ['Periodontics', [x12('24'), fhir('24')]],
      ['OralSurgery', [x12('40')]],
      ['Major', [x12('36'), fhir('36')]],
      ['Prosthodontics', [x12('39')]],
      ['Orthodontics', [x12('38')]],
    ]);
  });

  it('puts one CDT code in productOrService, and lists several on a category item (derived from the CDT ranges when none is given)', () => {
    const frequencies = items(outputOf('completed-full')).filter((i) => i.name === 'Frequency limit');
    expect(codes(frequencies[1]?.productOrService)).toEqual(['http://www.ada.org/cdt#D0274']);
    expect(frequencies[2]?.category?.text).toBeUndefined();
    expect(codes(frequencies[2]?.category)[0]).toBe('https://x12.org/codes/service-type-codes#23');
    expect(frequencies[2]?.extension?.map((e) => codes(e.valueCodeableConcept)[0])).toEqual(['http://www.ada.org/cdt#D0330', 'http://www.ada.org/cdt#D0210']);
    expect(frequencies[1]?.benefit?.[0]?.extension).toEqual([
      { url: `${extensionBase()}frequency-period`, valueDuration: { value: 12, unit: 'months', system: 'http://unitsofmeasure.org', code: 'mo' } },
    ]);
  });

  it('says a frequency over several years is one, not coded annual: once every three calendar years', () => {
    const frequency = (period: string, periodLength?: number) => ({ procedureCodes: ['D0330'], category: 'Diagnostic', limit: 1, period, ...(periodLength !== undefined && { periodLength }) });
    const response = convert({
      correlationId: 'ver-years',
      status: 'Completed',
      result: { plan: { status: 'Active', payer: { name: 'Delta Dental of California' } }, data: { frequencies: [frequency('CalendarYear', 3), frequency('BenefitYear', 1), frequency('CalendarYear'), frequency('Annual', 2), frequency('Months', 60), frequency('Months', 1)] } },
    });
    const limits = items(response).filter((i) => i.name === 'Frequency limit');
    const duration = (value: number, unit: string, code: string) => [{ url: `${extensionBase()}frequency-period`, valueDuration: { value, unit, system: 'http://unitsofmeasure.org', code } }];
    const years = (value: number) => duration(value, 'years', 'a');
    // The term's text says how long too: 'CalendarYear' beside a limit of 1 reads as once a year to a person as much as the code did.
    expect(limits.map((i) => [i.term, i.benefit?.[0]?.extension])).toEqual([
      [{ text: 'Every 3 years (CalendarYear)' }, years(3)],
      [{ coding: [{ system: 'http://terminology.hl7.org/CodeSystem/benefit-term', code: 'annual', display: 'Annual' }], text: 'BenefitYear' }, years(1)],
      [{ coding: [{ system: 'http://terminology.hl7.org/CodeSystem/benefit-term', code: 'annual', display: 'Annual' }], text: 'CalendarYear' }, undefined],
      [{ text: 'Every 2 years (Annual)' }, years(2)],
      [{ text: 'Every 60 Months' }, duration(60, 'months', 'mo')],
      [{ text: 'Months' }, duration(1, 'months', 'mo')],
    ]);
    expect(JSON.stringify(response)).not.toContain('unmapped-element');
    expect(validateR4(response)).toEqual([]);
  });

  it('reads a procedure code padded with spaces as the CDT code it is', () => {
    const response = convert({
      correlationId: 'ver-padded',
      status: 'Completed',
      result: {
        plan: { status: 'Active', payer: { name: 'Delta Dental of California' } },
        data: {
          coinsurance: [{ network: 'InNetwork', procedureCodes: ['D1110 '], percentage: { final: { start: 100, end: 100 } } }, { network: 'InNetwork', procedureCodes: [' D2740', 'D2750 '], percentage: { final: { start: 50, end: 50 } } }],
          history: [{ procedureCode: ' D0120 ', date: '2026-01-05' }],
        },
      },
    });
    expect(items(response).map((i) => [codes(i.productOrService), codes(i.category)])).toEqual([
      [['http://www.ada.org/cdt#D1110'], []],
      [[], ['https://x12.org/codes/service-type-codes#36', 'http://terminology.hl7.org/CodeSystem/ex-benefitcategory#36']],
      [['http://www.ada.org/cdt#D0120'], []],
    ]);
    expect(validateR4(response)).toEqual([]);
  });

  it('never codes an entry of several procedures as dental care as a whole: codes no one category holds, or only general dental care (implants), name their codes and claim no category', () => {
    const coinsurance = (procedureCodes: string[], start: number) => ({ network: 'InNetwork', procedureCodes, percentage: { final: { start, end: start } } });
    const response = convert({
      correlationId: 'ver-codes',
      status: 'Completed',
      result: {
        plan: { status: 'Active', payer: { name: 'Delta Dental of California' } },
        data: {
          coinsurance: [coinsurance(['D0120', 'D1110'], 100), coinsurance(['D6010', 'D6057'], 50), coinsurance(['D2740', 'D2750'], 50), { network: 'InNetwork', percentage: { final: { start: 80, end: 80 } } }],
          frequencies: [{ procedureCodes: ['D0210', 'D0330', 'D1110'], limit: 1, period: 'Months', periodLength: 36 }],
        },
      },
    });
    expect(items(response).map((i) => [codes(i.category), i.category?.text])).toEqual([
      [[], 'D0120, D1110'],
      [[], 'D6010, D6057'],
      [['https://x12.org/codes/service-type-codes#36', 'http://terminology.hl7.org/CodeSystem/ex-benefitcategory#36'], undefined],
      [['https://x12.org/codes/service-type-codes#35', 'http://terminology.hl7.org/CodeSystem/ex-benefitcategory#35'], undefined],
      [[], 'D0210, D0330, D1110'],
    ]);
    expect(items(response)[0]?.extension?.map((e) => codes(e.valueCodeableConcept)[0])).toEqual(['http://www.ada.org/cdt#D0120', 'http://www.ada.org/cdt#D1110']);
    expect(validateR4(response)).toEqual([]);
  });

  it('never codes a category named as a part of dental care that X12 has no service type for (implants) as dental care as a whole', () => {
    const response = completedWith({
      coinsurance: [{ category: 'Implants', network: 'InNetwork', percentage: { final: { start: 50, end: 50 } } }, { category: 'General', network: 'InNetwork', percentage: { final: { start: 80, end: 80 } } }],
      waitingPeriods: [{ category: 'Implants', months: 12 }],
      frequencies: [{ category: 'Implants', procedureCodes: ['D6010'], limit: 1, period: 'Months', periodLength: 60 }, { procedureCodes: ['D6010', 'D6057'], limit: 1, period: 'Lifetime' }],
    });
    const dentalCare = ['https://x12.org/codes/service-type-codes#35', 'http://terminology.hl7.org/CodeSystem/ex-benefitcategory#35'];
    expect(items(response).map((i) => [i.name, codes(i.category), i.category?.text])).toEqual([
      ['Coinsurance', [], 'Implants'],
      ['Coinsurance', dentalCare, 'General'],
      ['Frequency limit', [], 'Implants'],
      ['Frequency limit', [], 'D6010, D6057'],
      ['Waiting period', [], 'Implants'],
    ]);
    expect(validateR4(response)).toEqual([]);
  });

  it('says on a waiting period when it ends, where a person reads it, not in an extension alone: one long over reads as still in effect', () => {
    expect(items(outputOf('completed-full')).filter((i) => i.name === 'Waiting period').map((i) => [i.category?.text, i.description])).toEqual([
      ['Major', 'Ends 2025-01-01'],
      ['Orthodontics', 'Ends 2026-01-01'],
    ]);
    expect(items(completedWith({ waitingPeriods: [{ category: 'Major', months: 6 }] }))[0]?.description).toBeUndefined();
  });

  it('says on a past service when it was done and on which tooth and surface, where a person reads it, not in an extension alone', () => {
    expect(items(outputOf('completed-full')).filter((i) => i.name === 'Service history').map((i) => [codes(i.productOrService), i.description])).toEqual([
      [['http://www.ada.org/cdt#D1110'], 'Done 2026-05-12'],
      [['http://www.ada.org/cdt#D2740'], 'Done 2025-09-03, tooth 14'],
      [['http://www.ada.org/cdt#D2392'], 'Done 2025-02-18, tooth 30, surface MO'],
    ]);
    const [toothOnly, none] = items(completedWith({ history: [{ procedureCode: 'D2740', date: ' ', tooth: '3' }, { procedureCode: 'D0120' }] }));
    expect([toothOnly?.description, none?.description]).toEqual(['Tooth 3', undefined]);
  });

  it('says on a frequency limit when it was last done, after the payer\'s words, where a person reads it: used 1 of once in 6 months reads as not covered again', () => {
    expect(items(outputOf('completed-full')).find((i) => i.name === 'Frequency limit')?.description).toBe('Prophylaxis twice per calendar year; last done 2026-05-12');
    const limit = { category: 'Preventive', limit: 1, period: 'Months', periodLength: 6, used: 1 };
    const described = items(completedWith({ frequencies: [{ ...limit, lastServiceDate: '2026-05-12', description: 'Fluoride once every 6 months.' }, { ...limit, lastServiceDate: '2026-05-12' }, { ...limit, description: 'Fluoride once every 6 months.' }] }));
    expect(described.map((i) => i.description)).toEqual(['Fluoride once every 6 months; last done 2026-05-12', 'Last done 2026-05-12', 'Fluoride once every 6 months.']);
  });

  it('says what remains of a maximum or deductible, and its carry-over, where a person reads it: R4 has allowed and used alone', () => {
    const described = (response: CoverageEligibilityResponse) => items(response).filter((i) => i.name === 'Maximum' || i.name === 'Deductible').map((i) => i.description);
    expect(described(outputOf('completed-full'))).toEqual([
      'Remaining $1,200.00; carryover $250.00; carryover remaining $175.00',
      'Remaining $1,000.00',
      'Remaining $1,549.50',
      'Remaining $0.00; waived for Preventive, Diagnostic',
      'Remaining $100.00',
    ]);
    // A deductible as a portal gives it without what was used: the amount alone would read as still owed.
    expect(described(completedWith({ deductibles: [{ type: 'Annual', amount: 50, remainingAmount: 0 }], maximums: [{ type: 'Annual', amount: 1000 }] }))).toEqual([undefined, 'Remaining $0.00']);
  });

  it('says on a deductible the categories it is waived for, where a person reads it: in extensions alone it reads as owed on cleanings', () => {
    const described = (response: CoverageEligibilityResponse) => items(response).filter((i) => i.name === 'Deductible').map((i) => i.description);
    expect(described(outputOf('completed-full'))).toEqual(['Remaining $0.00; waived for Preventive, Diagnostic', 'Remaining $100.00']);
    const deductible = { type: 'Annual', scope: 'Individual', network: 'InNetwork', amount: 50 };
    expect(described(completedWith({ deductibles: [{ ...deductible, remainingAmount: 50, waivedCategories: ['Preventive', ' '] }, { ...deductible, waivedCategories: ['Diagnostic'] }, { ...deductible, waivedCategories: [] }] }))).toEqual([
      'Remaining $50.00; waived for Preventive',
      'Waived for Diagnostic',
      undefined,
    ]);
  });

  it('maps maximums and deductibles to benefit-type, network, unit and term, with carry-over amounts as extensions', () => {
    const [annual] = items(outputOf('completed-full'));
    expect([codes(annual?.network), codes(annual?.unit), codes(annual?.term), codes(annual?.benefit?.[0]?.type)]).toEqual([
      ['http://terminology.hl7.org/CodeSystem/benefit-network#in'],
      ['http://terminology.hl7.org/CodeSystem/benefit-unit#individual'],
      ['http://terminology.hl7.org/CodeSystem/benefit-term#annual'],
      ['http://terminology.hl7.org/CodeSystem/benefit-type#benefit'],
    ]);
    expect(annual?.benefit?.[0]).toMatchObject({ allowedMoney: { value: 1500, currency: 'USD' }, usedMoney: { value: 300, currency: 'USD' } });
    expect(annual?.benefit?.[0]?.extension?.map((e) => [e.url.slice(extensionBase().length), e.valueMoney?.value])).toEqual([
      ['remaining-amount', 1200],
      ['carryover-amount', 250],
      ['remaining-carryover-amount', 175],
    ]);
    const deductible = items(outputOf('completed-full')).find((i) => i.name === 'Deductible');
    expect(codes(deductible?.benefit?.[0]?.type)).toEqual(['http://terminology.hl7.org/CodeSystem/benefit-type#deductible']);
  });

  it('sets inforce from the plan status and the benefit period from the plan', () => {
    expect(outputOf('completed-full').insurance?.[0]).toMatchObject({ inforce: true, benefitPeriod: { start: '2026-01-01', end: '2026-12-31' } });
    expect(outputOf('inactive-plan').insurance?.[0]?.inforce).toBe(false);
    expect(outputOf('completed-minimal').insurance?.[0]?.inforce).toBe(true);
  });

  it("says a plan the payer calls Active is not in force on a visit its own dates leave out, and why, keeping the status as given", () => {
    const dated = (effectiveDate: string, terminationDate: string, servicedDate: string) => {
      const body = readResult('completed-full') as { result: { plan: Record<string, unknown> } };
      Object.assign(body.result.plan, { effectiveDate, terminationDate });
      return toCoverageEligibilityResponse(toOutcome(body), RESULT_REFS, { created: CREATED, servicedDate });
    };
    // Verified in December for a January visit: the portal's status is today's, the plan ends with the year.
    const ended = dated('2024-01-01', '2026-12-31', '2027-01-08');
    expect(ended.insurance?.[0]?.inforce).toBe(false);
    expect(ended.disposition).toMatch(/^Completed\. Plan Delta Dental PPO: Active\. Not in force on the date of service, 2027-01-08: the plan's termination date is 2026-12-31\. /);
    const plan = ended.insurance?.[0]?.extension?.find((e) => e.url.endsWith('/plan'));
    expect(plan?.extension?.find((e) => e.url === 'status')?.valueString).toBe('Active');
    expect(validateR4(ended)).toEqual([]);
    const early = dated('2027-01', '2027-12-31', '2026-12-15');
    expect([early.insurance?.[0]?.inforce, early.disposition?.includes("the plan's effective date is 2027-01.")]).toEqual([false, true]);
    // A date given to the month is the whole month; the first and last days are in force.
    expect(['2026-12-31', '2026-12-01'].map((day) => dated('2026-12', '2026-12', day).insurance?.[0]?.inforce)).toEqual([true, true]);
    expect(dated('2024-01-01', '2026-12-31', '2026-12-31').disposition).not.toContain('Not in force');
  });

  it('says what benefit period the figures are of when it does not hold the visit: verified in December, this year\'s remaining would read as January\'s', () => {
    const periodOn = (benefitPeriod: object, servicedDate: string) => {
      const body = readResult('completed-full') as { result: { plan: Record<string, unknown> } };
      Object.assign(body.result.plan, { benefitPeriod });
      return toCoverageEligibilityResponse(toOutcome(body), RESULT_REFS, { created: CREATED, servicedDate }).disposition;
    };
    const year = { start: '2026-01-01', end: '2026-12-31' };
    expect(periodOn(year, '2027-01-08')).toMatch(
      /^Completed\. Plan Delta Dental PPO: Active\. The benefit period, 2026-01-01 to 2026-12-31, does not hold the date of service, 2027-01-08: what is used and remaining is that period's\. Assigned to /,
    );
    expect(periodOn({ start: '2027-01' }, '2026-12-31')).toContain('The benefit period, from 2027-01, does not hold the date of service, 2026-12-31:');
    expect(periodOn({ end: '2026' }, '2027-01-01')).toContain('The benefit period, to 2026, does not hold');
    // The visit within it, at the precision written, or a period given reversed (kept as sent), says nothing of it.
    expect([periodOn(year, '2026-12-31'), periodOn({ start: '2026-12', end: '2026-12' }, '2026-12-01'), periodOn({ start: '2026-12-31', end: '2026-01-01' }, '2027-01-08')].map((d) => d?.includes('benefit period'))).toEqual([false, false, false]);
  });

  it('says the coverage is not in force when a failure is the payer saying so (InactivePatient, PatientNotEligible), and nothing of it for any other failure', () => {
    const failed = (kind: string) =>
      convert({ correlationId: 'ver-1', status: 'Failed', result: { type: `https://errors.verification.example/${kind}`, title: kind } }, { ...RESULT_REFS, payer: { name: 'Delta Dental of California' } });
    const responses = ['InactivePatient', 'PatientNotEligible', 'PatientNotFound', 'SiteMaintenance', 'CoverageUnderReview'].map(failed);
    expect(responses.map((r) => [r.outcome, r.insurance?.[0]?.inforce])).toEqual([
      ['error', false],
      ['error', false],
      ['error', undefined],
      ['error', undefined],
      ['error', undefined],
    ]);
    expect(responses.flatMap((r) => validateR4(r))).toEqual([]);
  });

  it('contains the verification provider and says whether the payer counts it in or out of network', () => {
    const participation = (name: string) => items(outputOf(name)).find((i) => i.name === 'Provider participation');
    expect(codes(participation('completed-full')?.network)).toEqual(['http://terminology.hl7.org/CodeSystem/benefit-network#in']);
    expect(codes(participation('nonparticipating')?.network)).toEqual(['http://terminology.hl7.org/CodeSystem/benefit-network#out']);
    expect(participation('nonparticipating')?.provider).toEqual({ reference: '#verification-provider' });
    expect(outputOf('nonparticipating').contained?.[0]).toMatchObject({
      resourceType: 'Practitioner',
      name: [{ family: 'Okafor', given: ['Daniel'] }],
      identifier: [{ system: 'urn:oid:2.16.840.1.113883.4.4', value: '13-7654321' }],
    });
  });

  it('turns a Partial\'s contexts into error[] entries and disposition text', () => {
    const response = outputOf('partial');
    expect(response.error?.map((e) => [codes(e.code), e.code.text])).toEqual([
      [['https://dental-elig.dev/fhir/CodeSystem/verification-issue#not-retrieved'], 'Deductibles were not shown on the portal for this member.'],
      [['https://dental-elig.dev/fhir/CodeSystem/verification-issue#not-retrieved'], 'Service history page timed out.'],
      [['https://dental-elig.dev/fhir/CodeSystem/verification-issue#not-retrieved'], 'Frequencies are only available by phone for this plan.'],
    ]);
    expect(response.disposition).toContain('Not retrieved: Deductibles were not shown on the portal for this member; Service history page timed out;');
  });

  it("reads a portal's blank plan name, detail or disclaimer as none given: the disposition and error[] say what is there, never 'Plan  :  .'", () => {
    const partial = convert({
      correlationId: 'ver-1',
      status: 'Partial',
      result: { plan: { name: ' ', status: '' }, contexts: [{ detail: ' ', dataPoint: 'coinsurance', portalId: 'aetnadental' }], disclaimers: [{ type: ' ', text: ' ' }] },
    });
    expect(partial.disposition).toBe('Partial. Not retrieved: coinsurance.');
    expect(partial.error?.map((e) => e.code.text)).toEqual(['coinsurance was not retrieved']);
    const failed = convert({
      correlationId: 'ver-2',
      status: 'Failed',
      result: { type: 'https://errors.verification.example/SiteMaintenance', title: ' ', detail: '', upstreamErrors: [{ detail: ' ', portalId: 'aetnadental' }], errors: [{ field: 'subscriber.memberId', message: ' ', code: 'invalid_value' }] },
    });
    expect(failed.disposition).toBe('Failed (SiteMaintenance). Upstream: aetnadental. Fields: subscriber.memberId: invalid_value. The payer portal is down for maintenance.');
    expect(failed.error?.slice(1).map((e) => e.code.text)).toEqual(['aetnadental failed', 'invalid (invalid_value)']);
    expect(validateR4(partial)).toEqual([]);
    expect(validateR4(failed)).toEqual([]);
  });

  it('puts a failure\'s kind (X12 AAA03 where one fits), title, detail and every upstream error in error[] and disposition', () => {
    const response = outputOf('failed-patient-not-found');
    expect(codes(response.error?.[0]?.code)).toEqual([
      'https://codesystem.x12.org/005010/901#67',
      'https://dental-elig.dev/fhir/CodeSystem/verification-failure-kind#PatientNotFound',
    ]);
    expect(response.error?.[0]?.code.text).toBe('Patient not found');
    expect(response.error?.slice(1).map((e) => e.code.text)).toEqual(['Member search returned 0 results.', 'Dependent search returned 0 results.']);
    expect(response.disposition).toBe(
      'Failed (PatientNotFound): Patient not found. No member matched the subscriber id, name and date of birth. ' +
        'Upstream: Member search returned 0 results; Dependent search returned 0 results. ' +
        'The payer found no such member; check member id, name and birth date.',
    );
    expect(codes(outputOf('failed-unknown-kind').error?.[0]?.code)).toEqual([
      'https://dental-elig.dev/fhir/CodeSystem/verification-failure-kind#CoordinationOfBenefitsRequired',
    ]);
  });

  it('keeps elements this version does not know in unmapped-element', () => {
    const ext = outputOf('completed-full').extension?.find((e) => e.url.endsWith('/unmapped-element'));
    expect(ext?.extension).toEqual([
      { url: 'path', valueString: 'result.missingToothClause' },
      { url: 'value', valueString: JSON.stringify({ applies: true, note: 'Replacement of teeth missing before coverage began is excluded.' }) },
    ]);
  });

  it('charts a result with values it cannot read, saying what was left out and keeping each as sent: an Unlimited maximum is no reason to chart nothing', () => {
    const response = convert({
      correlationId: 'ver-odd',
      status: 'Completed',
      result: {
        plan: { status: 'Active', payer: { name: 'Delta Dental of California' } },
        subscriber: { memberId: 12345678901234567890 },
        data: { maximums: [{ type: 'Annual', amount: 1500 }, { type: 'Lifetime', category: 'Orthodontics', amount: 'Unlimited' }] },
      },
    });
    expect(items(response).map((i) => i.name)).toEqual(['Maximum', 'Maximum']);
    // A number JSON.parse rounded is not quoted where a person reads it: those are not the digits sent.
    expect(response.disposition).toBe('Completed. Plan: Active. Not read, kept with this response as sent: result.subscriber.memberId; result.data.maximums[1].amount "Unlimited".');
    const unmapped = response.extension?.filter((e) => e.url.endsWith('/unmapped-element')).map((e) => e.extension?.map((part) => part.valueString));
    expect(unmapped).toEqual([
      ['result.subscriber.memberId', '12345678901234567000'],
      ['result.data.maximums[1].amount', '"Unlimited"'],
    ]);
    expect(validateR4(response)).toEqual([]);
  });

  it('leaves out whole a limit whose codes or category it cannot read, which would otherwise be charted as a limit on all dental care', () => {
    const response = completedWith({
      frequencies: [
        { procedureCodes: 'D0330', limit: 1, period: 'Months', periodLength: 60 },
        { category: 7, limit: 2, period: 'CalendarYear' },
        { procedureCodes: ['D1110'], limit: 2, period: 'CalendarYear' },
      ],
    });
    // A panoramic x-ray once in 60 months is not dental care once in 60 months.
    expect(items(response).map((i) => [codes(i.category), codes(i.productOrService)])).toEqual([[[], ['http://www.ada.org/cdt#D1110']]]);
    expect(response.disposition).toBe('Completed. Plan: Active. Not read, kept with this response as sent: result.data.frequencies[0]; result.data.frequencies[1].');
    expect(validateR4(response)).toEqual([]);
  });

  it('leaves out whole a benefit entry that says what it is of in an element its kind is not read with, which it would otherwise be charted without', () => {
    const ortho = { type: 'Lifetime', category: 'Orthodontics', amount: 100 };
    const crownsWait = { procedureCodes: ['D2740'], months: 12 };
    const outOfNetwork = { category: 'Preventive', network: 'OutOfNetwork', limit: 1, period: 'CalendarYear' };
    const crown = { procedureCode: 'D2740', percentage: { final: { start: 50, end: 50 } } };
    const response = completedWith({
      deductibles: [{ type: 'Annual', amount: 50 }, ortho],
      waitingPeriods: [crownsWait, { category: 'Major', months: 12, note: 'from the effective date' }],
      frequencies: [outOfNetwork],
      coinsurance: [crown],
    });
    // An orthodontic deductible is not the plan's deductible, a crown's wait not all dental care's, an out-of-network limit not every network's, a crown's 50 % not all care's.
    expect(items(response).map((i) => [i.name, i.category?.text ?? codes(i.category)])).toEqual([
      ['Deductible', ['https://x12.org/codes/service-type-codes#35', 'http://terminology.hl7.org/CodeSystem/ex-benefitcategory#35']],
      ['Waiting period', 'Major'],
    ]);
    expect(response.disposition).toBe(
      'Completed. Plan: Active. Not read, kept with this response as sent: result.data.deductibles[1]; result.data.coinsurance[0]; result.data.frequencies[0]; result.data.waitingPeriods[0].',
    );
    const unmapped = response.extension?.filter((e) => e.url.endsWith('/unmapped-element')).map((e) => e.extension?.map((part) => part.valueString));
    // An element that says nothing of what the entry is of leaves it charted, and is kept beside it as ever.
    expect(unmapped).toEqual([
      ['result.data.waitingPeriods[1].note', '"from the effective date"'],
      ['result.data.deductibles[1]', JSON.stringify(ortho)],
      ['result.data.coinsurance[0]', JSON.stringify(crown)],
      ['result.data.frequencies[0]', JSON.stringify(outOfNetwork)],
      ['result.data.waitingPeriods[0]', JSON.stringify(crownsWait)],
    ]);
    expect(validateR4(response)).toEqual([]);
  });

  it('reads a date written as midnight, as .NET and Java services write dates, or as the day\'s last second, as the day written, and refuses another time of day', () => {
    const body = readResult('completed-full') as { result: { plan: { effectiveDate: string; terminationDate?: string; benefitPeriod: { start: string; end: string } } } };
    body.result.plan.effectiveDate = '2024-01-01T00:00:00';
    body.result.plan.benefitPeriod = { start: '2026-01-01T00:00:00Z', end: '2026-12-31T00:00:00.000-05:00' };
    const response = convert(body);
    const insurance = response.insurance?.[0];
    const planPart = (name: string) => insurance?.extension?.find((e) => e.url.endsWith('/plan'))?.extension?.find((e) => e.url === name)?.valueDate;
    expect([insurance?.benefitPeriod, planPart('effectiveDate')]).toEqual([{ start: '2026-01-01', end: '2026-12-31' }, '2024-01-01']);
    expect(JSON.stringify(response)).not.toMatch(/T00:00/);
    expect(validateR4(response)).toEqual([]);
    // A period's end at its last second, as services that store an inclusive end write it: the benefit year was unreadable.
    for (const end of ['2026-12-31T23:59:59', '2026-12-31T23:59:59.999Z', '2026-12-31T23:59:59.9999999-05:00', '2026-12-31T23:59']) {
      body.result.plan.benefitPeriod = { start: '2026-01-01', end };
      expect(convert(body).insurance?.[0]?.benefitPeriod).toEqual({ start: '2026-01-01', end: '2026-12-31' });
    }
    // Any other time of day is not read: which day it meant depends on a zone the service does not say. It is kept as sent.
    for (const effectiveDate of ['2024-01-01T05:00:00Z', '2024-01-01T23:59:58']) {
      body.result.plan.effectiveDate = effectiveDate;
      const notRead = convert(body);
      expect(notRead.insurance?.[0]?.extension?.find((e) => e.url.endsWith('/plan'))?.extension?.find((e) => e.url === 'effectiveDate')).toBeUndefined();
      expect(notRead.disposition).toContain(`Not read, kept with this response as sent: result.plan.effectiveDate "${effectiveDate}".`);
    }
  });

  it('passes over the nulls of a result\'s lists, naming an entry it refuses by its index as sent', () => {
    const result = (history: unknown[]) => ({
      correlationId: 'ver-nulls',
      status: 'Partial',
      result: { plan: { status: 'Active', payer: { name: 'Delta Dental of California' } }, data: { maximums: [null, { type: 'Annual', amount: 1500 }], history }, contexts: [null, { dataPoint: 'history' }], disclaimers: [null] },
    });
    const response = convert(result([null, { procedureCode: 'D2740', date: '2026-03-02', tooth: 14 }]));
    expect(items(response).map((i) => i.name)).toEqual(['Maximum', 'Service history']);
    expect(response.error?.map((e) => e.code.text)).toEqual(['history was not retrieved']);
    expect(response.disposition).toBe('Partial. Plan: Active. Not retrieved: history.');
    expect(validateR4(response)).toEqual([]);
    expect(convert(result([null, { procedureCode: 'D2740', date: '03/02/2026' }])).disposition).toContain('Not read, kept with this response as sent: result.data.history[1].date "03/02/2026".');
  });

  it('says of a Partial that names nothing not retrieved that it did not say, not reading as complete', () => {
    const partial = (contexts?: unknown[]) => convert({ correlationId: 'ver-partial', status: 'Partial', result: { plan: { status: 'Active', payer: { name: 'Delta Dental of California' } }, ...(contexts && { contexts }) } });
    expect([partial().disposition, partial([]).disposition, partial([null, { detail: ' ' }]).disposition]).toEqual([
      'Partial. Plan: Active. Not retrieved: the service did not say what.',
      'Partial. Plan: Active. Not retrieved: the service did not say what.',
      'Partial. Plan: Active. Not retrieved: unnamed.',
    ]);
  });

  it('charts a result with a date it cannot read, leaving that date out, keeping it as sent and naming it: one past service dated 03/02/2026 is no reason to chart nothing', () => {
    const body = readResult('completed-full') as { result: Record<string, { [key: string]: unknown }> & { data: { history: Array<{ date: string }>; frequencies: Array<{ lastServiceDate: string }> } } };
    body.result.plan = { ...body.result.plan, effectiveDate: '01/01/2024', benefitPeriod: { start: '2026-01-01', end: '12/31/2026' } };
    body.result.patient = { ...body.result.patient, dateOfBirth: '03/14/1978' };
    body.result.data.history[2] = { ...body.result.data.history[2], date: 'Feb 18, 2025' };
    body.result.data.frequencies[0] = { ...body.result.data.frequencies[0], lastServiceDate: '2026-05-12T14:30:00Z' };
    const response = convert(body, RESULT_REFS);
    const whole = convert(readResult('completed-full'));
    expect(items(response).map((i) => i.name)).toEqual(items(whole).map((i) => i.name));
    expect(response.insurance?.[0]?.benefitPeriod).toEqual({ start: '2026-01-01' });
    expect(items(response).find((i) => i.name === 'Frequency limit')?.description).toBe('Prophylaxis twice per calendar year');
    expect(response.disposition).toContain(
      'Not read, kept with this response as sent: result.patient.dateOfBirth "03/14/1978"; result.plan.effectiveDate "01/01/2024"; result.plan.benefitPeriod.end "12/31/2026"; result.data.frequencies[0].lastServiceDate "2026-05-12T14:30:00Z"; result.data.history[2].date "Feb 18, 2025".',
    );
    const unmapped = response.extension?.filter((e) => e.url.endsWith('/unmapped-element')).map((e) => e.extension?.[0]?.valueString);
    expect(unmapped).toEqual(expect.arrayContaining(['result.plan.effectiveDate', 'result.plan.benefitPeriod.end', 'result.patient.dateOfBirth', 'result.data.history[2].date', 'result.data.frequencies[0].lastServiceDate']));
    expect(validateR4(response)).toEqual([]);
  });

  it('moves every extension URL to DENTAL_ELIG_FHIR_EXTENSION_BASE, and local systems to DENTAL_ELIG_FHIR_SYSTEM_BASE', () => {
    const moved = { DENTAL_ELIG_FHIR_EXTENSION_BASE: 'https://fhir.example-clinic.org/StructureDefinition', DENTAL_ELIG_FHIR_SYSTEM_BASE: 'https://fhir.example-clinic.org/' };
    // Both bases are read once, with their mapping files: a fresh registry reads them as a process started with them would.
    freshModules(moved, () => {
      const out = jest.requireActual<typeof import('../../../../src/adapters/fhir/out')>('../../../../src/adapters/fhir/out');
      const outcome = jest.requireActual<typeof import('../../../../src/verification/outcome')>('../../../../src/verification/outcome');
      const response = out.toCoverageEligibilityResponse(outcome.toOutcome(readResult('completed-full')), RESULT_REFS, { created: CREATED });
      const urls = allExtensions(response).map((e) => e.url).filter((u) => u.startsWith('http'));
      expect(urls.length).toBeGreaterThan(20);
      for (const url of urls) expect(url).toMatch(/^https:\/\/fhir\.example-clinic\.org\/StructureDefinition\/[a-z-]+$/);
      expect(response.identifier?.[0]?.system).toBe('https://fhir.example-clinic.org/sid/verification-correlation-id');
    });
  });

  it('stamps created now unless told', () => {
    const before = Date.now();
    const response = toCoverageEligibilityResponse(toOutcome(readResult('pending')), RESULT_REFS);
    expect(Date.parse(response.created)).toBeGreaterThanOrEqual(before - 1000);
    expect(Date.parse(response.created)).toBeLessThanOrEqual(Date.now() + 1000);
  });
});
