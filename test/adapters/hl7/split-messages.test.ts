import { splitMessages } from '../../../src/adapters/hl7';

const msh = (id: string) => `MSH|^~\\&|PMS|FAC|E|B|2024||SIU^S12|${id}|P|2.5.1`;

describe('splitMessages', () => {
  it('splits messages written one after another, whatever the line endings', () => {
    const text = [msh('1'), 'PID|1', msh('2'), 'PID|2', 'IN1|1'].join('\r\n');
    expect(splitMessages(text)).toEqual([`${msh('1')}\rPID|1`, `${msh('2')}\rPID|2\rIN1|1`]);
  });

  it('drops file and batch envelopes', () => {
    const text = ['FHS|^~\\&|PMS', 'BHS|^~\\&|PMS', msh('1'), 'PID|1', msh('2'), 'PID|2', 'BTS|2', 'FTS|1'].join('\n');
    expect(splitMessages(text)).toEqual([`${msh('1')}\rPID|1`, `${msh('2')}\rPID|2`]);
  });

  it('keeps lines before the first MSH as a message of their own, so they are rejected, not lost', () => {
    expect(splitMessages(`junk line\n${msh('1')}\nPID|1`)).toEqual(['junk line', `${msh('1')}\rPID|1`]);
  });

  it('finds nothing in an empty or blank text', () => {
    expect(splitMessages('\r\n \n')).toEqual([]);
  });
});
