import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadClinicRouting } from '../../src/adapters/clinic-routing';
import {
  buildAck,
  createMessageHandler,
  InMemoryPatientInsuranceStore,
  loadHl7Mappings,
  readMessageHeader,
  type Ack,
  type Hl7Result,
} from '../../src/adapters/hl7';
import { frame, FS, VT } from '../../src/service/mllp-framing';
import { MllpListener, type DeadLetter, type MllpListenerOptions } from '../../src/service/mllp-listener';
import { StoreUnavailableError } from '../../src/sync/job-store';
import { until } from '../sync/harness';
import { listenerUnderTest, message, msa } from './mllp-client';

/** Real sockets on loopback: a raw client speaks MLLP to the listener and reads every ACK frame. */
const mappings = loadHl7Mappings();
const routing = loadClinicRouting();

/** Readable, but PID-7 is missing: AE, and kept as a dead letter by the service. */
const dataError = (id: string, ack = '') => message(id, ack, '');

describe('MllpListener', () => {
  const mllp = listenerUnderTest();
  const open = () => mllp.open();
  let listener: MllpListener;
  let handled: string[];
  let results: Hl7Result[];
  let deadLetters: DeadLetter[];

  async function start(handler?: (m: string) => Promise<readonly Ack[]>, onDeadLetter?: (l: DeadLetter) => Promise<void>, options: Partial<MllpListenerOptions> = {}) {
    const store = new InMemoryPatientInsuranceStore();
    const standard = createMessageHandler({ mappings, routing, store, onResult: async (r) => void results.push(r) });
    listener = await mllp.start({
      handler: async (m) => {
        handled.push(m);
        return (handler ?? standard)(m);
      },
      onDeadLetter: onDeadLetter ?? (async (l) => void deadLetters.push(l)),
      ...options,
    });
  }

  beforeEach(() => {
    handled = [];
    results = [];
    deadLetters = [];
  });

  it('answers one message with one AA that echoes its control id', async () => {
    await start();
    const c = await open();
    c.socket.write(frame(message('M1')));
    const [ack] = await c.waitFor(1);
    expect(msa(ack ?? '')).toMatchObject({ code: 'AA', echoes: 'M1' });
    expect(results.map((r) => r.outcome.kind)).toEqual(['book']);
  });

  it('answers several messages on one kept-open connection once each, in order, each ACK with its own MSH-10', async () => {
    await start();
    const c = await open();
    for (const id of ['M1', 'M2', 'M3']) {
      c.socket.write(frame(message(id)));
      await c.waitFor(handled.length);
    }
    await c.waitFor(3);
    await new Promise((r) => setTimeout(r, 50)); // any extra ACK would arrive now
    expect(handled.map((m) => readMessageHeader(m)?.controlId)).toEqual(['M1', 'M2', 'M3']);
    expect(c.acks.map((a) => msa(a).echoes)).toEqual(['M1', 'M2', 'M3']);
    expect(new Set(c.acks.map((a) => msa(a).id)).size).toBe(3);
  });

  it('splits two frames that arrive in one chunk', async () => {
    await start();
    const c = await open();
    c.socket.write(Buffer.concat([frame(message('A')), frame(message('B'))]));
    expect((await c.waitFor(2)).map((a) => msa(a).echoes)).toEqual(['A', 'B']);
  });

  it('joins a frame that arrives in pieces', async () => {
    await start();
    const c = await open();
    const bytes = frame(message('SPLIT'));
    for (let i = 0; i < bytes.length; i += 7) {
      c.socket.write(bytes.subarray(i, i + 7));
      await new Promise((r) => setImmediate(r));
    }
    expect(msa((await c.waitFor(1))[0] ?? '')).toMatchObject({ code: 'AA', echoes: 'SPLIT' });
    expect(handled).toHaveLength(1);
  });

  it('answers garbage with AR', async () => {
    await start();
    const c = await open();
    c.socket.write(frame('this is not HL7'));
    const answer = msa((await c.waitFor(1))[0] ?? '');
    expect(answer).toMatchObject({ code: 'AR', echoes: '' });
    expect(answer.err?.rawField(3)).toBe('100^Segment sequence error^HL70357');
  });

  it('keeps ACKs in arrival order when an earlier message takes longer', async () => {
    await start(async (m) => {
      const header = readMessageHeader(m);
      if (header?.controlId === 'SLOW') await new Promise((r) => setTimeout(r, 100));
      return [buildAck(header, { code: 'AA' })];
    });
    const c = await open();
    c.socket.write(Buffer.concat([frame(message('SLOW')), frame(message('FAST'))]));
    expect((await c.waitFor(2)).map((a) => msa(a).echoes)).toEqual(['SLOW', 'FAST']);
  });

  it('answers AR, or CE (not stored, send again) in enhanced mode, when the handler throws, and dead-letters the message', async () => {
    await start(async () => {
      throw new Error('store unavailable');
    });
    const c = await open();
    c.socket.write(Buffer.concat([frame(message('X1')), frame(message('X2', '|||AL|NE'))]));
    const [original, enhanced] = (await c.waitFor(2)).map(msa);
    expect(original).toMatchObject({ code: 'AR', echoes: 'X1' });
    expect(enhanced).toMatchObject({ code: 'CE', echoes: 'X2' });
    expect(enhanced?.err?.rawField(3)).toBe('207^Application internal error^HL70357');
    expect(original?.err?.rawField(3)).toBe('207^Application internal error^HL70357');
    expect(original?.err?.value(8)).not.toContain('store unavailable');
    expect(deadLetters.map((l) => readMessageHeader(l.message)?.controlId)).toEqual(['X1', 'X2']);
  });

  it('drops the connection without an ACK when not even the dead letter can be kept, so the sender resends', async () => {
    await start(
      async () => {
        throw new Error('store unavailable');
      },
      async () => {
        throw new Error('dead-letter store unavailable');
      },
    );
    const c = await open();
    c.socket.write(frame(message('LOST?')));
    await c.closed;
    expect(c.acks).toEqual([]);
  });

  it('keeps nothing, and so answers nothing, for a handler that throws when it is given no onDeadLetter: a CE would say it was kept', async () => {
    const log = { warnings: [] as string[], info: () => undefined, warn: (_o: object, msg: string) => void log.warnings.push(msg) };
    listener = await mllp.start({
      handler: async () => {
        throw new Error('the embedder\'s handler failed');
      },
      log,
    });
    const c = await open();
    c.socket.write(frame(message('NOWHERE', '|||AL|NE')));
    await Promise.race([c.closed, c.waitFor(1).catch(() => undefined)]);
    expect(c.acks).toEqual([]);
    expect(log.warnings).toEqual(['MLLP listener has no onDeadLetter, so nothing is kept; connection dropped without an ACK']);
  });

  it('refuses a frame too large or undecodable all the same when it is given no onDeadLetter: unanswered, it would be sent again and again, the feed stopped behind it', async () => {
    const log = { warnings: [] as string[], info: () => undefined, warn: (_o: object, msg: string) => void log.warnings.push(msg) };
    listener = await mllp.start({ handler: async (m) => [buildAck(readMessageHeader(m), { code: 'AA' })], maxFrameBytes: 400, log });
    const c = await open();
    const big = message('BIG') + `\rNTE|1||${'x'.repeat(1000)}`;
    // Not UTF-8, and MSH-18 names no other set.
    const latin1 = message('LATIN').replace('DOE^JANE', 'MÜLLER^JANE');
    c.socket.write(Buffer.concat([frame(big), frame(latin1, 'latin1'), frame(message('NEXT'))]));
    expect((await c.waitFor(3)).map((a) => msa(a).code)).toEqual(['AR', 'AR', 'AA']);
    expect(log.warnings.filter((w) => w.startsWith('MLLP listener has no onDeadLetter'))).toHaveLength(2);
    expect(listener.stats().deadLetters).toBe(0);
  });

  it.each([
    ['PostgreSQL out of reach', () => new StoreUnavailableError(new Error('Connection terminated unexpectedly'))],
    ['SQLite held by another process past its busy_timeout', () => Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' })],
    ['SQLite on a full disk', () => Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' })],
  ])('a message the store cannot take (%s) is not a dead letter: no ACK, the connection dropped, so it is sent again', async (_name, outage) => {
    await start(async () => {
      throw outage();
    });
    const c = await open();
    c.socket.write(frame(message('LATER')));
    // An ACK, where one is sent, comes before the connection would be dropped.
    await Promise.race([c.closed, c.waitFor(1).catch(() => undefined)]);
    expect(c.acks.map((a) => msa(a).code)).toEqual([]);
    expect(deadLetters).toEqual([]);
  });

  it('says a message the store cannot take at info once, not once for each sent again, the others at debug', async () => {
    const log = { infos: [] as string[], debugs: [] as string[], info: (_o: object, msg: string) => void log.infos.push(msg), warn: () => undefined, debug: (_o: object, msg: string) => void log.debugs.push(msg) };
    listener = await mllp.start({
      handler: async () => {
        throw new StoreUnavailableError(new Error('Connection terminated unexpectedly'));
      },
      onDeadLetter: async (l) => void deadLetters.push(l),
      log,
    });
    for (const id of ['R1', 'R2', 'R3']) {
      const c = await open();
      c.socket.write(frame(message(id)));
      await c.closed;
    }
    const line = 'MLLP message not stored: the job store cannot take it now; connection dropped without an ACK (said once in ten minutes)';
    expect([log.infos, log.debugs]).toEqual([[line], [line, line]]);
  });

  it('acknowledges only after the result has been kept', async () => {
    const events: string[] = [];
    const store = new InMemoryPatientInsuranceStore();
    const handler = createMessageHandler({
      mappings,
      routing,
      store,
      onResult: async (r) => {
        await new Promise((resolve) => setTimeout(resolve, 80));
        events.push(`stored ${r.header?.controlId}`);
      },
    });
    await start(handler);
    const c = await open();
    c.socket.on('data', () => events.push('ack received'));
    c.socket.write(frame(message('K1')));
    await c.waitFor(1);
    expect(events).toEqual(['stored K1', 'ack received']);
  });

  describe('acknowledgement modes (MSH-15, MSH-16)', () => {
    /**
     * Sends the messages, then an original-mode message whose one AA marks the end: answers leave
     * in order, so whatever the others get has arrived before it.
     */
    async function answersTo(...messages: string[]) {
      const c = await open();
      c.socket.write(Buffer.concat([...messages, message('END')].map((m) => frame(m))));
      await c.waitFor(1);
      while (msa(c.acks.at(-1) ?? '').echoes !== 'END') await c.waitFor(c.acks.length + 1);
      return c.acks.slice(0, -1).map(msa);
    }

    it('original mode: exactly one ACK, AA or AE with its ERR', async () => {
      await start();
      const answers = await answersTo(message('O1'), dataError('O2'));
      expect(answers).toMatchObject([
        { code: 'AA', echoes: 'O1' },
        { code: 'AE', echoes: 'O2' },
      ]);
      expect(answers[1]?.err?.value(8)).toBe('PID-7: birth date missing');
    });

    it('AL/AL: a data error is accepted (CA: kept as a dead letter), then answered AE with its ERR, each ACK its own message', async () => {
      await start();
      const answers = await answersTo(dataError('E1', '|||AL|AL'), message('E2', '|||AL|AL'));
      expect(answers).toMatchObject([
        { code: 'CA', echoes: 'E1', err: undefined },
        { code: 'AE', echoes: 'E1' },
        { code: 'CA', echoes: 'E2' },
        { code: 'AA', echoes: 'E2', err: undefined },
      ]);
      expect(answers[1]?.err?.rawField(2)).toBe('PID^1^7^1');
      expect(new Set(answers.map((a) => a.id)).size).toBe(4);
      expect(results.map((r) => r.outcome.kind)).toEqual(['reject', 'book', 'book']);
    });

    it('NE/AL: only the application ACK', async () => {
      await start();
      expect(await answersTo(message('N1', '|||NE|AL'), dataError('N2', '|||NE|AL'))).toMatchObject([
        { code: 'AA', echoes: 'N1' },
        { code: 'AE', echoes: 'N2' },
      ]);
    });

    it('AL/NE, and AL with MSH-16 empty: only the commit ACK', async () => {
      await start();
      const answers = await answersTo(message('A1', '|||AL|NE'), dataError('A2', '|||AL|NE'), message('A3', '|||AL'));
      expect(answers).toMatchObject([
        { code: 'CA', echoes: 'A1' },
        { code: 'CA', echoes: 'A2', err: undefined },
        { code: 'CA', echoes: 'A3' },
      ]);
    });

    it('ER/ER: nothing for a good message, only the AE for a data error', async () => {
      await start();
      expect(await answersTo(message('R1', '|||ER|ER'), dataError('R2', '|||ER|ER'))).toMatchObject([{ code: 'AE', echoes: 'R2' }]);
    });

    it('SU/SU: CA then AA for a good message, nothing for an unsupported version, which AL/AL answers CR then AR', async () => {
      await start();
      const unsupported = (id: string, ack: string) => message(id, ack).replace('|2.5.1|', '|2.2|');
      expect(await answersTo(message('S1', '|||SU|SU'), unsupported('S2', '|||SU|SU'), unsupported('S3', '|||AL|AL'))).toMatchObject([
        { code: 'CA', echoes: 'S1' },
        { code: 'AA', echoes: 'S1' },
        { code: 'CR', echoes: 'S3' },
        { code: 'AR', echoes: 'S3' },
      ]);
    });
  });

  it('answers a sender that half-closes after its frames, however long keeping them takes, then closes the connection', async () => {
    const slowStore = createMessageHandler({ mappings, routing, store: new InMemoryPatientInsuranceStore(), onResult: () => new Promise((r) => setTimeout(r, 30)) });
    await start(slowStore);
    const c = await open();
    c.socket.end(Buffer.concat([frame(message('H1')), frame(message('H2', '|||AL|AL'))]));
    await c.closed;
    expect(c.acks.map(msa)).toMatchObject([
      { code: 'AA', echoes: 'H1' },
      { code: 'CA', echoes: 'H2' },
      { code: 'AA', echoes: 'H2' },
    ]);
    expect(handled).toHaveLength(2);
  });

  it('answers a frame over the size limit with AR and goes on with the next', async () => {
    await start(undefined, undefined, { maxFrameBytes: 400 });
    const c = await open();
    const big = message('BIG') + `\rNTE|1||${'x'.repeat(1000)}`;
    c.socket.write(Buffer.concat([frame(big), frame(message('NEXT'))]));
    const [tooBig, next] = (await c.waitFor(2)).map(msa);
    expect(tooBig).toMatchObject({ code: 'AR', echoes: 'BIG' });
    expect(tooBig?.err?.value(8)).toBe('MSH: message larger than 400 bytes');
    expect(next).toMatchObject({ code: 'AA', echoes: 'NEXT' });
    expect(deadLetters).toHaveLength(1);
  });

  describe('framing a sender gets wrong', () => {
    it('answers a frame ending in FS without CR, whether VT, other bytes or a pause follow', async () => {
      await start();
      const c = await open();
      const bare = (m: string) => Buffer.concat([Buffer.from([VT]), Buffer.from(m), Buffer.from([FS])]);
      c.socket.write(Buffer.concat([bare(message('F1')), bare(message('F2')), Buffer.from('\n'), bare(message('F3'))]));
      expect((await c.waitFor(3)).map((a) => msa(a).echoes)).toEqual(['F1', 'F2', 'F3']);
    });

    it('dead-letters a frame cut short by a new start block and answers the next message normally', async () => {
      await start();
      const c = await open();
      const fragment = message('GONE').slice(0, 60);
      c.socket.write(Buffer.concat([Buffer.from([VT]), Buffer.from(fragment), frame(message('NEXT'))]));
      await c.waitFor(1);
      await new Promise((r) => setTimeout(r, 50)); // an ACK for the fragment would arrive now
      expect(c.acks.map(msa)).toMatchObject([{ code: 'AA', echoes: 'NEXT' }]);
      expect(handled.map((m) => readMessageHeader(m)?.controlId)).toEqual(['NEXT']);
      expect(deadLetters).toEqual([{ message: fragment, bytes: Buffer.from(fragment), reason: 'frame abandoned after 60 bytes: a new frame began before it ended' }]);
      expect(listener.stats()).toMatchObject({ framesAborted: 1, deadLetters: 1, acks: { AA: 1 } });
    });

    it('goes on answering on the connection when the letter of an abandoned frame cannot be kept, and says the frame is lost, not the connection dropped', async () => {
      const warnings: string[] = [];
      await start(undefined, async () => {
        throw new Error('dead-letter store unavailable');
      }, { log: { info: () => {}, warn: (_fields, msg) => void warnings.push(msg) } });
      const c = await open();
      c.socket.write(Buffer.concat([Buffer.from([VT]), Buffer.from(message('GONE').slice(0, 60)), frame(message('NEXT'))]));
      expect((await c.waitFor(1)).map((a) => msa(a).echoes)).toEqual(['NEXT']);
      expect(warnings.filter((w) => w.startsWith('MLLP dead letter'))).toEqual(['MLLP dead letter could not be kept; the abandoned frame is lost']);
    });

    it('handles the frames a sender reset its connection after, unanswered, and dead-letters the one it left unfinished', async () => {
      let release = () => {};
      const held = new Promise<void>((resolve) => (release = resolve));
      const store = new InMemoryPatientInsuranceStore();
      const standard = createMessageHandler({ mappings, routing, store, onResult: async (r) => void results.push(r) });
      // The first message is being handled when the sender resets the connection.
      await start(async (m) => {
        if (handled.length === 1) await held;
        return standard(m);
      });
      const c = await open();
      c.socket.write(Buffer.concat([frame(message('R1')), frame(message('R2')), Buffer.from([VT]), Buffer.from('MSH|^~\\&|cut')]));
      await until('the first message in hand', async () => handled.length === 1);
      c.socket.resetAndDestroy();
      await new Promise((r) => setTimeout(r, 50));
      release();
      await until('the rest handled', async () => deadLetters.length === 1 && handled.length === 2);
      expect(handled.map((m) => readMessageHeader(m)?.controlId)).toEqual(['R1', 'R2']);
      expect(results.map((r) => r.outcome.kind)).toEqual(['book', 'book']);
      expect(deadLetters.map((l) => [l.message, l.reason])).toEqual([['MSH|^~\\&|cut', 'frame unfinished after 12 bytes when the connection ended or went idle']]);
    });

    it('closes a connection that opens as an HTTP request, whatever frame its body holds: a web page\'s cross-site POST to this port', async () => {
      await start();
      // What a browser sends for fetch(…, { method: 'POST', body }) with a text/plain body, no preflight needed; its request line may come in pieces.
      const posted = await open();
      posted.socket.write('PO');
      await new Promise((r) => setTimeout(r, 20));
      posted.socket.write(Buffer.concat([Buffer.from('ST / HTTP/1.1\r\nHost: 127.0.0.1:2575\r\nOrigin: https://attacker.example\r\nContent-Type: text/plain;charset=UTF-8\r\n\r\n'), frame(message('WEB1'))]));
      // Closed, or answered as an MLLP sender would be.
      const closedOrAnswered = (c: { closed: Promise<void>; waitFor(n: number): Promise<unknown> }) => Promise.race([c.closed, c.waitFor(1).catch(() => undefined)]);
      await closedOrAnswered(posted);
      const line = await open();
      line.socket.write(Buffer.concat([Buffer.from('OPTIONS / HTTP/1.1\r\n\r\n'), frame(message('WEB2'))]));
      await closedOrAnswered(line);
      expect([posted.acks, line.acks, handled, deadLetters]).toEqual([[], [], [], []]);
      // A sender's stray bytes before its first frame are no request line: its message is answered as before.
      const stray = await open();
      stray.socket.write(Buffer.concat([Buffer.from('\r\n'), frame(message('F4'))]));
      expect((await stray.waitFor(1)).map((a) => msa(a).echoes)).toEqual(['F4']);
    });

    it('dead-letters what a sender leaves unfinished when it closes', async () => {
      await start();
      const c = await open();
      c.socket.end(Buffer.concat([frame(message('DONE')), Buffer.from([VT]), Buffer.from('MSH|^~\\&|half')]));
      await c.closed;
      expect(c.acks.map((a) => msa(a).echoes)).toEqual(['DONE']);
      expect(deadLetters.map((l) => [l.message, l.reason])).toEqual([['MSH|^~\\&|half', 'frame unfinished after 13 bytes when the connection ended or went idle']]);
    });
  });

  describe('character sets (MSH-18)', () => {
    // MSH-18 is the sixth field after MSH-12; PID-5 and MSH-5 carry letters outside ASCII.
    const german = (id: string, charset: string) => message(id, `||||||${charset}`).replace('DOE^JANE', 'MÜLLER^JÖRG').replace('|ELIG|', '|ÉLIG|');

    it('reads an ISO-8859-1 message whose MSH-18 says 8859/1, and answers in ISO-8859-1', async () => {
      await start();
      const c = await mllp.open('latin1');
      c.socket.write(frame(german('L1', '8859/1'), 'latin1'));
      const [ack] = await c.waitFor(1);
      expect(handled[0]).toContain('MÜLLER^JÖRG');
      expect(JSON.stringify(results[0])).toContain('MÜLLER');
      expect(msa(ack ?? '')).toMatchObject({ code: 'AA', echoes: 'L1' });
      // The ACK's MSH-3 is the message's MSH-5, written back as the one byte 0xC9, not UTF-8's two.
      expect(c.raw[0]?.includes(Buffer.from('|ÉLIG|', 'latin1'))).toBe(true);
      expect(c.raw[0]?.includes(Buffer.from('ÉLIG', 'utf8'))).toBe(false);
    });

    it('reads bytes 0x80-0x9F of an 8859/1 message as Windows-1252 writes them (O’Brien), and answers in the same bytes', async () => {
      await start();
      const c = await mllp.open('latin1');
      const windows = message('W1', '||||||8859/1').replace('DOE^JANE', 'O’BRIEN^ANNE–MARIE').replace('|ELIG|', '|ELIG’S|');
      c.socket.write(frame(Buffer.from(windows.replace(/’/g, '\x92').replace(/–/g, '\x96'), 'latin1')));
      const [ack] = await c.waitFor(1);
      expect(handled[0]).toContain('O’BRIEN^ANNE–MARIE');
      expect(JSON.stringify(results[0])).toContain('O’BRIEN');
      expect(msa(ack ?? '')).toMatchObject({ code: 'AA', echoes: 'W1' });
      // The ACK's MSH-3 is the message's MSH-5, its apostrophe written back as the byte it came as.
      expect(c.raw[0]?.includes(Buffer.from('|ELIG\x92S|', 'latin1'))).toBe(true);
    });

    it('reads UTF-8 when MSH-18 says UNICODE UTF-8, and when it is empty (the default)', async () => {
      await start();
      const c = await open();
      c.socket.write(Buffer.concat([frame(german('U1', 'UNICODE UTF-8')), frame(german('U2', ''))]));
      await c.waitFor(2);
      expect(handled.map((m) => m.includes('MÜLLER^JÖRG'))).toEqual([true, true]);
      expect(c.raw.every((ack) => ack.includes(Buffer.from('|ÉLIG|', 'utf8')))).toBe(true);
    });

    it('reads a set MSH-18 names as platforms name it (UTF-8, ISO-8859-1, windows-1252), which no setting could override', async () => {
      await start();
      const c = await open();
      c.socket.write(Buffer.concat([frame(german('A1', 'UTF-8')), frame(german('A2', 'ISO-8859-1'), 'latin1'), frame(german('A3', 'windows-1252'), 'latin1')]));
      expect((await c.waitFor(3)).map((a) => msa(a).code)).toEqual(['AA', 'AA', 'AA']);
      expect(handled.map((m) => m.includes('MÜLLER^JÖRG'))).toEqual([true, true, true]);
    });

    it('applies the set configured for a sender whose MSH-18 is empty', async () => {
      await start(undefined, undefined, { senderCharsets: { 'SMILECLOUD|BSD-MAIN': '8859/1', OTHER: 'UNICODE UTF-8' } });
      const c = await open();
      c.socket.write(frame(german('S1', ''), 'latin1'));
      await c.waitFor(1);
      expect(handled[0]).toContain('MÜLLER^JÖRG');
    });

    it('rejects bytes that are not valid in the set, and a set it cannot read, with AR naming MSH-18, keeping the bytes', async () => {
      await start();
      const c = await open();
      const latin1 = frame(german('B1', ''), 'latin1');
      c.socket.write(Buffer.concat([latin1, frame(german('B2', 'ISO IR87'))]));
      const answers = (await c.waitFor(2)).map(msa);
      expect(answers).toMatchObject([
        { code: 'AR', echoes: 'B1' },
        { code: 'AR', echoes: 'B2' },
      ]);
      expect(answers.map((a) => a.err?.rawField(2))).toEqual(['MSH^1^18^1', 'MSH^1^18^1']);
      expect(answers.map((a) => a.err?.value(8))).toEqual([
        'MSH-18: text is not valid UTF-8 and MSH-18 names no other character set',
        'MSH-18: character set not supported (ASCII, 8859/1, UNICODE UTF-8)',
      ]);
      expect(handled).toEqual([]);
      expect(deadLetters[0]?.bytes?.equals(latin1.subarray(1, -2))).toBe(true);
      expect(listener.stats().framesUndecodable).toBe(2);
    });

    it('refuses to start with a set it does not know, naming the option', () => {
      expect(() => new MllpListener({ handler: async () => [], defaultCharset: 'EBCDIC' as never })).toThrow(/^MLLP listener option defaultCharset: /);
    });
  });

  describe('batches (BHS ... BTS, with or without FHS ... FTS) in one frame', () => {
    const fixture = (name: string) => readFileSync(join(__dirname, '../../fixtures/hl7', name), 'utf8');
    const segments = (text: string) => text.split('\r');

    it('hands each message to the handler and answers with one acknowledgement batch holding every ACK', async () => {
      await start();
      const c = await open();
      const batch = fixture('generic-v24-batch.hl7').replace(/^BHS\|([^\r\n]*)/, 'BHS|$1||||B-7');
      c.socket.write(frame(batch));
      const [reply] = await c.waitFor(1);
      expect(handled.map((m) => readMessageHeader(m)?.controlId)).toEqual(['DW-1', 'DW-2', 'DW-3']);
      const lines = segments(reply ?? '');
      const bhs = (lines[0] ?? '').split('|');
      // Sender and receiver swapped, its own BHS-11, the batch answered in BHS-12.
      expect([bhs[0], bhs[2], bhs[3], bhs[4], bhs[5], bhs[11]]).toEqual(['BHS', '', '', 'DENTWARE', 'BSD-MAIN', 'B-7']);
      expect(bhs[10]).toMatch(/^BACK[0-9A-F]{16}$/);
      expect(lines.at(-1)).toBe('BTS|3');
      const acks = reply?.split(/\r(?=MSH)/).slice(1).map((a) => a.replace(/\rBTS\|.*$/, '')) ?? [];
      expect(acks.map((a) => msa(a).echoes)).toEqual(['DW-1', 'DW-2', 'DW-3']);
      expect(acks.map((a) => msa(a).code)).toEqual(results.map((r) => r.ackCode));
    });

    it('mirrors a file envelope, and answers enhanced-mode messages with the ACKs they ask for', async () => {
      await start();
      const c = await open();
      const file = fixture('generic-file-batch.hl7').replace('|TB-2|P|2.5', '|TB-2|P|2.5|||AL|AL');
      c.socket.write(frame(file));
      const lines = segments((await c.waitFor(1))[0] ?? '');
      expect(lines.map((l) => l.slice(0, 3))).toEqual(['FHS', 'BHS', 'MSH', 'MSA', 'MSH', 'MSA', 'MSH', 'MSA', 'BTS', 'FTS']);
      expect(lines.filter((l) => l.startsWith('MSA')).map((l) => l.split('|').slice(1, 3).join(' '))).toEqual(['AA TB-1', 'CA TB-2', 'AA TB-2']);
      expect(lines.slice(-2)).toEqual(['BTS|3', 'FTS|1']);
    });
  });

  it('closes open connections on stop', async () => {
    await start();
    const c = await open();
    await listener.stop();
    await c.closed;
    expect(c.socket.destroyed).toBe(true);
  });
});
