import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { buildAck, readMessageHeader, type Ack } from '../../src/adapters/hl7';
import { frame, FS, VT } from '../../src/service/mllp-framing';
import { MllpListener, type DeadLetter, type MllpListenerOptions } from '../../src/service/mllp-listener';
import { until } from '../sync/harness';
import { listenerUnderTest, message, msa, type Client } from './mllp-client';

/** The listener under senders that push too much, too slowly, or too often; real sockets on loopback. */
const MiB = 1024 * 1024;
const aa = async (m: string): Promise<Ack[]> => [buildAck(readMessageHeader(m), { code: 'AA' })];

/** Writes `total` bytes of `chunk` over and over, honouring backpressure; stops when the reader stops reading for `stallMs`. */
async function push(c: Client, chunk: Buffer, total: number, stallMs: number): Promise<{ sent: number; stalled: boolean }> {
  let sent = 0;
  while (sent < total) {
    sent += chunk.length;
    if (c.socket.write(chunk)) continue;
    const drained = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), stallMs);
      c.socket.once('drain', () => {
        clearTimeout(timer);
        resolve(true);
      });
    });
    if (!drained) return { sent, stalled: true };
  }
  return { sent, stalled: false };
}

// What is held, not what waits for the collector: when V8 collects the buffers read and dropped
// is its own choice (on Node 24 it let some 190 MB wait where Node 20 let 64 MB).
setFlagsFromString('--expose-gc');
const collect = runInNewContext('gc') as () => void;

/** Memory after a full collection; buffers collected are freed a turn later, and counted once a second collection has run. */
const memory = async () => {
  collect();
  await new Promise((resolve) => setImmediate(resolve));
  collect();
  const { rss, arrayBuffers } = process.memoryUsage();
  return { rss, arrayBuffers };
};

describe('MllpListener limits', () => {
  const mllp = listenerUnderTest();
  const open = () => mllp.open();
  let listener: MllpListener;
  let deadLetters: DeadLetter[];
  let logged: Array<{ level: string; obj: object; msg: string }>;

  async function start(options: Partial<MllpListenerOptions> = {}) {
    listener = await mllp.start({
      handler: aa,
      onDeadLetter: (l) => void deadLetters.push(l),
      log: {
        info: (obj, msg) => logged.push({ level: 'info', obj, msg }),
        warn: (obj, msg) => logged.push({ level: 'warn', obj, msg }),
      },
      ...options,
    });
  }

  beforeEach(() => {
    deadLetters = [];
    logged = [];
  });

  it('keeps memory bounded when the handler stalls and the sender pushes 300 MB, then answers everything once the handler goes on', async () => {
    let release = () => {};
    const stalled = new Promise<void>((resolve) => (release = resolve));
    let handled = 0;
    await start({
      handler: async (m) => {
        handled++;
        await stalled;
        return aa(m);
      },
    });
    const c = await open();
    const oneFrame = frame(`${message('P')}\rNTE|1||${'x'.repeat(64 * 1024)}`);
    const before = await memory();
    const { sent, stalled: backpressure } = await push(c, oneFrame, 300 * MiB, 500);
    const after = await memory();
    expect(backpressure).toBe(true);
    expect(sent).toBeLessThan(64 * MiB);
    expect(after.rss - before.rss).toBeLessThan(64 * MiB);
    expect(after.arrayBuffers - before.arrayBuffers).toBeLessThan(64 * MiB);
    expect(handled).toBe(1);
    const stats = listener.stats();
    expect(stats.readsPaused).toBeGreaterThanOrEqual(1);
    // At most the in-flight limit was read off the socket; the rest waits in the kernel and the sender.
    expect(stats.framesReceived).toBeLessThanOrEqual(32 + 1);

    release();
    const frames = Math.floor(sent / oneFrame.length);
    await c.waitFor(frames, 8000);
    expect(c.acks.every((a) => msa(a).code === 'AA')).toBe(true);
  });

  it('stops reading from a sender that does not read its ACKs, instead of buffering the answers', async () => {
    // Large ACKs fill the socket buffers toward the sender quickly.
    await start({ handler: async (m) => (await aa(m)).map((ack) => ({ ...ack, text: `${ack.text}\rNTE|1||${'y'.repeat(16 * 1024)}` })) });
    const c = await open();
    c.socket.pause();
    const before = await memory();
    const { sent, stalled } = await push(c, frame(message('W')), 300 * MiB, 500);
    const after = await memory();
    expect(stalled).toBe(true);
    expect(sent).toBeLessThan(64 * MiB);
    expect(after.arrayBuffers - before.arrayBuffers).toBeLessThan(64 * MiB);
    expect(listener.stats().readsPaused).toBeGreaterThanOrEqual(1);
  });

  it('closes a connection whose sender reads none of its ACKs for the idle time, rather than holding its place for good', async () => {
    await start({ idleTimeoutMs: 300, handler: async (m) => (await aa(m)).map((ack) => ({ ...ack, text: `${ack.text}\rNTE|1||${'y'.repeat(16 * 1024)}` })) });
    const c = await open();
    c.socket.pause();
    // A stall a loaded machine makes (no drain for 500 ms, the listener slow but reading) left every ACK in the
    // kernel's buffers, none waiting on the listener, which then closed the connection as merely idle: the
    // stall waited for is the listener's, which outlasts it.
    const { stalled } = await push(c, frame(message('N')), 64 * MiB, 3000);
    expect(stalled).toBe(true);
    await c.closed;
    expect(listener.stats().connectionsClosedIdle).toBe(1);
    expect(logged).toContainEqual({ level: 'info', obj: { remote: expect.stringMatching(/^127\.0\.0\.1:\d+$/), idleTimeoutMs: 300 }, msg: 'MLLP connection not reading its ACKs; closed' });
  });

  it('holds no more than the frame limit while a sender streams one endless frame, then answers it AR and keeps its head', async () => {
    await start({ maxFrameBytes: MiB });
    const c = await open();
    c.socket.write(Buffer.from([VT]));
    const before = await memory();
    const { sent } = await push(c, Buffer.alloc(64 * 1024, 'x'), 256 * MiB, 2000);
    const after = await memory();
    expect(sent).toBe(256 * MiB);
    // The frame's first MiB, kept for the dead letter, and no more: holding the frame would be all 256 MB.
    expect(after.arrayBuffers - before.arrayBuffers).toBeLessThan(8 * MiB);
    c.socket.write(Buffer.from([FS]));
    const [ack] = await c.waitFor(1);
    expect(msa(ack ?? '')).toMatchObject({ code: 'AR' });
    expect(deadLetters).toHaveLength(1);
    expect(deadLetters[0]?.bytes?.length).toBe(MiB);
    expect(deadLetters[0]?.reason).toBe(`frame of ${256 * MiB} bytes is larger than ${MiB} bytes (first ${MiB} bytes kept)`);
    expect(logged).toContainEqual({ level: 'warn', obj: expect.objectContaining({ bytes: 256 * MiB, limit: MiB }), msg: 'MLLP frame over the size limit' });
  });

  it("answers another connection's message while a 1 MiB frame is still arriving in 64-byte chunks", async () => {
    await start({ maxFrameBytes: 2 * MiB });
    const slow = await open();
    const quick = await open();
    slow.socket.setNoDelay(true);
    const big = frame(`${message('BIG')}\rNTE|1||${'x'.repeat(MiB)}`);
    let sent = 0;
    // How much of the big frame had been sent when the small message's ACK came: an order, not a time.
    let sentWhenAnswered: Promise<number> | undefined;
    for (; sent < big.length; sent += 64) {
      slow.socket.write(big.subarray(sent, sent + 64));
      // One chunk per turn of the event loop, so the listener reads them as they come.
      await new Promise((r) => setImmediate(r));
      if (sentWhenAnswered === undefined && sent >= big.length / 4) {
        quick.socket.write(frame(message('SMALL')));
        sentWhenAnswered = quick.waitFor(1).then(() => sent);
      }
    }
    expect(msa((await quick.waitFor(1))[0] ?? '')).toMatchObject({ code: 'AA', echoes: 'SMALL' });
    // Answered while three quarters of a megabyte were still to come, not queued behind the frame.
    expect(await sentWhenAnswered).toBeLessThan(big.length);
    expect(msa((await slow.waitFor(1))[0] ?? '')).toMatchObject({ code: 'AA', echoes: 'BIG' });
  });

  it('closes an idle connection, keeping what it left unfinished, but not one whose message is still being handled', async () => {
    await start({
      idleTimeoutMs: 150,
      handler: async (m) => {
        if (readMessageHeader(m)?.controlId === 'SLOW') await new Promise((r) => setTimeout(r, 400));
        return aa(m);
      },
    });
    const idle = await open();
    const partial = await open();
    const busy = await open();
    partial.socket.write(Buffer.concat([Buffer.from([VT]), Buffer.from('MSH|^~\\&|')]));
    busy.socket.write(frame(message('SLOW')));
    await Promise.all([idle.closed, partial.closed]);
    expect(msa((await busy.waitFor(1))[0] ?? '')).toMatchObject({ code: 'AA', echoes: 'SLOW' });
    expect(deadLetters.map((l) => l.message)).toEqual(['MSH|^~\\&|']);
    await busy.closed;
    expect(listener.stats().connectionsClosedIdle).toBe(3);
    expect(logged.filter((l) => l.msg === 'MLLP connection idle; closed')).toHaveLength(3);
  });

  it('closes no connection as idle whose sender sent while this process was held up past the idle time: what arrived is read first', async () => {
    await start({ idleTimeoutMs: 150 });
    const c = await open();
    // From the check phase, so the loop's next turn runs its timers, the listener's timeout come due, before it reads.
    await new Promise((r) => setImmediate(r));
    const [head, rest] = [frame(message('HELD')).subarray(0, 20), frame(message('HELD')).subarray(20)];
    c.socket.write(head);
    // Held up (a loaded machine, a long collection) past the idle time, with the sender's bytes waiting to be read.
    const heldUntil = Date.now() + 400;
    while (Date.now() < heldUntil);
    await new Promise((r) => setTimeout(r, 50));
    c.socket.write(rest);
    expect(msa((await c.waitFor(1))[0] ?? '')).toMatchObject({ code: 'AA', echoes: 'HELD' });
    expect(logged.filter((l) => l.msg === 'MLLP connection idle; closed')).toEqual([]);
  });

  it('makes room for a connection over the cap by closing the one quiet longest, and refuses one only while none is quiet, logging no more than addresses and counts', async () => {
    // Connections a sender opened and left (an engine that opens one per message) kept the PMS out until they idled out, 15 minutes.
    await start({ maxConnections: 2 });
    const left = await open();
    const second = await open();
    second.socket.write(frame(message('STILL')));
    expect(msa((await second.waitFor(1))[0] ?? '')).toMatchObject({ code: 'AA', echoes: 'STILL' });
    const third = await open();
    await left.closed;
    third.socket.write(frame(message('IN')));
    expect(msa((await third.waitFor(1))[0] ?? '')).toMatchObject({ code: 'AA', echoes: 'IN' });
    expect(logged.filter((l) => l.msg === 'MLLP connection closed for a new one: the quiet longest of maxConnections open')).toHaveLength(1);
    // A frame begun is not quiet: with both open ones mid-frame, a new one is refused, and what they send goes on.
    second.socket.write(Buffer.concat([Buffer.from([VT]), Buffer.from('MSH|^~\\&|')]));
    third.socket.write(Buffer.concat([Buffer.from([VT]), Buffer.from('MSH|^~\\&|')]));
    await new Promise((r) => setTimeout(r, 20)); // the listener reads them
    const refused = await open();
    await refused.closed;
    expect(listener.stats()).toMatchObject({ connectionsAccepted: 3, connectionsRefused: 1, connectionsOpen: 2, connectionsClosedIdle: 1 });
    const refusal = logged.find((l) => l.msg === 'MLLP connection refused: too many open, none quiet');
    expect(refusal?.obj).toEqual({ remote: expect.stringMatching(/^127\.0\.0\.1:\d+$/), open: 2, maxConnections: 2 });
    expect(JSON.stringify(logged)).not.toMatch(/DOE|JANE|19800102|M-1/);
  });

  it('counts a connection its sender reset under maxConnections until what it sent is handled, so resets do not pile work past the cap', async () => {
    // Each reset connection's frames are handled after it closes (1ebdf5c): uncounted, a sender that fills a connection and
    // resets it, again and again, had the listener hold maxBufferedBytes and a handler's work each time, with no cap.
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    const handled: string[] = [];
    await start({
      maxConnections: 1,
      handler: async (m) => {
        handled.push(readMessageHeader(m)?.controlId ?? '');
        await held;
        return aa(m);
      },
    });
    const reset = await open();
    reset.socket.write(Buffer.concat([frame(message('R1')), frame(message('R2'))]));
    await until('R1 in hand', async () => handled.length === 1);
    reset.socket.resetAndDestroy();
    await reset.closed;
    const next = await open();
    await until('the next connection refused', async () => listener.stats().connectionsRefused === 1);
    await next.closed;
    expect(listener.stats()).toMatchObject({ connectionsAccepted: 1, connectionsOpen: 1 });
    release();
    await until('R2 handled, the place given back', async () => handled.length === 2 && listener.stats().connectionsOpen === 0);
    const pms = await open();
    pms.socket.write(frame(message('IN')));
    expect(msa((await pms.waitFor(1))[0] ?? '')).toMatchObject({ code: 'AA', echoes: 'IN' });
  });

  it('takes a frame begun and left, one byte a connection, for quiet once its sender has sent nothing for midFrameQuietMs, keeping the fragment', async () => {
    await start({ maxConnections: 2, midFrameQuietMs: 200 });
    const holders = [await open(), await open()];
    for (const holder of holders) holder.socket.write(Buffer.concat([Buffer.from([VT]), Buffer.from('MSH|')]));
    await new Promise((r) => setTimeout(r, 20)); // the listener reads them
    // Just begun: not quiet, the new one is refused.
    const early = await open();
    await early.closed;
    await new Promise((r) => setTimeout(r, 250));
    const pms = await open();
    await Promise.race(holders.map((h) => h.closed));
    pms.socket.write(frame(message('IN')));
    expect(msa((await pms.waitFor(1))[0] ?? '')).toMatchObject({ code: 'AA', echoes: 'IN' });
    expect(listener.stats()).toMatchObject({ connectionsRefused: 1, connectionsClosedIdle: 1 });
    // Kept before the connection closes, as at an idle close.
    expect(deadLetters.map((l) => l.message)).toEqual(['MSH|']);
  });
});
