import { onceASpell, SPELL_MS } from '../../src/once-a-spell';

describe('onceASpell', () => {
  it('says a warning once a spell, and again at the first after a clock stepped back', () => {
    let clock = 10 * 3_600_000;
    const said = onceASpell(() => clock);
    expect(said()).toBe(true);
    clock += SPELL_MS - 1;
    expect(said()).toBe(false);
    clock += 1;
    expect(said()).toBe(true);
    // NTP steps the clock back an hour: the spell was the old clock's, and its warnings would wait for this one to catch up.
    clock -= 3_600_000;
    expect(said()).toBe(true);
    clock += SPELL_MS - 1;
    expect(said()).toBe(false);
  });
});
