import { acknowledgements, buildAck, parseHl7Message, readMessageHeader, type Answer, type Hl7Problem } from '../../../src/adapters/hl7';

const inbound = (version: string, extra = '') =>
  `MSH|^~\\&|MOLARPMS|BSD-MAIN^1.2.3^ISO|ELIG|BSD|20240501||SIU^S12^SIU_S12|MSG-77|T|${version}${extra}\rPID|1`;

const birthDate: Hl7Problem = { segment: 'PID', sequence: 1, field: 7, reason: 'birth date missing', code: 101, ackCode: 'AE' };
const now = new Date('2024-05-01T12:34:56Z');

describe('buildAck', () => {
  it('swaps sender and receiver, echoes the control id, and keeps processing id and version', () => {
    const ack = buildAck(readMessageHeader(inbound('2.5.1')), { code: 'AA' }, { now });
    const msh = parseHl7Message(ack.text).header;
    expect([msh.rawField(3), msh.rawField(4), msh.rawField(5), msh.rawField(6)]).toEqual(['ELIG', 'BSD', 'MOLARPMS', 'BSD-MAIN^1.2.3^ISO']);
    expect(msh.rawField(7)).toBe('20240501123456+0000');
    expect(msh.rawField(9)).toBe('ACK^S12^ACK');
    expect([msh.rawField(11), msh.rawField(12)]).toEqual(['T', '2.5.1']);
    expect(msh.value(10)).toBe(ack.controlId);
    expect(ack.text.split('\r')[1]).toBe('MSA|AA|MSG-77');
    expect(ack).toMatchObject({ code: 'AA', acknowledges: 'MSG-77' });
  });

  it('echoes at most 227 characters of a header value, never half an escape sequence, and answers a version that is none in 2.5.1', () => {
    const huge = 'X'.repeat(1 << 20);
    const header = readMessageHeader(`MSH|^~\\&|${huge}|${'F'.repeat(225)}\\T\\B|ELIG|BSD|20240501||SIU^S12^SIU_S12|${huge}|P|${huge}\rPID|1`);
    const ack = buildAck(header, { code: 'AR' });
    expect(ack.text.length).toBeLessThan(2000);
    const msh = parseHl7Message(ack.text).header;
    expect(msh.rawField(5)).toBe('X'.repeat(227));
    // Cut before the escape sequence that would have been split.
    expect(msh.rawField(6)).toBe('F'.repeat(225));
    expect(msh.rawField(12)).toBe('2.5.1');
    expect(ack.acknowledges).toBe('X'.repeat(227));
    expect(buildAck(readMessageHeader(inbound('2.3.1')), { code: 'AA' }).text).toContain('|T|2.3.1');
  });

  it('gives every ACK its own control id of at most 20 characters', () => {
    const header = readMessageHeader(inbound('2.5.1'));
    const ids = Array.from({ length: 200 }, () => buildAck(header, { code: 'AA' }).controlId);
    expect(new Set(ids).size).toBe(200);
    for (const id of ids) expect(id.length).toBeLessThanOrEqual(20);
  });

  it('writes MSH-9 as ACK^<event> for v2.3, with the structure from v2.3.1 on', () => {
    const type = (version: string) => parseHl7Message(buildAck(readMessageHeader(inbound(version)), { code: 'AA' }).text).header.rawField(9);
    expect(type('2.3')).toBe('ACK^S12');
    expect(type('2.3.1')).toBe('ACK^S12^ACK');
    expect(type('2.8')).toBe('ACK^S12^ACK');
  });

  it('answers in the delimiters the sender declared, the truncation character included', () => {
    const custom = readMessageHeader('MSH!*@$%#!PMS!FAC!E!B!2024!!SIU*S14!X9!P!2.7');
    const ack = buildAck(custom, { code: 'AE', problems: [{ ...birthDate, reason: 'a|b^c' }] });
    expect(ack.text.startsWith('MSH!*@$%#!E!B!PMS!FAC!')).toBe(true);
    expect(ack.text).toContain('!ACK*S14*ACK!');
    const parsed = parseHl7Message(ack.text);
    expect(parsed.first('ERR')?.value(8)).toBe('PID-7: a|b^c');
    expect(parsed.first('MSA')?.value(3)).toBe('PID-7: a|b^c');
  });

  it('writes one ERR per problem: location, table 0357 code, severity and readable text', () => {
    const second: Hl7Problem = { segment: 'IN1', sequence: 2, field: 3, component: 1, reason: 'payer id and name missing', code: 101, ackCode: 'AE' };
    const ack = buildAck(readMessageHeader(inbound('2.5.1')), { code: 'AE', problems: [birthDate, second] });
    const errs = parseHl7Message(ack.text).all('ERR');
    expect(errs.map((e) => [e.rawField(1), e.rawField(2), e.rawField(3), e.rawField(4), e.value(8)])).toEqual([
      ['', 'PID^1^7^1', '101^Required field missing^HL70357', 'E', 'PID-7: birth date missing'],
      ['', 'IN1^2^3^1^1', '101^Required field missing^HL70357', 'E', 'IN1[2]-3.1: payer id and name missing'],
    ]);
    expect(parseHl7Message(ack.text).first('MSA')?.rawField(3)).toBe('PID-7: birth date missing');
  });

  it('also fills ERR-1 in the old ELD form for v2.3 and v2.4 senders', () => {
    for (const version of ['2.3', '2.3.1', '2.4']) {
      const err = parseHl7Message(buildAck(readMessageHeader(inbound(version)), { code: 'AE', problems: [birthDate] }).text).first('ERR');
      expect(err?.rawField(1)).toBe('PID^1^7^101&Required field missing&HL70357');
      expect(err?.rawField(2)).toBe('PID^1^7^1');
    }
  });

  it('writes exactly the code it is given, whatever mode the message asked for', () => {
    const enhanced = readMessageHeader(inbound('2.5.1', '|||AL|AL'));
    expect(buildAck(enhanced, { code: 'AE', problems: [birthDate] }).code).toBe('AE');
    expect(parseHl7Message(buildAck(enhanced, { code: 'CA' }).text).first('MSA')?.value(1)).toBe('CA');
  });

  it('still answers a text with no readable header: default delimiters, AR, empty MSA-2', () => {
    const problem: Hl7Problem = { segment: 'MSH', sequence: 1, reason: 'message does not start with an MSH segment', code: 100, ackCode: 'AR' };
    const ack = buildAck(readMessageHeader('hello'), { code: 'AR', problems: [problem] });
    const parsed = parseHl7Message(ack.text);
    expect(parsed.first('MSA')?.value(1)).toBe('AR');
    expect(parsed.first('MSA')?.value(2)).toBe('');
    expect(parsed.first('ERR')?.rawField(2)).toBe('MSH^1');
  });
});

describe('acknowledgements', () => {
  const internal: Hl7Problem = { segment: 'MSH', sequence: 1, reason: 'application internal error', code: 207, ackCode: 'AR' };
  const unsupportedVersion: Hl7Problem = { segment: 'MSH', sequence: 1, field: 12, reason: 'version 2.2 is not supported (2.3 to 2.8)', code: 203, ackCode: 'AR' };
  const used: Answer = { commit: 'CA', application: 'AA' };
  const dataError: Answer = { commit: 'CA', application: 'AE', problems: [birthDate] };
  const unsupported: Answer = { commit: 'CR', application: 'AR', problems: [unsupportedVersion] };
  const notStored: Answer = { commit: 'CE', application: 'AR', problems: [internal] };
  /** In this order in the tables below. */
  const answers = [used, dataError, unsupported, notStored];
  const codes = (msh15And16: string, answer: Answer) => acknowledgements(readMessageHeader(inbound('2.5.1', msh15And16)), answer).map((a) => a.code);

  it('answers original mode (MSH-15 and MSH-16 empty) with exactly one AA, AE or AR', () => {
    expect(answers.map((a) => codes('', a))).toEqual([['AA'], ['AE'], ['AR'], ['AR']]);
  });

  it.each([
    ['AL|AL', [['CA', 'AA'], ['CA', 'AE'], ['CR', 'AR'], ['CE', 'AR']]],
    ['NE|AL', [['AA'], ['AE'], ['AR'], ['AR']]],
    ['AL|NE', [['CA'], ['CA'], ['CR'], ['CE']]],
    ['NE|NE', [[], [], [], []]],
    ['ER|ER', [[], ['AE'], ['CR', 'AR'], ['CE', 'AR']]],
    ['SU|SU', [['CA', 'AA'], ['CA'], [], []]],
    ['ER|SU', [['AA'], [], ['CR'], ['CE']]],
    ['|AL', [['CA', 'AA'], ['CA', 'AE'], ['CR', 'AR'], ['CE', 'AR']]],
    ['AL|', [['CA'], ['CA'], ['CR'], ['CE']]],
    ['XX|al', [['CA', 'AA'], ['CA', 'AE'], ['CR', 'AR'], ['CE', 'AR']]],
  ])('answers enhanced mode %s: the accept ACK as MSH-15 asks, then the application ACK as MSH-16 asks', (conditions, expected) => {
    expect(answers.map((a) => codes(`|||${conditions}`, a))).toEqual(expected);
  });

  it('gives each ACK its own MSH-10, and puts the ERRs on the application ACK, and on an accept ACK only when it is not CA', () => {
    const header = readMessageHeader(inbound('2.5.1', '|||AL|AL'));
    const [accept, application] = acknowledgements(header, dataError);
    expect(accept?.controlId).not.toBe(application?.controlId);
    expect([accept, application].map((a) => a?.acknowledges)).toEqual(['MSG-77', 'MSG-77']);
    expect(parseHl7Message(accept?.text ?? '').all('ERR')).toHaveLength(0);
    expect(parseHl7Message(application?.text ?? '').first('ERR')?.value(8)).toBe('PID-7: birth date missing');
    const [commitError] = acknowledgements(header, notStored);
    expect(parseHl7Message(commitError?.text ?? '').first('ERR')?.rawField(3)).toBe('207^Application internal error^HL70357');
  });

  it('writes a warning as an ERR of severity W on an AA, never on the accept ACK, and E for an error beside it', () => {
    const npi: Hl7Problem = { segment: 'AIP', sequence: 1, field: 3, component: 1, reason: 'provider NPI fails the check digit: verified without it', code: 102, ackCode: 'AA' };
    const [accept, application] = acknowledgements(readMessageHeader(inbound('2.5.1', '|||AL|AL')), { commit: 'CA', application: 'AA', problems: [npi] });
    expect(parseHl7Message(accept?.text ?? '').all('ERR')).toHaveLength(0);
    const err = parseHl7Message(application?.text ?? '').first('ERR');
    expect([application?.code, err?.rawField(2), err?.value(4), err?.value(8)]).toEqual(['AA', 'AIP^1^3^1^1', 'W', 'AIP-3.1: provider NPI fails the check digit: verified without it']);
    const [rejected] = acknowledgements(readMessageHeader(inbound('2.5.1')), { commit: 'CA', application: 'AE', problems: [birthDate, npi] });
    expect(parseHl7Message(rejected?.text ?? '').all('ERR').map((e) => e.value(4))).toEqual(['E', 'W']);
  });

  it('answers a text with no readable header in original mode', () => {
    expect(acknowledgements(readMessageHeader('hello'), { commit: 'CR', application: 'AR', problems: [internal] }).map((a) => a.code)).toEqual(['AR']);
  });
});
