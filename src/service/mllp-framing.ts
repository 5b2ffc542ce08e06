/**
 * MLLP framing: <VT> message <FS><CR>. TCP delivers bytes, not frames: one chunk may hold several
 * frames, a frame may arrive in many chunks, and bytes may stray between frames. The decoder keeps
 * what it has not finished and hands back every complete frame, in order.
 */
export const VT = 0x0b;
export const FS = 0x1c;
export const CR = 0x0d;

export type DecodedFrame = { kind: 'message'; payload: Buffer } | { kind: 'oversized'; head: Buffer };

export class MllpDecoder {
  private buffer: Buffer = Buffer.alloc(0);
  private inFrame = false;
  /** Set while skipping the rest of a frame that outgrew the limit. */
  private skipping = false;

  constructor(private readonly maxFrameBytes: number) {}

  push(chunk: Buffer): DecodedFrame[] {
    const frames: DecodedFrame[] = [];
    let data: Buffer = this.buffer.length > 0 ? Buffer.concat([this.buffer, chunk]) : chunk;
    this.buffer = Buffer.alloc(0);
    for (;;) {
      if (!this.inFrame) {
        const start = data.indexOf(VT);
        if (start === -1) return frames; // bytes outside a frame carry nothing to answer
        data = data.subarray(start + 1);
        this.inFrame = true;
      }
      const end = findEnd(data);
      if (end === -1) {
        if (this.skipping) {
          // Keep a trailing FS in case its CR comes in the next chunk.
          this.buffer = data.length > 0 && data[data.length - 1] === FS ? data.subarray(data.length - 1) : Buffer.alloc(0);
        } else if (data.length > this.maxFrameBytes) {
          frames.push({ kind: 'oversized', head: Buffer.from(data.subarray(0, 4096)) });
          this.skipping = true;
        } else {
          this.buffer = Buffer.from(data);
        }
        return frames;
      }
      if (!this.skipping) {
        const payload = Buffer.from(data.subarray(0, end));
        frames.push(payload.length > this.maxFrameBytes ? { kind: 'oversized', head: payload.subarray(0, 4096) } : { kind: 'message', payload });
      }
      this.skipping = false;
      this.inFrame = false;
      data = data.subarray(end + 2);
    }
  }
}

function findEnd(data: Buffer): number {
  for (let i = data.indexOf(FS); i !== -1; i = data.indexOf(FS, i + 1)) {
    if (data[i + 1] === CR) return i;
  }
  return -1;
}

export function frame(message: string, encoding: BufferEncoding = 'utf8'): Buffer {
  return Buffer.concat([Buffer.from([VT]), Buffer.from(message, encoding), Buffer.from([FS, CR])]);
}
