import { Hl7InputError, parseHl7Message } from '../../../src/adapters/hl7';

const MSH = 'MSH|^~\\&|PMS|BSD-MAIN|ELIG|BSD|20240501||SIU^S12^SIU_S12|C1|P|2.5.1';

describe('parseHl7Message', () => {
  it('reads CR, LF and CRLF segment endings, blank lines, a byte-order mark and stray MLLP bytes alike', () => {
    const segments = [MSH, 'PID|1||42^^^PMS^MR||DOE^JANE', 'IN1|1||CDCA1|Delta'];
    for (const text of [segments.join('\r'), segments.join('\n'), segments.join('\r\n'), `\uFEFF\x0b${segments.join('\n\n')}\n\x1c\r`]) {
      const message = parseHl7Message(text);
      expect(message.segments.map((s) => s.name)).toEqual(['MSH', 'PID', 'IN1']);
      expect(message.first('PID')?.value(5, 2)).toBe('JANE');
    }
  });

  it('numbers MSH fields as HL7 does (MSH-1 is the separator) and returns the declared delimiters', () => {
    const msh = parseHl7Message(MSH).header;
    expect([msh.value(1), msh.value(2), msh.value(3), msh.value(4), msh.value(9, 2), msh.value(10), msh.value(12)]).toEqual([
      '|', '^~\\&', 'PMS', 'BSD-MAIN', 'S12', 'C1', '2.5.1',
    ]);
  });

  it('reaches every occurrence of a repeated segment, numbered in order', () => {
    const message = parseHl7Message([MSH, 'IN1|1||A|First', 'IN2|1', 'IN1|2||B|Second'].join('\r'));
    expect(message.all('IN1').map((s) => [s.sequence, s.value(4)])).toEqual([
      [1, 'First'],
      [2, 'Second'],
    ]);
  });

  it('reads repetitions, components and subcomponents, and "" as no value', () => {
    const pid = parseHl7Message([MSH, 'PID|1|""|42^^^PMS&1.2.3&ISO^MR~77^^^SSA^SS||DOE^JANE'].join('\r')).first('PID');
    expect(pid?.repetitions(3)).toBe(2);
    expect(pid?.value(3, 4, 2)).toBe('1.2.3');
    expect(pid?.value(3, 1, 1, 1)).toBe('77');
    expect(pid?.value(2)).toBe('');
    expect(pid?.value(40, 3)).toBe('');
  });

  it('decodes escape sequences, hex included, with the delimiters the message declares', () => {
    const standard = parseHl7Message([MSH, 'IN1|1||X|A\\T\\B\\F\\C\\S\\D\\R\\E\\E\\F \\X4142\\'].join('\r'));
    expect(standard.first('IN1')?.value(4)).toBe('A&B|C^D~E\\F AB');
    const custom = parseHl7Message(['MSH!*@$%!PMS!BSD!E!B!2024!!SIU*S12!C2!P!2.3', 'IN1!1!!X!A&B^C$S$D'].join('\r'));
    expect(custom.first('IN1')?.value(4)).toBe('A&B^C*D');
    expect(custom.delimiters).toMatchObject({ field: '!', component: '*', repetition: '@', escape: '$', subcomponent: '%' });
  });

  it('reads a hex escape as UTF-8 bytes in a message whose MSH-18 says UNICODE UTF-8 or is empty, and as one character a byte otherwise', () => {
    const utf8 = `${MSH}||||||UNICODE UTF-8`;
    expect(parseHl7Message([utf8, 'PID|1||42^^^PMS^MR||M\\XC3BC\\LLER^J\\XC3\\RG'].join('\r')).first('PID')?.value(5)).toBe('M\u00fcLLER');
    expect(parseHl7Message([`${MSH}||||||UTF-8`, 'PID|1||42^^^PMS^MR||M\\XC3BC\\LLER'].join('\r')).first('PID')?.value(5)).toBe('M\u00fcLLER');
    // UNICODE, v2.3's name, which the MLLP listener reads as UTF-8 too.
    expect(parseHl7Message([`${MSH}||||||UNICODE`, 'PID|1||42^^^PMS^MR||M\\XC3BC\\LLER'].join('\r')).first('PID')?.value(5)).toBe('M\u00fcLLER');
    // A lone byte that is no UTF-8 is left to the byte-wise reading.
    expect(parseHl7Message([utf8, 'PID|1||42^^^PMS^MR||DOE^J\\XC3\\RG'].join('\r')).first('PID')?.value(5, 2)).toBe('J\u00c3RG');
    // MSH-18 empty: the listener and convert hl7 read the message as UTF-8, so its hex escapes are UTF-8 too;
    // a Latin-1 sender's lone byte is no UTF-8 and still reads as its character.
    expect(parseHl7Message([MSH, 'PID|1||42^^^PMS^MR||REN\\XC3A9\\E^M\\XFC\\LLER'].join('\r')).first('PID')?.value(5)).toBe('REN\u00e9E');
    expect(parseHl7Message([MSH, 'PID|1||42^^^PMS^MR||REN\\XC3A9\\E^M\\XFC\\LLER'].join('\r')).first('PID')?.value(5, 2)).toBe('M\u00fcLLER');
    const latin1 = `${MSH}||||||8859/1`;
    expect(parseHl7Message([latin1, 'PID|1||42^^^PMS^MR||M\\XFC\\LLER'].join('\r')).first('PID')?.value(5)).toBe('M\u00fcLLER');
    expect(parseHl7Message([latin1, 'PID|1||42^^^PMS^MR||M\\XC3BC\\LLER'].join('\r')).first('PID')?.value(5)).toBe('M\u00c3\u00bcLLER');
  });

  it('reads formatting commands (\\.br\\, \\.sp\\, \\.in+4\\) as one space, and an escaped escape character followed by .br as text', () => {
    const in1 = parseHl7Message([MSH, 'IN1|1||X|Delta Dental \\.br\\\\.sp2\\ of California\\.br\\|\\.in+4\\ACME|C:\\E\\.br\\E\\x'].join('\r')).first('IN1');
    expect(in1?.value(4)).toBe('Delta Dental of California ');
    expect(in1?.value(5)).toBe(' ACME');
    expect(in1?.value(6)).toBe('C:\\.br\\x');
    const custom = parseHl7Message(['MSH!*@$%!PMS!BSD!E!B!2024!!SIU*S12!C2!P!2.3', 'IN1!1!!X!Delta$.br$Dental'].join('\r'));
    expect(custom.first('IN1')?.value(4)).toBe('Delta Dental');
  });

  it('drops a hex escape of odd length, which node-hl7-client throws on, and decodes the rest of the value', () => {
    const in1 = parseHl7Message([MSH, 'IN1|1|PLN^Caf\\XE9A\\ Plan \\X41\\|X'].join('\r')).first('IN1');
    expect(in1?.value(2, 2)).toBe('Caf Plan A');
  });

  it('drops control characters from values, raw or hex-escaped, which no name or id holds and the chart refuses', () => {
    const pid = parseHl7Message([MSH, 'PID|1||P\u00011^^^SC||DO\\X01\\E^JA\tNE^\\X1B\\Q'].join('\r')).first('PID');
    expect([pid?.value(3), pid?.value(5), pid?.value(5, 2), pid?.value(5, 3)]).toEqual(['P1', 'DOE', 'JA\tNE', 'Q']);
  });

  it('keeps the v2.7 truncation character as an encoding character and reads it as text in data', () => {
    const message = parseHl7Message(['MSH|^~\\&#|PMS|BSD|E|B|2024||SIU^S12|C3|P|2.7', 'IN1|1||X|Suite #4'].join('\r'));
    expect(message.delimiters.encodingCharacters).toBe('^~\\&#');
    expect(message.header.value(2)).toBe('^~\\&#');
    expect(message.first('IN1')?.value(4)).toBe('Suite #4');
  });

  it('reads a message whose fields end in MSH just before a separator, in MSH-4, PID-17 and PV1-39 (node-hl7-client alone refuses it)', () => {
    const text = [
      'MSH|^~\\&|PMS|WESTMSH|ELIG|BSD|20240501||SIU^S12^SIU_S12|C1|P|2.5.1',
      'PID|1||42^^^PMS^MR||DOE^JANE||||||||||||CHURCHMSH|',
      `PV1|1|O${'|'.repeat(37)}EASTMSH|`,
    ].join('\r');
    const message = parseHl7Message(text);
    expect(message.segments.map((s) => s.name)).toEqual(['MSH', 'PID', 'PV1']);
    expect([message.header.value(4), message.first('PID')?.value(17), message.first('PV1')?.value(39)]).toEqual(['WESTMSH', 'CHURCHMSH', 'EASTMSH']);
    expect(message.first('PID')?.value(5, 2)).toBe('JANE');
  });

  it.each([
    ['', 'MSH: message is empty'],
    ['PID|1||42', 'MSH: message does not start with an MSH segment'],
    ['MSH|^~|PMS', 'MSH-2: field separator or encoding characters are not usable'],
    [`${MSH}\rNTE|1||first line\nsecond line`, 'NTE: the line after this segment is not a segment (an unescaped line break?)'],
    [`${MSH}\r${MSH}`, 'MSH[2]: a second message in the same text: one message expected'],
  ])('rejects %j as AR: %s', (text, reason) => {
    let error: unknown;
    try {
      parseHl7Message(text);
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(Hl7InputError);
    expect((error as Hl7InputError).message).toBe(reason);
    expect((error as Hl7InputError).problems.every((p) => p.ackCode === 'AR')).toBe(true);
  });
});
