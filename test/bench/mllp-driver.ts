import { connect } from 'node:net';
import { performance } from 'node:perf_hooks';
import { frame, MllpDecoder } from '../../src/service/mllp-framing';

/** Payers the sandbox verifies; the first answers by webhook (asynchronous), the second at once. */
export const BENCH_PAYERS = [
  { id: '62308', name: 'Cigna' },
  { id: '64246', name: 'Guardian' },
] as const;

/**
 * The n-th booking of a morning: an SIU^S12 for its own patient and appointment, insured with
 * BENCH_PAYERS[payer] (alternating by default), seen on `date` (YYYYMMDD).
 */
export function siuS12(n: number, date: string, payer = n % BENCH_PAYERS.length): string {
  const { id, name } = BENCH_PAYERS[payer] as (typeof BENCH_PAYERS)[number];
  const minute = String(n % 60).padStart(2, '0');
  const in1 = ['IN1', '1', '', id, name, ...Array<string>(12).fill(''), 'SEL', ...Array<string>(18).fill(''), `BENCH${String(n).padStart(7, '0')}`];
  return [
    `MSH|^~\\&|SMILECLOUD|BSD-MAIN|ELIG|BSD|20240501||SIU^S12^SIU_S12|BENCH-${n}|P|2.5.1`,
    `SCH|APT-${n}^SC||||||||||^^^${date}09${minute}00`,
    `PID|1||P-${n}^^^SC^MR||DOE^JANE||19800102|F`,
    in1.join('|'),
  ].join('\r');
}

/** The control id an ACK acknowledges (MSA-2) and its code (MSA-1). */
export function msa(ack: string): { code: string; acknowledges: string } {
  const segment = ack.split('\r').find((s) => s.startsWith('MSA|')) ?? '';
  const [, code = '', acknowledges = ''] = segment.split('|');
  return { code, acknowledges };
}

/**
 * Sends every message over `connections` MLLP connections at once, each connection sending its
 * next message when the ACK of the last one is in (as a PMS interface engine does), and resolves
 * with the ACKs in the order the messages were given.
 */
export async function sendAll(port: number, messages: readonly string[], connections: number): Promise<string[]> {
  const acks: string[] = new Array<string>(messages.length);
  let next = 0;
  const lane = async () => {
    const socket = connect(port, '127.0.0.1');
    socket.setNoDelay(true);
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    const decoder = new MllpDecoder(1 << 20);
    let answered: ((ack: string) => void) | undefined;
    let failed: ((err: Error) => void) | undefined;
    socket.on('data', (chunk: Buffer) => {
      for (const f of decoder.push(chunk)) if (f.kind === 'message') answered?.(f.payload.toString('utf8'));
    });
    socket.on('error', (err) => failed?.(err));
    socket.on('close', () => failed?.(new Error('the listener closed the connection before answering')));
    try {
      while (next < messages.length) {
        const i = next++;
        acks[i] = await new Promise<string>((resolve, reject) => {
          answered = resolve;
          failed = reject;
          socket.write(frame(messages[i] as string));
        });
      }
    } finally {
      failed = undefined;
      socket.destroy();
    }
  };
  await Promise.all(Array.from({ length: connections }, lane));
  return acks;
}

/** sendAll for a worker thread (callInWorker), its arguments as one object; timed there, from the first message sent to the last ACK. */
export async function sendAllFrom(options: { port: number; messages: string[]; connections: number }): Promise<{ acks: string[]; seconds: number }> {
  const start = performance.now();
  const acks = await sendAll(options.port, options.messages, options.connections);
  return { acks, seconds: (performance.now() - start) / 1000 };
}
