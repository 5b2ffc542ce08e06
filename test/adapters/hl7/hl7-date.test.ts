import { readHl7Date } from '../../../src/adapters/hl7/hl7-date';

describe('readHl7Date', () => {
  it.each([
    ['19800101', '1980-01-01'],
    ['20240615093000', '2024-06-15'],
    ['202406152030-0500', '2024-06-15'],
    ['20240615203000.123+0100', '2024-06-15'],
    ['2024061520', '2024-06-15'],
    ['20240229', '2024-02-29'],
    ['20000229', '2000-02-29'],
    ['20241231', '2024-12-31'],
  ])('%s is %s, as written (no time-zone shift)', (value, date) => {
    expect(readHl7Date(value)).toEqual({ ok: true, date });
  });

  it.each(['1980', '198001'])('%s lacks the day', (value) => {
    expect(readHl7Date(value)).toEqual({ ok: false, reason: 'imprecise' });
  });

  it.each(['19870230', '20231301', '1980-01-01', '20240615256000', '20240615236100', 'tomorrow', '18000101', '19000229', '20230229', '20240431', '20240001', '20240100'])('%s is not a valid date', (value) => {
    expect(readHl7Date(value)).toEqual({ ok: false, reason: 'invalid' });
  });
});
