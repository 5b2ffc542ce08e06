import { present, prune } from '../../../../src/adapters/fhir/out/values';

describe('prune (what FHIR does not allow empty is dropped from what is built)', () => {
  it('drops undefined, blank strings, empty arrays and objects left with nothing, at every depth', () => {
    const built = {
      resourceType: 'CoverageEligibilityResponse',
      disposition: ' ',
      insurance: [{ item: [{ network: { text: '' }, name: 'Basic', description: undefined, unit: { coding: [] } }] }],
      note: ['', 'kept', undefined],
    };
    expect(prune(built)).toEqual({ resourceType: 'CoverageEligibilityResponse', insurance: [{ item: [{ name: 'Basic' }] }], note: ['kept'] });
  });

  it('removes the control characters FHIR strings may not hold, keeping tab, line feed and carriage return, and drops a string left blank', () => {
    const built = { disposition: 'Active\u0000 plan\u001b', note: ['line one\r\nline\ttwo', '\u0000\u0007'], name: { text: ' \u0000 ' } };
    expect(prune(built)).toEqual({ disposition: 'Active plan', note: ['line one\r\nline\ttwo'] });
    // The fallbacks a mapping chooses by present() see what prune will leave.
    expect([present('\u0000'), present(' \u0007 '), present('Basic\u0000'), present(null)]).toEqual([undefined, undefined, 'Basic', undefined]);
  });

  it('drops an extension left with neither a value nor extensions, and a complex one left with no parts', () => {
    const built = {
      extension: [
        { url: 'https://x/plan', extension: [{ url: 'name', valueString: '' }, { url: 'group', valueString: '  ' }] },
        { url: 'https://x/network', valueString: 'PPO' },
      ],
      insurance: [{ modifierExtension: [{ url: 'https://x/flag', valueString: '' }], inforce: true }],
    };
    expect(prune(built)).toEqual({ extension: [{ url: 'https://x/network', valueString: 'PPO' }], insurance: [{ inforce: true }] });
  });

  it('keeps what has content as the very same objects, and an element with only a url outside extensions', () => {
    const coding = { system: 'http://terminology.hl7.org/CodeSystem/ex-benefitcategory', code: '35' };
    const attachment = { url: 'https://example.org/plan.pdf' };
    const built = { category: { coding: [coding] }, supportingInfo: [{ valueAttachment: attachment }], allowedMoney: { value: 0, currency: 'USD' }, excluded: false };
    const pruned = prune(built);
    expect(pruned).toBe(built);
    expect(pruned.category.coding[0]).toBe(coding);
  });
});
