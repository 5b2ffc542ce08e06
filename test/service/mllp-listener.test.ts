import { connect, type Socket } from 'node:net';
import { loadClinicRouting } from '../../src/adapters/clinic-routing';
import {
  buildAck,
  createMessageHandler,
  InMemoryPatientInsuranceStore,
  loadHl7Mappings,
  parseHl7Message,
  readMessageHeader,
  type Ack,
  type Hl7Result,
} from '../../src/adapters/hl7';
import { frame, MllpDecoder } from '../../src/service/mllp-framing';
import { MllpListener } from '../../src/service/mllp-listener';
import { segment } from '../adapters/hl7/segment';

/** Real sockets on loopback: a raw client speaks MLLP to the listener and reads every ACK frame. */
const mappings = loadHl7Mappings();
const routing = loadClinicRouting();

/** `ack` is `|||MSH-15|MSH-16` for enhanced mode, empty for original mode. */
const message = (id: string, ack = '', birthDate = '19800102') =>
  [
    `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20240501||SIU^S12^SIU_S12|${id}|P|2.5.1${ack}`,
    'SCH|APT-1^SC||||||||||^^^20240610093000',
    `PID|1||P-1^^^SC^MR||DOE^JANE||${birthDate}|F`,
    segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna', 17: 'SEL', 36: 'M-1' }),
  ].join('\r');

/** Readable, but PID-7 is missing: AE, and kept as a dead letter by the service. */
const dataError = (id: string, ack = '') => message(id, ack, '');

interface Client {
  socket: Socket;
  acks: string[];
  closed: Promise<void>;
  waitFor(count: number): Promise<string[]>;
}

async function client(port: number): Promise<Client> {
  const socket = connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  const decoder = new MllpDecoder(1 << 20);
  const acks: string[] = [];
  let notify = () => {};
  socket.on('data', (chunk) => {
    for (const f of decoder.push(chunk)) if (f.kind === 'message') acks.push(f.payload.toString());
    notify();
  });
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return {
    socket,
    acks,
    closed,
    waitFor: (count) =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`got ${acks.length} ACKs, wanted ${count}`)), 3000);
        notify = () => {
          if (acks.length >= count) {
            clearTimeout(timer);
            resolve(acks);
          }
        };
        notify();
      }),
  };
}

const msa = (ack: string) => {
  const parsed = parseHl7Message(ack);
  return { code: parsed.first('MSA')?.value(1), echoes: parsed.first('MSA')?.value(2), id: parsed.header.value(10), err: parsed.first('ERR') };
};

describe('MllpListener', () => {
  let listener: MllpListener;
  let port: number;
  let clients: Client[];
  let handled: string[];
  let results: Hl7Result[];
  let deadLetters: Array<{ message: string; reason: string }>;

  async function start(handler?: (m: string) => Promise<readonly Ack[]>, onDeadLetter?: (l: { message: string; reason: string }) => Promise<void>, maxFrameBytes?: number) {
    const store = new InMemoryPatientInsuranceStore();
    const standard = createMessageHandler({ mappings, routing, store, onResult: async (r) => void results.push(r) });
    listener = new MllpListener({
      handler: async (m) => {
        handled.push(m);
        return (handler ?? standard)(m);
      },
      onDeadLetter: onDeadLetter ?? (async (l) => void deadLetters.push(l)),
      ...(maxFrameBytes !== undefined && { maxFrameBytes }),
    });
    ({ port } = await listener.start());
  }
  const open = async () => {
    const c = await client(port);
    clients.push(c);
    return c;
  };

  beforeEach(() => {
    clients = [];
    handled = [];
    results = [];
    deadLetters = [];
  });
  afterEach(async () => {
    for (const c of clients) c.socket.destroy();
    await listener.stop();
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
    await start(undefined, undefined, 400);
    const c = await open();
    const big = message('BIG') + `\rNTE|1||${'x'.repeat(1000)}`;
    c.socket.write(Buffer.concat([frame(big), frame(message('NEXT'))]));
    const [tooBig, next] = (await c.waitFor(2)).map(msa);
    expect(tooBig).toMatchObject({ code: 'AR', echoes: 'BIG' });
    expect(tooBig?.err?.value(8)).toBe('MSH: message larger than 400 bytes');
    expect(next).toMatchObject({ code: 'AA', echoes: 'NEXT' });
    expect(deadLetters).toHaveLength(1);
  });

  it('closes open connections on stop', async () => {
    await start();
    const c = await open();
    await listener.stop();
    await c.closed;
    expect(c.socket.destroyed).toBe(true);
  });
});
