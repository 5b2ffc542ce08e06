import { connect, type Socket } from 'node:net';
import { parseHl7Message } from '../../src/adapters/hl7';
import { MllpDecoder } from '../../src/service/mllp-framing';
import { MllpListener, type MllpListenerOptions } from '../../src/service/mllp-listener';
import { segment } from '../adapters/hl7/segment';

/** A raw MLLP sender on loopback for listener tests: writes bytes as given, reads every ACK frame. */
export interface Client {
  socket: Socket;
  /** Each ACK frame's text, read in the encoding the client was opened with. */
  acks: string[];
  /** Each ACK frame's bytes. */
  raw: Buffer[];
  closed: Promise<void>;
  waitFor(count: number, timeoutMs?: number): Promise<string[]>;
}

/** `maxFrameBytes`: ACKs echo the sender's MSH fields, so an ACK to a hostile header may be large. */
export async function client(port: number, encoding: BufferEncoding = 'utf8', maxFrameBytes = 1 << 20): Promise<Client> {
  const socket = connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  const decoder = new MllpDecoder(maxFrameBytes);
  const acks: string[] = [];
  const raw: Buffer[] = [];
  let notify = () => {};
  socket.on('data', (chunk) => {
    for (const f of decoder.push(chunk)) {
      if (f.kind !== 'message') continue;
      raw.push(f.payload);
      acks.push(f.payload.toString(encoding));
    }
    notify();
  });
  // The listener may reset a connection it refuses; the test reads that from `closed`.
  socket.on('error', () => {});
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return {
    socket,
    acks,
    raw,
    closed,
    waitFor: (count, timeoutMs = 3000) =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`got ${acks.length} ACKs, wanted ${count}`)), timeoutMs);
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

/** An SIU^S12 the default profile reads. `ack` is `|||MSH-15|MSH-16` for enhanced mode, empty for original mode. */
export const message = (id: string, ack = '', birthDate = '19800102') =>
  [
    `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20240501||SIU^S12^SIU_S12|${id}|P|2.5.1${ack}`,
    'SCH|APT-1^SC||||||||||^^^20240610093000',
    `PID|1||P-1^^^SC^MR||DOE^JANE||${birthDate}|F`,
    segment('IN1', { 1: '1', 3: '62308', 4: 'Cigna', 17: 'SEL', 36: 'M-1' }),
  ].join('\r');

export const msa = (ack: string) => {
  const parsed = parseHl7Message(ack);
  return { code: parsed.first('MSA')?.value(1), echoes: parsed.first('MSA')?.value(2), id: parsed.header.value(10), err: parsed.first('ERR') };
};

/** A listener per test and the clients opened to it, all closed after each test. */
export function listenerUnderTest() {
  let listener: MllpListener | undefined;
  let port = 0;
  let clients: Client[] = [];
  afterEach(async () => {
    for (const c of clients) c.socket.destroy();
    clients = [];
    await listener?.stop();
    listener = undefined;
  });
  return {
    async start(options: MllpListenerOptions): Promise<MllpListener> {
      listener = new MllpListener(options);
      ({ port } = await listener.start());
      return listener;
    },
    async open(encoding?: BufferEncoding): Promise<Client> {
      const c = await client(port, encoding);
      clients.push(c);
      return c;
    },
  };
}
