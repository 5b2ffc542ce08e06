import { loadClinicRouting, resolveClinic, type ClinicRouting } from '../../src/adapters/clinic-routing';

/** Two clinics that both call a chair OP1, as most dental clinics do. */
const routing: ClinicRouting = {
  defaultClinicId: 'cln_default',
  routes: [
    { clinicId: 'cln_main', hl7Facilities: ['BSD-MAIN'], hl7Locations: ['MAIN', 'OP1'], fhirLocations: ['Location/main'], fhirLocationIdentifiers: [] },
    {
      clinicId: 'cln_north',
      hl7Facilities: ['BSD-NORTH'],
      hl7Locations: ['OP1', 'N-OP2'],
      fhirLocations: ['Location/north'],
      fhirLocationIdentifiers: [{ system: 'urn:clinics', value: 'NORTH' }],
    },
  ],
};

describe('resolveClinic', () => {
  it('takes first a route whose location and facility both match, the facility from MSH-4 or AIL-3.4', () => {
    expect(resolveClinic(routing, { hl7Facilities: ['BSD-NORTH'], hl7Location: 'OP1' })).toBe('cln_north');
    expect(resolveClinic(routing, { hl7Facilities: ['BSD-MAIN', 'BSD-NORTH'], hl7Location: 'N-OP2' })).toBe('cln_north');
    expect(resolveClinic(routing, { hl7Facilities: ['PMS-HQ', 'bsd-north '], hl7Location: 'op1' })).toBe('cln_north');
  });

  it('then a route whose facility matches, over one whose location alone matches', () => {
    expect(resolveClinic(routing, { hl7Facilities: ['BSD-NORTH'], hl7Location: 'MAIN' })).toBe('cln_north');
    expect(resolveClinic(routing, { hl7Facilities: ['BSD-NORTH'] })).toBe('cln_north');
  });

  it('then a route whose location matches, for senders whose MSH-4 names no clinic', () => {
    expect(resolveClinic(routing, { hl7Facilities: ['PMS-HQ'], hl7Location: 'N-OP2' })).toBe('cln_north');
    expect(resolveClinic(routing, { hl7Location: 'MAIN' })).toBe('cln_main');
    // A chair name every clinic has goes to the first route that lists it.
    expect(resolveClinic(routing, { hl7Facilities: ['PMS-HQ'], hl7Location: 'OP1' })).toBe('cln_main');
  });

  it('then the default, or nothing when there is none', () => {
    expect(resolveClinic(routing, { hl7Facilities: ['PMS-HQ'], hl7Location: 'OP9' })).toBe('cln_default');
    expect(resolveClinic(routing, {})).toBe('cln_default');
    const { defaultClinicId: _default, ...withoutDefault } = routing;
    expect(resolveClinic(withoutDefault, { hl7Facilities: ['PMS-HQ'] })).toBeUndefined();
  });

  it('routes FHIR by Location reference or identifier, directly', () => {
    expect(resolveClinic(routing, { fhirLocation: 'Location/north' })).toBe('cln_north');
    expect(resolveClinic(routing, { fhirLocationIdentifiers: [{ system: 'urn:clinics', value: 'NORTH' }] })).toBe('cln_north');
    expect(resolveClinic(routing, { fhirLocationIdentifiers: [{ system: 'urn:other', value: 'NORTH' }] })).toBe('cln_default');
    expect(resolveClinic(routing, { fhirLocation: 'Location/nowhere', fhirLocationIdentifiers: [] })).toBe('cln_default');
  });

  it('routes the shipped mappings/clinics.json: OP1 at BSD-NORTH is the north clinic, whichever field names the facility', () => {
    const shipped = loadClinicRouting();
    expect(resolveClinic(shipped, { hl7Facilities: ['BSD-NORTH'], hl7Location: 'OP1' })).toBe('cln_sandbox_north');
    expect(resolveClinic(shipped, { hl7Facilities: ['BSD-MAIN', 'BSD-NORTH'], hl7Location: 'N-OP1' })).toBe('cln_sandbox_north');
    expect(resolveClinic(shipped, { hl7Facilities: ['BSD-MAIN', 'BSD'], hl7Location: 'OP1' })).toBe('cln_sandbox_main');
    expect(resolveClinic(shipped, { fhirLocation: 'Location/bright-smiles-north' })).toBe('cln_sandbox_north');
  });
});
