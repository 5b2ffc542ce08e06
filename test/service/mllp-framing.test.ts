import { CR, frame, FS, MllpDecoder, VT, type DecodedFrame } from '../../src/service/mllp-framing';

const texts = (frames: DecodedFrame[]) =>
  frames.map((f) => {
    switch (f.kind) {
      case 'message':
        return f.payload.toString();
      case 'oversized':
        return `oversized ${f.bytes}:${f.head.toString()}`;
      case 'aborted':
        return `aborted ${f.cause} ${f.bytes}:${f.fragment.toString()}`;
    }
  });
const bytes = (...parts: Array<string | number>) => Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from([p]))));

describe('MllpDecoder', () => {
  it('returns each complete frame, several from one chunk', () => {
    const decoder = new MllpDecoder(1024);
    expect(texts(decoder.push(Buffer.concat([frame('A'), frame('B'), frame('C')])))).toEqual(['A', 'B', 'C']);
  });

  it('keeps a partial frame until the rest arrives, even a byte at a time', () => {
    const decoder = new MllpDecoder(1024);
    const all = Buffer.concat([frame('MSH|one'), frame('MSH|two')]);
    const got: string[] = [];
    for (const byte of all) got.push(...texts(decoder.push(Buffer.from([byte]))));
    expect(got).toEqual(['MSH|one', 'MSH|two']);
  });

  it('ignores bytes between frames', () => {
    const decoder = new MllpDecoder(1024);
    expect(texts(decoder.push(bytes('noise\r\n', VT, 'a', FS, CR, '\n\n', VT, 'b', FS, CR)))).toEqual(['a', 'b']);
  });

  it('ends a frame at FS without CR: FS then VT, FS then other bytes, FS at the end of what has come', () => {
    const decoder = new MllpDecoder(1024);
    expect(texts(decoder.push(bytes(VT, 'a', FS, VT, 'b', FS, '\n', VT, 'c', FS)))).toEqual(['a', 'b', 'c']);
    // The CR that would have ended "c" arrives late: it is a stray byte, not a frame.
    expect(texts(decoder.push(bytes(CR, VT, 'd', FS, CR)))).toEqual(['d']);
  });

  it('reports a frame cut short by a new VT as aborted, and reads the new frame', () => {
    const decoder = new MllpDecoder(1024);
    expect(texts(decoder.push(bytes(VT, 'MSH|half', VT, VT, 'MSH|whole', FS, CR)))).toEqual(['aborted restarted 8:MSH|half', 'MSH|whole']);
  });

  it('reports the unfinished frame when the connection ends, and nothing when none is open', () => {
    const decoder = new MllpDecoder(1024);
    expect(texts(decoder.push(bytes(VT, 'a', FS, VT, 'MSH|par')))).toEqual(['a']);
    expect(texts(decoder.end())).toEqual(['aborted unfinished 7:MSH|par']);
    expect(texts(decoder.end())).toEqual([]);
  });

  it('reports a frame over the limit once, when it ends, keeping only its first bytes, and carries on', () => {
    const decoder = new MllpDecoder(8);
    const big = frame('MSH|0123456789');
    expect(texts(decoder.push(big.subarray(0, 12)))).toEqual([]);
    expect(decoder.bufferedBytes).toBe(8);
    expect(texts(decoder.push(Buffer.concat([big.subarray(12), frame('ok')])))).toEqual(['oversized 14:MSH|0123', 'ok']);
    expect(decoder.bufferedBytes).toBe(0);
  });

  it('holds no more than the limit however long a frame runs', () => {
    const decoder = new MllpDecoder(1000);
    decoder.push(bytes(VT));
    const chunk = Buffer.alloc(64 * 1024, 'x');
    for (let i = 0; i < 200; i++) decoder.push(chunk);
    expect(decoder.bufferedBytes).toBe(1000);
    expect(texts(decoder.push(bytes(FS, CR)))[0]).toMatch(/^oversized 13107200:x{1000}$/);
  });

  it('decodes in time linear in the bytes: 1 MiB in 64-byte chunks takes as long as a few large chunks would', () => {
    const payload = Buffer.alloc(1024 * 1024, 'x');
    const all = frame(payload);
    const decoder = new MllpDecoder(2 * 1024 * 1024);
    const started = performance.now();
    const got: DecodedFrame[] = [];
    for (let i = 0; i < all.length; i += 64) got.push(...decoder.push(all.subarray(i, i + 64)));
    const elapsed = performance.now() - started;
    expect(got).toHaveLength(1);
    expect(got[0]?.kind === 'message' && got[0].payload.equals(payload)).toBe(true);
    // Joining the buffer on every chunk (the quadratic way) took 3.8 s here; linear takes milliseconds.
    expect(elapsed).toBeLessThan(400);
  });

  it('searches a chunk of many start bytes once, not once per start byte', () => {
    const decoder = new MllpDecoder(1024);
    const starts = Buffer.alloc(1024 * 1024, VT);
    const started = performance.now();
    expect(texts(decoder.push(Buffer.concat([starts, bytes('MSH|x', FS, CR)])))).toEqual(['MSH|x']);
    expect(performance.now() - started).toBeLessThan(400);
  });
});
