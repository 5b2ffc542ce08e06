import { prune } from '../../../../src/adapters/fhir/out/values';

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
