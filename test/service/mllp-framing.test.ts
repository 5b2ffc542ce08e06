import { frame, MllpDecoder } from '../../src/service/mllp-framing';

const texts = (frames: ReturnType<MllpDecoder['push']>) => frames.map((f) => (f.kind === 'message' ? f.payload.toString() : `oversized:${f.head.toString()}`));

describe('MllpDecoder', () => {
  it('returns each complete frame, several from one chunk', () => {
    const decoder = new MllpDecoder(1024);
    expect(texts(decoder.push(Buffer.concat([frame('A'), frame('B'), frame('C')])))).toEqual(['A', 'B', 'C']);
  });

  it('keeps a partial frame until the rest arrives, even a byte at a time', () => {
    const decoder = new MllpDecoder(1024);
    const bytes = Buffer.concat([frame('MSH|one'), frame('MSH|two')]);
    const got: string[] = [];
    for (const byte of bytes) got.push(...texts(decoder.push(Buffer.from([byte]))));
    expect(got).toEqual(['MSH|one', 'MSH|two']);
  });

  it('ignores bytes between frames and an FS not followed by CR', () => {
    const decoder = new MllpDecoder(1024);
    const inner = Buffer.concat([Buffer.from([0x0b]), Buffer.from('a'), Buffer.from([0x1c]), Buffer.from('b'), Buffer.from([0x1c, 0x0d])]);
    expect(texts(decoder.push(Buffer.concat([Buffer.from('noise\r\n'), inner])))).toEqual(['a\x1cb']);
  });

  it('reports a frame over the limit once and carries on with the next', () => {
    const decoder = new MllpDecoder(8);
    const big = frame('MSH|0123456789');
    const first = texts(decoder.push(big.subarray(0, 12)));
    expect(first).toEqual(['oversized:MSH|0123456']);
    expect(texts(decoder.push(Buffer.concat([big.subarray(12), frame('ok')])))).toEqual(['ok']);
  });
});
