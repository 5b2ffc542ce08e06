import { connect, type Socket } from 'node:net';
import { loadClinicRouting } from '../../../src/adapters/clinic-routing';
import {
  buildAck,
  createMessageHandler,
  frame,
  InMemoryPatientInsuranceStore,
  loadHl7Mappings,
  MllpDecoder,
  MllpListener,
  parseHl7Message,
  readMessageHeader,
  type Ack,
  type Hl7Result,
} from '../../../src/adapters/hl7';
import { segment } from './segment';

/** Real sockets on loopback: a raw client speaks MLLP to the listener and reads every ACK frame. */
const mappings = loadHl7Mappings();
const routing = loadClinicRouting();

const message = (id: string, extra = '') =>
  [
    `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20240501||SIU^S12^SIU_S12|${id}|P|2.5.1${extra}`,
    'SCH|APT-1^SC||||||||||^^^20240610093000',
    'PID|1||P-1^^^SC^MR||DOE^JANE||19800102|F',
    segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna', 17: 'SEL', 36: 'M-1' }),
  ].join('\r');

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

  async function start(handler?: (m: string) => Promise<Ack>, onDeadLetter?: (l: { message: string; reason: string }) => Promise<void>, maxMessageBytes?: number) {
    const store = new InMemoryPatientInsuranceStore();
    const standard = createMessageHandler({ mappings, routing, store, onResult: async (r) => void results.push(r) });
    listener = new MllpListener({
      handler: async (m) => {
        handled.push(m);
        return (handler ?? standard)(m);
      },
      onDeadLetter: onDeadLetter ?? (async (l) => void deadLetters.push(l)),
      ...(maxMessageBytes !== undefined && { maxMessageBytes }),
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
      return buildAck(header, { code: 'AA' });
    });
    const c = await open();
    c.socket.write(Buffer.concat([frame(message('SLOW')), frame(message('FAST'))]));
    expect((await c.waitFor(2)).map((a) => msa(a).echoes)).toEqual(['SLOW', 'FAST']);
  });

  it('answers AR, or CR in enhanced mode, when the handler throws, and dead-letters the message', async () => {
    await start(async () => {
      throw new Error('store unavailable');
    });
    const c = await open();
    c.socket.write(Buffer.concat([frame(message('X1')), frame(message('X2', '|||AL|NE'))]));
    const [original, enhanced] = (await c.waitFor(2)).map(msa);
    expect(original).toMatchObject({ code: 'AR', echoes: 'X1' });
    expect(enhanced).toMatchObject({ code: 'CR', echoes: 'X2' });
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

  it('answers CA to a message asking for enhanced mode', async () => {
    await start();
    const c = await open();
    c.socket.write(frame(message('E1', '|||AL|NE')));
    expect(msa((await c.waitFor(1))[0] ?? '')).toMatchObject({ code: 'CA', echoes: 'E1' });
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
