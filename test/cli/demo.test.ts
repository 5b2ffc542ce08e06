import { cli } from '../support/cli';
import { annualMaximumLeft } from '../../src/cli/demo';

describe('dental-elig demo (what `npm start` runs)', () => {
  it('runs serve on embedded defaults, feeds it over MLLP and a FHIR notification, and writes every verified check to the chart', async () => {
    const run = await cli(['demo']);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const lines = run.stdout.trim().split('\n');
    expect(lines.filter((l) => l.startsWith('serve   listening: '))).toEqual([
      expect.stringMatching(/^serve {3}listening: mllp 127\.0\.0\.1:\d+$/),
      expect.stringMatching(/^serve {3}listening: http 127\.0\.0\.1:\d+$/),
    ]);
    expect(lines.filter((l) => l.startsWith('fhir'))).toEqual(['fhir    notification for Appointment/appt-4004 -> HTTP 200']);
    expect(lines.filter((l) => l.startsWith('hl7')).map((l) => l.replace(/^hl7 +/, ''))).toEqual([
      'molarpms-siu-s12-two-insurances.hl7: 1 message(s) over MLLP -> ACK AA',
      'carepoint-adt-a04-then-siu-s12.hl7: 2 message(s) over MLLP -> ACK AA, AA',
      'molarpms-siu-s12-member-id-in-zsegment.hl7: 1 message(s) over MLLP -> ACK AA',
      'carepoint-siu-s12-no-insurance-known.hl7: 1 message(s) over MLLP -> ACK AA',
    ]);
    const header = lines.findIndex((l) => l.startsWith('PATIENT'));
    expect(lines[header]).toMatch(/^PATIENT +PAYER +ORDER +MODE +OUTCOME +ANNUAL MAX LEFT +STATE$/);
    const rows = lines.slice(header + 1, header + 7);
    // Initials only; both coverages of the FHIR appointment and of the two-insurance SIU, async and sync payers.
    expect(rows.map((r) => r.split(/\s{2,}/))).toEqual([
      ['M.A.', 'Delta Dental of California', 'primary', 'async', 'completed', expect.stringMatching(/^\$\d{1,3}(,\d{3})*\.\d\d$/), 'written'],
      ['M.A.', 'Aetna Dental', 'secondary', 'async', 'completed', expect.stringMatching(/^\$\d{1,3}(,\d{3})*\.\d\d$/), 'written'],
      ['S.R.', 'Delta Dental of California', 'primary', 'async', 'completed', expect.stringMatching(/^\$\d{1,3}(,\d{3})*\.\d\d$/), 'written'],
      ['S.R.', 'MetLife', 'secondary', 'async', 'completed', expect.stringMatching(/^\$\d{1,3}(,\d{3})*\.\d\d$/), 'written'],
      ['C.O.', 'Cigna Dental', 'primary', 'async', 'completed', expect.stringMatching(/^\$\d{1,3}(,\d{3})*\.\d\d$/), 'written'],
      ['G.H.', 'Guardian', 'primary', 'sync', 'completed', expect.stringMatching(/^\$\d{1,3}(,\d{3})*\.\d\d$/), 'written'],
    ]);
    expect(run.stdout).toContain("1 booking(s) awaiting the patient's insurance");
    expect(run.stdout).toContain('6 of 6 checks written to the chart as CoverageEligibilityResponse.');
    expect(run.stdout).toContain('npx dental-elig jobs list --data-dir .dental-elig/demo');
  });
});

describe("the demo's annual maximum left", () => {
  const result = (maximums: object[]) => ({ result: { correlationId: 'ver-1', status: 'Completed', result: { plan: { status: 'Active' }, data: { maximums } } } });
  const annual = (fields: object) => ({ type: 'Annual', scope: 'Individual', network: 'InNetwork', ...fields });

  it("is the patient's general annual maximum in network, not an orthodontic one listed before it", () => {
    expect(annualMaximumLeft(result([annual({ category: 'Orthodontics', remainingAmount: 900 }), annual({ category: 'General', remainingAmount: 1250 })]))).toBe('$1,250.00');
    expect(annualMaximumLeft(result([annual({ remainingAmount: 400 })]))).toBe('$400.00');
  });

  it('is one by calendar or benefit year too, as the chart codes either annual', () => {
    expect(annualMaximumLeft(result([annual({ type: 'CalendarYear', remainingAmount: 800 })]))).toBe('$800.00');
    expect(annualMaximumLeft(result([annual({ type: 'BenefitYear', category: 'General', remainingAmount: 650 })]))).toBe('$650.00');
  });

  it('is blank where the result gives no such maximum, rather than a lifetime one', () => {
    expect(annualMaximumLeft(result([{ type: 'Lifetime', category: 'Orthodontics', remainingAmount: 1500 }]))).toBe('');
  });
});
