import { cli } from '../support/cli';

describe('dental-elig demo (what `npm start` runs)', () => {
  it('runs the whole flow on embedded defaults: setup, FHIR and HL7 in, async and sync verification, validated write-back', async () => {
    const run = await cli(['demo']);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const lines = run.stdout.trim().split('\n');
    const stage = (name: string) => lines.filter((l) => l.startsWith(name.padEnd(10)));
    expect(stage('setup')).toEqual([
      expect.stringMatching(/payer catalog: \d+ payers, \d+ take asynchronous verification$/),
      'setup     credentials of Bright Smiles Dental - Main St on deltadentalins: Valid',
    ]);
    expect(stage('fhir in')).toEqual(['fhir in   Appointment/appt-4004 -> 2 checks (primary: Delta Dental of California; secondary: Aetna Dental)']);
    expect(stage('verify').map((l) => l.replace(/\([0-9a-f-]{36}\)$/, '(id)'))).toEqual([
      'verify    primary: Delta Dental of California: asynchronous, by webhook -> Completed (id)',
      'verify    secondary: Aetna Dental: asynchronous, by webhook -> Completed (id)',
      'verify    primary: Guardian: synchronous -> Completed (id)',
    ]);
    expect(stage('write')).toHaveLength(2);
    for (const line of stage('write')) expect(line).toMatch(/^write {5}CoverageEligibilityRequest\/\S+ \+ CoverageEligibilityResponse\/\S+ \(outcome complete, \d+ benefit items\): validated, written$/);
    expect(stage('hl7 in')).toEqual(['hl7 in    SIU^S12 MP-0003 -> ACK AA, 1 check (primary: Guardian)']);
    expect(lines.at(-1)).toBe('done      every check verified and every eligibility response validated against FHIR R4');
  });
});
