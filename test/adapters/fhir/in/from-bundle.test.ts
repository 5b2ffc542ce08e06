import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { Appointment, Bundle, BundleEntry, FhirResource, HumanName } from 'fhir/r4';
import { loadClinicRouting } from '../../../../src/adapters/clinic-routing';
import { checksFromBundle, convertBundle } from '../../../../src/adapters/fhir/in';
import { FhirInputError } from '../../../../src/adapters/fhir/operation-outcome';
import { EligibilityCheck } from '../../../../src/domain';
import { BUNDLE_DIR, bundleNames, checksOf, convertFixture, readBundle, RECEIVED_AT, testPayers } from '../corpus';

/**
 * Golden files first: every fixtures/fhir/<name>.bundle.json against <name>.expected.json. Then
 * rules over the whole corpus, then one behaviour per test on bundles edited inline.
 */
const names = bundleNames();
const routing = loadClinicRouting();
const convert = (bundle: unknown, options: { appointmentId?: string } = {}) => checksFromBundle(bundle, { routing, receivedAt: RECEIVED_AT, ...options });

/** The fixture as a typed Bundle, to edit one element per test. */
const bundleOf = (name: string) => structuredClone(readBundle(name)) as Bundle;
function resource<T extends FhirResource['resourceType']>(bundle: Bundle, type: T, id?: string): Extract<FhirResource, { resourceType: T }> {
  const found = (bundle.entry ?? []).map((e: BundleEntry) => e.resource).find((r) => r?.resourceType === type && (id === undefined || r.id === id));
  if (!found) throw new Error(`fixture has no ${type} ${id ?? ''}`);
  return found as Extract<FhirResource, { resourceType: T }>;
}
function issuesOf(run: () => unknown): Array<{ expression: string; diagnostics: string }> {
  try {
    run();
  } catch (err) {
    if (err instanceof FhirInputError) return (err.outcome.issue ?? []).map((i) => ({ expression: i.expression?.[0] ?? '', diagnostics: i.diagnostics ?? '' }));
    throw err;
  }
  throw new Error('expected a FhirInputError');
}

describe('each fixture gives its expected output', () => {
  it.each(names)('%s', (name) => {
    const expected = JSON.parse(readFileSync(path.join(BUNDLE_DIR, `${name}.expected.json`), 'utf8')) as unknown;
    expect(convertFixture(name)).toEqual(expected);
  });
});

describe('the corpus', () => {
  const outputs = names.map((n) => ({ name: n, out: convertFixture(n) }));
  const checks = outputs.flatMap(({ out }) => checksOf(out));
  const noted = outputs.flatMap(({ name, out }) => (!Array.isArray(out) && 'notes' in out ? [{ name, ...out }] : []));
  const failed = outputs.flatMap(({ name, out }) => (!Array.isArray(out) && 'issue' in out ? [{ name, out }] : []));

  it('has self, spouse and child coverage, primary plus secondary, self-pay, conversions with notes and bundles that cannot make checks', () => {
    expect(new Set(checks.map((c) => c.subscriber.relationship))).toEqual(new Set(['self', 'spouse', 'child']));
    expect(outputs.some(({ out }) => Array.isArray(out) && out.map((c) => c.coverage.order).join() === 'primary,secondary')).toBe(true);
    expect(outputs.some(({ out }) => Array.isArray(out) && out.length === 0)).toBe(true);
    expect(noted.length).toBeGreaterThanOrEqual(2);
    expect(failed.length).toBeGreaterThanOrEqual(2);
  });

  it('describes every bundle in fixtures/fhir/README.md', () => {
    const readme = readFileSync(path.join(BUNDLE_DIR, 'README.md'), 'utf8');
    for (const name of names) expect({ name, described: readme.includes(`| \`${name}\` |`) }).toEqual({ name, described: true });
  });

  it('makes only checks that validate as EligibilityCheck, from a FHIR source with references', () => {
    for (const check of checks) {
      expect(EligibilityCheck.safeParse(check).success).toBe(true);
      expect(check.source.kind).toBe('fhir');
    }
  });

  it('gives each coverage of an appointment its own order and idempotency key', () => {
    for (const { out } of outputs) {
      const made = checksOf(out);
      expect(new Set(made.map((c) => c.coverage.order)).size).toBe(made.length);
      expect(new Set(made.map((c) => c.idempotencyKey)).size).toBe(made.length);
    }
  });

  it('notes only warnings and information, each naming a Coverage period or the Practitioner, and every check carries the warnings its notes give about it', () => {
    const severities = new Set(noted.flatMap(({ notes }) => (notes.issue ?? []).map((i) => i.severity)));
    expect(severities).toEqual(new Set(['warning', 'information']));
    for (const { checks: made, notes } of noted) {
      for (const issue of notes.issue ?? []) expect(issue.expression?.[0]).toMatch(/^(Coverage\.where\(id='[^']+'\)\.period\.(start|end)|Practitioner\.identifier)$/);
      const aboutChecks = (notes.issue ?? []).filter((i) => i.expression?.[0]?.startsWith('Practitioner')).map((i) => `${i.expression?.[0]}: ${i.diagnostics}`);
      for (const check of made) expect(check.warnings ?? []).toEqual(aboutChecks);
    }
  });

  it('names at least one element in every OperationOutcome and puts no patient data in it', () => {
    for (const { name, out } of [...failed, ...noted.map(({ name, notes }) => ({ name: `error-${name}`, out: notes }))]) {
      expect(out.issue.length).toBeGreaterThan(0);
      const text = JSON.stringify(out);
      for (const patientValue of ['Whitaker', 'Alvarez', 'Ellen', 'Raman', '1978-03-14', '1990-02-17', 'DD1234567', 'W778899001', 'DD3344556', '1234567890']) {
        expect(text).not.toContain(patientValue);
      }
      for (const issue of out.issue) expect(issue.expression?.[0]).toMatch(/^(Patient|Coverage\[\d\]|Coverage\.where\(id='[^']+'\)|Appointment|Location|Practitioner)(\.|$)/);
      expect(name).toMatch(/^error-/);
    }
  });
});

describe('checksFromBundle', () => {
  it('converts the same event twice into the same keys (idempotent), and another date of service into new ones', () => {
    const again = convertFixture('self');
    expect(again).toEqual(convertFixture('self'));
    const moved = bundleOf('self');
    resource(moved, 'Appointment').start = '2026-12-02T09:00:00-08:00';
    expect(convert(moved)[0]?.idempotencyKey).not.toBe((again as EligibilityCheck[])[0]?.idempotencyKey);
  });

  it('takes the date of service as the appointment writes it, in its own offset', () => {
    const late = bundleOf('self');
    resource(late, 'Appointment').start = '2026-12-01T23:30:00-08:00';
    expect(convert(late)[0]?.dateOfService).toBe('2026-12-01');
  });

  it('gives no checks for cancelled, no-show and entered-in-error appointments', () => {
    for (const status of ['cancelled', 'noshow', 'entered-in-error'] as const) {
      const bundle = bundleOf('self');
      resource(bundle, 'Appointment').status = status;
      expect(convert(bundle)).toEqual([]);
    }
  });

  it('verifies booked, pending, arrived and checked-in appointments, and one with no status; proposed, waitlisted and fulfilled ones give no checks', () => {
    const withStatus = (status: Appointment['status'] | undefined) => {
      const bundle = bundleOf('self');
      const appointment = resource(bundle, 'Appointment');
      if (status === undefined) delete (appointment as Partial<Appointment>).status;
      else appointment.status = status;
      return convertBundle(bundle, { routing, receivedAt: RECEIVED_AT });
    };
    for (const status of ['booked', 'pending', 'arrived', 'checked-in', undefined] as const) {
      expect({ status, checks: withStatus(status).checks.length }).toEqual({ status, checks: 1 });
    }
    for (const status of ['proposed', 'waitlist', 'fulfilled', 'cancelled'] as const) expect(withStatus(status)).toEqual({ checks: [], notes: [], unverifiedStatus: status });
  });

  describe('the name in force on the date of service (2026-12-01)', () => {
    const namesOf = (names: HumanName[], fixture = 'self') => {
      const bundle = bundleOf(fixture);
      resource(bundle, 'Patient').name = names;
      return bundle;
    };
    const nameOf = (names: HumanName[]) => {
      const [check] = convert(namesOf(names));
      return [check?.patient.firstName, check?.patient.lastName, check?.subscriber.lastName];
    };

    it('passes over a name whose period ended before the visit or starts after it, whatever its use', () => {
      const maiden = { use: 'official', family: 'Morgan', given: ['Ellen'], period: { start: '1978-03-14', end: '2019-06' } } satisfies HumanName;
      const married = { use: 'official', family: 'Whitaker', given: ['Ellen'], period: { start: '2019-07-01' } } satisfies HumanName;
      expect(nameOf([maiden, married])).toEqual(['Ellen', 'Whitaker', 'Whitaker']);
      const next = { use: 'official', family: 'Brooks', given: ['Ellen'], period: { start: '2026-12-02' } } satisfies HumanName;
      expect(nameOf([next, { family: 'Whitaker', given: ['Ellen'] }])).toEqual(['Ellen', 'Whitaker', 'Whitaker']);
      // A period takes in the whole day, month or year it names.
      expect(nameOf([{ ...maiden, period: { end: '2026-12' } }, married])).toEqual(['Ellen', 'Morgan', 'Morgan']);
      expect(nameOf([{ ...maiden, period: { end: '2026-12-01T08:00:00-08:00' } }, married])).toEqual(['Ellen', 'Morgan', 'Morgan']);
    });

    it('dates a name period bound written as an instant on the practice\'s calendar, as it dates the visit: the patient\'s, the subscriber\'s and the provider\'s', () => {
      const named = (family: string, period: { start?: string; end?: string }) => [{ use: 'official', family, given: ['Ellen'], period }, { family: 'Whitaker', given: ['Ellen'] }] satisfies HumanName[];
      const placed = (timeZone: string, start: string, period: { start?: string; end?: string }) => {
        const bundle = bundleOf('spouse');
        resource(bundle, 'Appointment').start = start;
        resource(bundle, 'Patient').name = named('Morgan', period);
        resource(bundle, 'RelatedPerson').name = named('Morgan', period);
        resource(bundle, 'Practitioner').name = named('Morgan', period);
        const [check] = checksFromBundle(bundle, { routing: { ...routing, timeZone }, receivedAt: RECEIVED_AT });
        return [check?.dateOfService, check?.patient.lastName, check?.subscriber.lastName, check?.provider?.lastName];
      };
      // Auckland (+13): 1 December begins at 11:00 UTC on 30 November; a name that ends half an hour in is in force all that day.
      expect(placed('Pacific/Auckland', '2026-11-30T21:00:00Z', { end: '2026-11-30T11:30:00Z' })).toEqual(['2026-12-01', 'Morgan', 'Morgan', 'Morgan']);
      expect(placed('Pacific/Auckland', '2026-11-30T21:00:00Z', { end: '2026-11-30T10:30:00Z' })).toEqual(['2026-12-01', 'Whitaker', 'Whitaker', 'Whitaker']);
      // Los Angeles (-8): a name that starts at 7 pm on 1 December there, 03:00 UTC on the 2nd, is in force for a visit that morning.
      expect(placed('America/Los_Angeles', '2026-12-01T17:00:00Z', { start: '2026-12-02T03:00:00Z' })).toEqual(['2026-12-01', 'Morgan', 'Morgan', 'Morgan']);
      expect(placed('America/Los_Angeles', '2026-12-01T17:00:00Z', { start: '2026-12-02T08:00:00Z' })).toEqual(['2026-12-01', 'Whitaker', 'Whitaker', 'Whitaker']);
    });

    it('prefers official, then usual, then a name with no use, and never an old one', () => {
      const named = (family: string, use?: HumanName['use']) => ({ ...(use && { use }), family, given: ['Ellen'] });
      expect(nameOf([named('Nick', 'nickname'), named('Plain'), named('Usual', 'usual'), named('Official', 'official')])).toEqual(['Ellen', 'Official', 'Official']);
      expect(nameOf([named('Nick', 'nickname'), named('Plain'), named('Usual', 'usual')])).toEqual(['Ellen', 'Usual', 'Usual']);
      expect(nameOf([named('Nick', 'nickname'), named('Plain')])).toEqual(['Ellen', 'Plain', 'Plain']);
      expect(nameOf([named('Old', 'old'), named('Nick', 'nickname')])).toEqual(['Ellen', 'Nick', 'Nick']);
    });

    it('names the patient\'s name as missing when none is in force, and a period bound that is no date', () => {
      // The spouse's patient is not the subscriber, so the patient's name is read once.
      const ended = { use: 'official', family: 'Whitaker', given: ['James'], period: { end: '2026-12-02' } } satisfies HumanName;
      expect(issuesOf(() => convert(namesOf([ended, { use: 'old', family: 'Whitaker', given: ['James'] }], 'spouse')))).toEqual([
        { expression: 'Patient.name', diagnostics: 'required: a name in force on the date of service (each given is old, ended or not yet started)' },
      ]);
      expect(issuesOf(() => convert(namesOf([{ ...ended, period: { start: '2027-01-01' } }], 'spouse')))).toEqual([
        { expression: 'Patient.name', diagnostics: 'required: a name in force on the date of service (each given is old, ended or not yet started)' },
      ]);
      expect(issuesOf(() => convert(namesOf([], 'spouse')))).toEqual([{ expression: 'Patient.name', diagnostics: 'required: a current name with family and given' }]);
      expect(issuesOf(() => convert(namesOf([{ ...ended, period: { end: 'last June' } }], 'spouse')))).toEqual([
        { expression: 'Patient.name[0].period.end', diagnostics: 'must be a FHIR dateTime (YYYY, YYYY-MM, YYYY-MM-DD or with a time and offset)' },
      ]);
    });

    it('takes the subscriber\'s name in force too', () => {
      const bundle = bundleOf('spouse');
      resource(bundle, 'RelatedPerson').name = [
        { use: 'official', family: 'Morgan', given: ['Ellen'], period: { end: '2019-06-30' } },
        { use: 'official', family: 'Whitaker', given: ['Ellen'], period: { start: '2019-07-01' } },
      ];
      expect(convert(bundle)[0]?.subscriber).toMatchObject({ firstName: 'Ellen', lastName: 'Whitaker' });
    });
  });

  it('verifies only active coverages: a cancelled one is left out', () => {
    const bundle = bundleOf('self');
    resource(bundle, 'Coverage').status = 'cancelled';
    expect(convert(bundle)).toEqual([]);
  });

  it('orders coverages by Coverage.order, and gives unordered ones the ranks left', () => {
    const bundle = bundleOf('primary-secondary');
    delete resource(bundle, 'Coverage', 'cov-marco-delta').order;
    const checks = convert(bundle);
    expect(checks.map((c) => [c.source.kind === 'fhir' ? c.source.coverage : '', c.coverage.order])).toEqual([
      ['Coverage/cov-marco-aetna', 'secondary'],
      ['Coverage/cov-marco-delta', 'primary'],
    ]);
  });

  it('names coverages by rank, so a gap in Coverage.order closes up as HL7 IN1-22 does', () => {
    const bundle = bundleOf('primary-secondary');
    resource(bundle, 'Coverage', 'cov-marco-aetna').order = 3;
    expect(convert(bundle).map((c) => c.coverage.order)).toEqual(['primary', 'secondary']);
  });

  it('refuses two coverages claiming the same order, and an order that is no positive whole number', () => {
    const bundle = bundleOf('primary-secondary');
    resource(bundle, 'Coverage', 'cov-marco-aetna').order = 1;
    expect(issuesOf(() => convert(bundle))).toEqual([{ expression: 'Coverage[1].order', diagnostics: 'another active coverage of this patient has order 1' }]);
    resource(bundle, 'Coverage', 'cov-marco-aetna').order = 0;
    expect(issuesOf(() => convert(bundle))).toEqual([{ expression: 'Coverage[0].order', diagnostics: 'must be a positive whole number' }]);
  });

  it('names each problem with a patient who is their own subscriber once, however many coverages name them', () => {
    const bundle = bundleOf('self');
    const patient = resource(bundle, 'Patient');
    patient.name = [{ use: 'official', given: ['Ellen'] }];
    patient.birthDate = '1980-05';
    const second = { ...resource(bundle, 'Coverage'), id: 'cov-ellen-second', order: 2 };
    bundle.entry = [...(bundle.entry ?? []), { fullUrl: 'https://ehr.example.org/fhir/R4/Coverage/cov-ellen-second', resource: second }];
    expect(issuesOf(() => convert(bundle))).toEqual([
      { expression: 'Patient.name.family', diagnostics: 'required' },
      { expression: 'Patient.birthDate', diagnostics: 'must be a full date (YYYY-MM-DD)' },
    ]);
    // With no Coverage.subscriber the patient is the subscriber too.
    for (const coverage of (bundle.entry ?? []).map((e) => e.resource).filter((r) => r?.resourceType === 'Coverage')) delete (coverage as { subscriber?: unknown }).subscriber;
    expect(issuesOf(() => convert(bundle))).toEqual([
      { expression: 'Patient.name.family', diagnostics: 'required' },
      { expression: 'Patient.birthDate', diagnostics: 'must be a full date (YYYY-MM-DD)' },
    ]);
  });

  it('refuses a birth date its month does not have, as HL7 does, rather than verify a patient no payer holds', () => {
    const bundle = bundleOf('self');
    resource(bundle, 'Patient').birthDate = '1978-02-30';
    expect(issuesOf(() => convert(bundle))).toEqual([{ expression: 'Patient.birthDate', diagnostics: 'must be a day the calendar has (YYYY-MM-DD)' }]);
    // A leap year's 29 February is a day.
    resource(bundle, 'Patient').birthDate = '1980-02-29';
    expect(convert(bundle)[0]?.subscriber.birthDate).toBe('1980-02-29');
  });

  it('refuses a relationship of self when the subscriber is another person', () => {
    const bundle = bundleOf('primary-secondary');
    resource(bundle, 'Coverage', 'cov-marco-aetna').relationship = { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/subscriber-relationship', code: 'self' }] };
    expect(issuesOf(() => convert(bundle))).toEqual([{ expression: 'Coverage[1].relationship', diagnostics: 'is self, but Coverage.subscriber is another person' }]);
  });

  it('maps subscriber-relationship and v3 RoleCode codes through mappings/fhir/subscriber-relationship.json', () => {
    const bundle = bundleOf('primary-secondary');
    const coverage = resource(bundle, 'Coverage', 'cov-marco-aetna');
    const relationshipAs = (system: string, code: string) => {
      coverage.relationship = { coding: [{ system, code }] };
      return convert(bundle)[1]?.subscriber.relationship;
    };
    expect(relationshipAs('http://terminology.hl7.org/CodeSystem/subscriber-relationship', 'common')).toBe('other');
    expect(relationshipAs('http://terminology.hl7.org/CodeSystem/subscriber-relationship', 'parent')).toBe('other');
    expect(relationshipAs('http://terminology.hl7.org/CodeSystem/v3-RoleCode', 'HUSB')).toBe('spouse');
    expect(relationshipAs('http://terminology.hl7.org/CodeSystem/v3-RoleCode', 'STPCHLD')).toBe('child');
  });

  it('needs a relationship when the subscriber is someone else', () => {
    const bundle = bundleOf('primary-secondary');
    delete resource(bundle, 'Coverage', 'cov-marco-aetna').relationship;
    expect(issuesOf(() => convert(bundle))).toEqual([{ expression: 'Coverage[1].relationship', diagnostics: 'required when the subscriber is not the patient' }]);
  });

  it('needs the subscriber when the relationship says it is someone else', () => {
    const bundle = bundleOf('child');
    delete resource(bundle, 'Coverage').subscriber;
    expect(issuesOf(() => convert(bundle))).toEqual([{ expression: 'Coverage[0].subscriber', diagnostics: 'required when the relationship is child' }]);
  });

  it('ignores another patient\'s coverage even when it is malformed', () => {
    const bundle = bundleOf('primary-secondary');
    (resource(bundle, 'Coverage', 'cov-other-patient') as unknown as { order: unknown }).order = 'first';
    expect(convert(bundle)).toHaveLength(2);
    (resource(bundle, 'Coverage', 'cov-marco-aetna') as unknown as { order: unknown }).order = 'second';
    expect(issuesOf(() => convert(bundle))).toEqual([{ expression: 'Bundle.entry[3].resource.order', diagnostics: 'Invalid input: expected number, received string' }]);
  });

  it('takes the member id from an identifier typed MB when there is no subscriberId', () => {
    const bundle = bundleOf('self');
    const coverage = resource(bundle, 'Coverage');
    delete coverage.subscriberId;
    coverage.identifier = [{ type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'MB' }] }, value: 'MB-778' }];
    expect(convert(bundle)[0]?.subscriber.memberId).toBe('MB-778');
    coverage.identifier = [];
    expect(issuesOf(() => convert(bundle))).toEqual([{ expression: 'Coverage[0].subscriberId', diagnostics: 'required (or an identifier typed v2-0203#MB)' }]);
  });

  it('names the subscriber elements that are missing, by FHIRPath through resolve()', () => {
    const bundle = bundleOf('primary-secondary');
    resource(bundle, 'RelatedPerson', 'rp-sofia').name = [{ given: ['Sofia'] }];
    resource(bundle, 'RelatedPerson', 'rp-sofia').birthDate = '1987-04';
    expect(issuesOf(() => convert(bundle))).toEqual([
      { expression: 'Coverage[1].subscriber.resolve().name.family', diagnostics: 'required' },
      { expression: 'Coverage[1].subscriber.resolve().birthDate', diagnostics: 'must be a full date (YYYY-MM-DD)' },
    ]);
  });

  it('refuses a patient or a subscriber born after the date of service, the day itself allowed', () => {
    const bundle = bundleOf('primary-secondary');
    const visit = convert(bundle)[0]?.dateOfService ?? '';
    resource(bundle, 'Patient').birthDate = visit;
    expect(convert(bundle)[0]?.patient.birthDate).toBe(visit);
    resource(bundle, 'Patient').birthDate = '2062-01-02';
    resource(bundle, 'RelatedPerson', 'rp-sofia').birthDate = '2079-03-03';
    expect(issuesOf(() => convert(bundle))).toEqual([
      { expression: 'Patient.birthDate', diagnostics: `is after the date of service, ${visit}` },
      { expression: 'Coverage[1].subscriber.resolve().birthDate', diagnostics: `is after the date of service, ${visit}` },
    ]);
  });

  it('reports a subscriber or payor reference the bundle cannot resolve', () => {
    const bundle = bundleOf('primary-secondary');
    resource(bundle, 'Coverage', 'cov-marco-aetna').subscriber = { reference: 'RelatedPerson/nobody' };
    resource(bundle, 'Coverage', 'cov-marco-delta').payor = [{ reference: 'Organization/gone' }];
    expect(issuesOf(() => convert(bundle))).toEqual([
      { expression: 'Coverage[0].payor[0]', diagnostics: 'references Organization/gone, which the bundle does not hold' },
      { expression: 'Coverage[1].subscriber', diagnostics: 'references RelatedPerson/nobody, which the bundle does not hold' },
    ]);
  });

  it('skips self-pay coverages and gives [] for a patient with no insurance, however incomplete the patient', () => {
    expect(convertFixture('self-pay')).toEqual([]);
    const bundle = bundleOf('self-pay');
    delete resource(bundle, 'Patient').birthDate;
    expect(convert(bundle)).toEqual([]);
  });

  it('names the payer from a contained Organization, or from a logical reference with identifier and display', () => {
    const child = convertFixture('child') as EligibilityCheck[];
    expect(child[0]?.coverage.payer).toEqual({ name: 'Cigna Dental', id: '62308' });
    const spouse = convertFixture('spouse') as EligibilityCheck[];
    expect(spouse[0]?.coverage.payer).toEqual({ name: 'MetLife', id: '65978' });
  });

  it('prefers the payer id in the plugin system, then by identifier type, then NAIC, then any identifier', () => {
    const bundle = bundleOf('self');
    const org = resource(bundle, 'Organization');
    expect(convert(bundle)[0]?.coverage.payer.id).toBe('CDCA1');
    org.identifier = [
      { system: 'https://example.org/other', value: 'X1' },
      { system: 'urn:oid:2.16.840.1.113883.6.300', value: '54305' },
      { type: { coding: [{ system: 'http://terminology.hl7.org/CodeSystem/v2-0203', code: 'NIIP' }] }, value: 'NIIP9' },
    ];
    expect(convert(bundle)[0]?.coverage.payer.id).toBe('NIIP9');
    org.identifier = org.identifier.slice(0, 2);
    expect(convert(bundle)[0]?.coverage.payer.id).toBe('54305');
    org.identifier = org.identifier.slice(0, 1);
    expect(convert(bundle)[0]?.coverage.payer.id).toBe('X1');
  });

  it('routes the clinic by Location reference, by Location identifier, or else to the default clinic', () => {
    expect((convertFixture('self') as EligibilityCheck[])[0]?.clinicId).toBe('cln_sandbox_main');
    expect((convertFixture('child') as EligibilityCheck[])[0]?.clinicId).toBe('cln_sandbox_north');
    const bundle = bundleOf('self');
    resource(bundle, 'Appointment').participant = resource(bundle, 'Appointment').participant.filter((p) => !p.actor?.reference?.startsWith('Location/'));
    expect(convert(bundle)[0]?.clinicId).toBe(routing.defaultClinicId);
    const strict = { ...routing, defaultClinicId: undefined };
    expect(() => checksFromBundle(bundle, { routing: strict, receivedAt: RECEIVED_AT })).toThrow(
      'Appointment.participant: no Location participant, and mappings/clinics.json has no defaultClinicId',
    );
  });

  it('dates a visit written in UTC in the practice\'s time zone, a clinic\'s own over the file\'s, and as written when none is set', () => {
    // 5 pm in California, as an EHR that writes appointment times in UTC sends it; the plan ends that day.
    const bundle = bundleOf('self');
    resource(bundle, 'Appointment').start = '2026-12-01T01:00:00Z';
    resource(bundle, 'Coverage').period = { start: '2025-01-01', end: '2026-11-30' };
    const dated = (zones: { file?: string; main?: string }) => {
      const zoned = { ...routing, ...(zones.file && { timeZone: zones.file }), routes: routing.routes.map((r) => (r.clinicId === 'cln_sandbox_main' && zones.main ? { ...r, timeZone: zones.main } : r)) };
      const { checks, notes } = convertBundle(bundle, { routing: zoned, receivedAt: RECEIVED_AT });
      return { dates: checks.map((c) => c.dateOfService), notes: notes.map((n) => n.expression) };
    };
    expect(dated({ file: 'America/Los_Angeles' })).toEqual({ dates: ['2026-11-30'], notes: [] });
    expect(dated({ file: 'America/New_York', main: 'America/Los_Angeles' })).toEqual({ dates: ['2026-11-30'], notes: [] });
    // Where it is already the next day, or with no zone set: December 1, when the plan has ended.
    expect(dated({ file: 'America/Los_Angeles', main: 'Europe/Berlin' }).dates).toEqual([]);
    expect(dated({}).dates).toEqual([]);
  });

  it('reads a Coverage.period bound written as an instant on the practice\'s calendar, as it dates the visit', () => {
    // A chart that writes times in UTC: 9 am in Chicago on 1 December, the plan's days bounded by Chicago's midnights.
    const placed = (timeZone: string | undefined, start: string, period: { start?: string; end?: string }) => {
      const bundle = bundleOf('self');
      resource(bundle, 'Appointment').start = start;
      resource(bundle, 'Coverage').period = period;
      const { checks, notes } = convertBundle(bundle, { routing: timeZone ? { ...routing, timeZone } : routing, receivedAt: RECEIVED_AT });
      return { dates: checks.map((c) => c.dateOfService), notes: notes.map((n) => n.diagnostics) };
    };
    const visit = '2026-12-01T15:00:00Z';
    // Ended with 30 November, at 23:59:59 in Chicago: 05:59:59 on 1 December in UTC.
    expect(placed('America/Chicago', visit, { start: '2020-01-01T06:00:00.000Z', end: '2026-12-01T05:59:59.000Z' })).toEqual({
      dates: [],
      notes: ['ended before the date of service, though active: not verified'],
    });
    // Begins on 2 December at Chicago's midnight.
    expect(placed('America/Chicago', visit, { start: '2026-12-02T06:00:00.000Z' })).toEqual({ dates: [], notes: ['starts after the date of service: no check'] });
    // In force from 1 December's first instant to its last there.
    expect(placed('America/Chicago', visit, { start: '2026-12-01T06:00:00.000Z', end: '2026-12-02T05:59:59.000Z' })).toEqual({ dates: ['2026-12-01'], notes: [] });
    // Auckland (+13): 2 December begins at 11:00 UTC on the 1st, after a visit at 10 am on its 1 December.
    expect(placed('Pacific/Auckland', '2026-11-30T21:00:00Z', { start: '2026-12-01T11:00:00Z' })).toEqual({ dates: [], notes: ['starts after the date of service: no check'] });
    // Where no zone is set, the visit and the bounds are dated as written alike.
    expect(placed(undefined, visit, { end: '2026-12-01T05:59:59.000Z' })).toEqual({ dates: ['2026-12-01'], notes: [] });
    // A date kept with a time at its day's edge (a date column rendered in UTC) is that day, not Chicago's day before.
    expect(placed('America/Chicago', visit, { start: '2026-01-01T00:00:00Z', end: '2026-12-01T00:00:00.000Z' })).toEqual({ dates: ['2026-12-01'], notes: [] });
    expect(placed('America/Chicago', visit, { end: '2026-11-30T23:59:59Z' })).toEqual({ dates: [], notes: ['ended before the date of service, though active: not verified'] });
  });

  it('refuses a start on a day the calendar lacks, rather than verify the day Date.parse makes of it', () => {
    const bundle = bundleOf('self');
    const zoned = { ...routing, timeZone: 'America/Los_Angeles' };
    for (const start of ['2027-02-29T09:00:00-08:00', '2026-04-31T17:00:00Z', '2026-02-30']) {
      resource(bundle, 'Appointment').start = start;
      for (const options of [{ routing }, { routing: zoned }]) {
        expect(issuesOf(() => convertBundle(bundle, { ...options, receivedAt: RECEIVED_AT }))).toContainEqual({ expression: 'Appointment.start', diagnostics: 'must be a date-time' });
      }
    }
    resource(bundle, 'Appointment').start = '2028-02-29T09:00:00-08:00';
    expect(convertBundle(bundle, { routing: zoned, receivedAt: RECEIVED_AT }).checks.map((c) => c.dateOfService)).toEqual(['2028-02-29']);
  });

  it('reads the provider NPI (check digit verified) and tax id from the Practitioner', () => {
    expect((convertFixture('self') as EligibilityCheck[])[0]?.provider).toEqual({ npi: '1234567893', taxId: '94-1234567', firstName: 'Grace', lastName: 'Chen' });
  });

  it('verifies without an NPI that is not ten digits or fails the check digit, warning in the check and in the notes', () => {
    for (const value of ['1234567890', '123456789', 'NPI-1']) {
      const bundle = bundleOf('self');
      resource(bundle, 'Practitioner').identifier = [{ system: 'http://hl7.org/fhir/sid/us-npi', value }];
      const { checks: [check], notes } = convertBundle(bundle, { routing, receivedAt: RECEIVED_AT });
      const diagnostics = 'the us-npi identifier is not a valid NPI (10 digits with a check digit): verified without it';
      expect(check?.provider).toEqual({ firstName: 'Grace', lastName: 'Chen' });
      expect(check?.warnings).toEqual([`Practitioner.identifier: ${diagnostics}`]);
      expect(notes).toEqual([{ expression: 'Practitioner.identifier', diagnostics, code: 'value', severity: 'warning' }]);
    }
  });

  it('verifies the first of two patients booked in one appointment, warning in each check and in the notes that the other is not', () => {
    const single = convertBundle(bundleOf('self'), { routing, receivedAt: RECEIVED_AT });
    const bundle = bundleOf('self');
    const appointment = resource(bundle, 'Appointment');
    // A family booked in one slot: the second patient by reference alone, as a chart may send it.
    appointment.participant = [...appointment.participant, { actor: { reference: 'Patient/second-child' }, status: 'accepted' }];
    const { checks, notes } = convertBundle(bundle, { routing, receivedAt: RECEIVED_AT });
    const diagnostics = 'names 2 patients: only the first is verified; give each patient an appointment of their own';
    expect(checks.map((c) => [c.idempotencyKey, c.source.kind === 'fhir' && c.source.patient])).toEqual(single.checks.map((c) => [c.idempotencyKey, c.source.kind === 'fhir' && c.source.patient]));
    for (const check of checks) expect(check.warnings).toEqual([`Appointment.participant: ${diagnostics}`]);
    expect(notes).toEqual([{ expression: 'Appointment.participant', diagnostics, code: 'not-supported', severity: 'warning' }]);
    // The same patient named twice (as patient and as attendee, say) is one patient: no warning.
    const twice = bundleOf('self');
    const booked = resource(twice, 'Appointment');
    booked.participant = [...booked.participant, { actor: { reference: 'Patient/pat-ellen' }, status: 'accepted' }];
    expect(convertBundle(twice, { routing, receivedAt: RECEIVED_AT }).notes).toEqual([]);
  });

  it('verifies the patient a merged record was replaced by (Patient.link replaced-by), under that patient\'s coverages', () => {
    const single = convertBundle(bundleOf('self'), { routing, receivedAt: RECEIVED_AT });
    // The EHR merged a duplicate into Ellen's record: the appointment still names the duplicate, inactive now.
    const bundle = bundleOf('self');
    const duplicate = { resourceType: 'Patient' as const, id: 'pat-ellen-dup', active: false, name: [{ family: 'Dup', given: ['Ellen'] }], link: [{ other: { reference: 'Patient/pat-ellen' }, type: 'replaced-by' as const }] };
    bundle.entry = [...(bundle.entry ?? []), { resource: duplicate }];
    const appointment = resource(bundle, 'Appointment');
    appointment.participant = appointment.participant.map((p) => (p.actor?.reference === 'Patient/pat-ellen' ? { ...p, actor: { reference: 'Patient/pat-ellen-dup' } } : p));
    const { checks, notes, patient } = convertBundle(bundle, { routing, receivedAt: RECEIVED_AT });
    expect(checks).toEqual(single.checks);
    expect([notes, patient]).toEqual([[], 'Patient/pat-ellen']);
    // A successor the bundle does not hold, or records replacing each other, are named rather than verified as the old record.
    duplicate.link = [{ other: { reference: 'Patient/pat-gone' }, type: 'replaced-by' }];
    expect(issuesOf(() => convertBundle(bundle, { routing, receivedAt: RECEIVED_AT }))).toEqual([
      { expression: "Patient.link.where(type='replaced-by').other", diagnostics: 'references Patient/pat-gone, which the bundle does not hold' },
    ]);
    duplicate.link = [{ other: { reference: 'Patient/pat-ellen-dup' }, type: 'replaced-by' }];
    expect(issuesOf(() => convertBundle(bundle, { routing, receivedAt: RECEIVED_AT }))).toEqual([
      { expression: "Patient.link.where(type='replaced-by')", diagnostics: 'more than 5 merges in a row: records replacing each other' },
    ]);
  });

  it('follows a chain of exactly 5 merges to the patient, and refuses a sixth', () => {
    const single = convertBundle(bundleOf('self'), { routing, receivedAt: RECEIVED_AT });
    /** The appointment names dup-1, merged into dup-2, and so on: `merges` links end at Ellen's record. */
    const chained = (merges: number) => {
      const bundle = bundleOf('self');
      const next = (n: number) => (n === merges ? 'Patient/pat-ellen' : `Patient/dup-${n + 1}`);
      const duplicates = Array.from({ length: merges }, (_, i) => ({ resourceType: 'Patient' as const, id: `dup-${i + 1}`, active: false, link: [{ other: { reference: next(i + 1) }, type: 'replaced-by' as const }] }));
      bundle.entry = [...(bundle.entry ?? []), ...duplicates.map((d) => ({ resource: d }))];
      const appointment = resource(bundle, 'Appointment');
      appointment.participant = appointment.participant.map((p) => (p.actor?.reference === 'Patient/pat-ellen' ? { ...p, actor: { reference: 'Patient/dup-1' } } : p));
      return bundle;
    };
    const five = convertBundle(chained(5), { routing, receivedAt: RECEIVED_AT });
    expect([five.checks, five.patient]).toEqual([single.checks, 'Patient/pat-ellen']);
    expect(issuesOf(() => convertBundle(chained(6), { routing, receivedAt: RECEIVED_AT }))).toEqual([
      { expression: "Patient.link.where(type='replaced-by')", diagnostics: 'more than 5 merges in a row: records replacing each other' },
    ]);
  });

  describe('Coverage.period against the date of service (2026-12-01)', () => {
    const periodOf = (period: { start?: string; end?: string }) => {
      const bundle = bundleOf('self');
      resource(bundle, 'Coverage').period = period;
      return convertBundle(bundle, { routing, receivedAt: RECEIVED_AT });
    };
    const START = "Coverage.where(id='cov-ellen-delta').period.start";
    const END = "Coverage.where(id='cov-ellen-delta').period.end";

    it.each([
      [{ start: '2026-01-01', end: '2026-12-31' }],
      [{ start: '2026-12-01' }],
      [{ end: '2026-12-01' }],
      [{ start: '2026-12', end: '2026-12' }],
      [{ start: '2026', end: '2026' }],
      [{ start: '2026-12-01T00:00:00-08:00', end: '2026-12-01T23:59:59-08:00' }],
    ])('verifies a coverage in force that day: %j', (period) => {
      expect(periodOf(period)).toMatchObject({ checks: [{ dateOfService: '2026-12-01' }], notes: [] });
    });

    it('makes no check for one that starts later, saying so as information', () => {
      for (const start of ['2026-12-02', '2027', '2027-01', '2026-12-02T00:00:00Z']) {
        expect(periodOf({ start })).toEqual({
          checks: [],
          notes: [{ expression: START, diagnostics: 'starts after the date of service: no check', code: 'informational', severity: 'information' }],
          patient: 'Patient/pat-ellen',
          // Active, though not in force that day: the patient has it still, its plan not dropped (ingest's endGoneCoverages).
          coverages: ['Coverage/cov-ellen-delta'],
          dateOfService: '2026-12-01',
          clinicId: 'cln_sandbox_main',
        });
      }
    });

    it('does not verify one that ended, though its status is active, saying so as a warning', () => {
      for (const end of ['2026-11-30', '2026-11', '2025']) {
        expect(periodOf({ start: '2020-01-01', end })).toEqual({
          checks: [],
          notes: [{ expression: END, diagnostics: 'ended before the date of service, though active: not verified', code: 'business-rule', severity: 'warning' }],
          patient: 'Patient/pat-ellen',
          // Active, though not in force that day: the patient has it still, its plan not dropped (ingest's endGoneCoverages).
          coverages: ['Coverage/cov-ellen-delta'],
          dateOfService: '2026-12-01',
          clinicId: 'cln_sandbox_main',
        });
      }
    });

    it('refuses a period bound that is not a dateTime, naming it', () => {
      expect(issuesOf(() => periodOf({ end: '31/12/2026' }))).toEqual([
        { expression: END, diagnostics: 'must be a FHIR dateTime (YYYY, YYYY-MM, YYYY-MM-DD or with a time and offset)' },
      ]);
    });

    it('names a coverage without an id by its Bundle entry', () => {
      const bundle = bundleOf('self');
      const coverage = resource(bundle, 'Coverage');
      coverage.period = { end: '2026-01-31' };
      delete coverage.id;
      expect(convertBundle(bundle, { routing, receivedAt: RECEIVED_AT }).notes[0]?.expression).toBe('Bundle.entry[2].resource.period.end');
    });

    it('gives the coverages left the positions they rank in: an ended primary leaves the secondary primary', () => {
      const bundle = bundleOf('primary-secondary');
      resource(bundle, 'Coverage', 'cov-marco-delta').period = { end: '2026-06-30' };
      const { checks } = convertBundle(bundle, { routing, receivedAt: RECEIVED_AT });
      expect(checks.map((c) => [c.source.kind === 'fhir' ? c.source.coverage : '', c.coverage.order])).toEqual([['Coverage/cov-marco-aetna', 'primary']]);
    });
  });

  it('carries the payer resolution when a resolver is given', () => {
    expect((convertFixture('self', testPayers) as EligibilityCheck[])[0]?.coverage.resolution).toMatchObject({ status: 'resolved', commonPayerId: 'CDCA1' });
    expect((convertFixture('child', testPayers) as EligibilityCheck[])[0]?.coverage.resolution?.status).toBe('ambiguous');
    expect((convertFixture('spouse', testPayers) as EligibilityCheck[])[0]?.coverage.resolution).toEqual({ status: 'unknown' });
  });

  it('needs appointmentId to choose among several appointments, and finds the one named', () => {
    const bundle = bundleOf('self');
    const second = structuredClone(resource(bundle, 'Appointment'));
    second.id = 'appt-1002';
    second.start = '2026-12-09T09:00:00-08:00';
    bundle.entry?.push({ resource: second });
    expect(issuesOf(() => convert(bundle))).toEqual([{ expression: 'Appointment', diagnostics: 'the bundle holds 2 Appointments: name the one to verify' }]);
    expect(convert(bundle, { appointmentId: 'appt-1002' })[0]?.dateOfService).toBe('2026-12-09');
    expect(issuesOf(() => convert(bundle, { appointmentId: 'appt-9' }))[0]?.diagnostics).toBe('the bundle holds no Appointment with id appt-9');
  });

  it('reports elements of the wrong JSON type by path instead of failing', () => {
    const bundle = bundleOf('self');
    (resource(bundle, 'Patient') as unknown as { name: unknown }).name = 'Ellen Whitaker';
    expect(issuesOf(() => convert(bundle))).toEqual([{ expression: 'Patient.name', diagnostics: 'Invalid input: expected array, received string' }]);
    expect(issuesOf(() => convert({ resourceType: 'Patient' }))).toEqual([{ expression: 'Bundle.resourceType', diagnostics: 'must be "Bundle"' }]);
  });

  it('needs a Patient participant and an appointment start', () => {
    const bundle = bundleOf('self');
    const appointment = resource(bundle, 'Appointment');
    delete appointment.start;
    appointment.participant = appointment.participant.filter((p) => !p.actor?.reference?.startsWith('Patient/'));
    expect(issuesOf(() => convert(bundle))).toEqual([
      { expression: 'Appointment.start', diagnostics: 'required' },
      { expression: 'Appointment.participant', diagnostics: 'required: a participant whose actor is the Patient' },
    ]);
  });

  it('refuses a receivedAt that is not an instant with offset', () => {
    expect(() => checksFromBundle(readBundle('self'), { routing, receivedAt: '2026-11-20 15:00' })).toThrow(FhirInputError);
  });
});
