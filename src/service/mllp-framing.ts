/**
 * MLLP framing: <VT> message <FS><CR>. TCP delivers bytes, not frames: one chunk may hold several
 * frames, a frame may arrive in many chunks, and bytes may stray between frames. The decoder keeps
 * the pieces of the frame it has not finished and hands back every complete frame, in order.
 *
 * Decoding is linear in the bytes received: each byte is searched once (a frame's pieces are kept
 * as a list and joined once, when the frame ends), so a large frame in tiny chunks costs no more
 * than the same frame in one chunk.
 *
 * Senders do not all end frames alike, so FS alone ends a frame and the CR after it is optional:
 * a frame ending in FS is answered whether CR, the next VT, a pause or nothing at all follows it.
 * MLLP content never holds VT or FS, so a VT inside an unfinished frame means the sender gave that
 * frame up and began again: the fragment is reported as aborted and the new frame read normally.
 */
export const VT = 0x0b;
export const FS = 0x1c;
export const CR = 0x0d;

export type DecodedFrame =
  | { kind: 'message'; payload: Buffer }
  /** The frame outgrew the limit: its first `maxFrameBytes` bytes are kept, the rest only counted. */
  | { kind: 'oversized'; head: Buffer; bytes: number }
  /** A frame that never ended: cut short by a new VT, or by the connection ending or going idle. */
  | { kind: 'aborted'; fragment: Buffer; bytes: number; cause: 'restarted' | 'unfinished' };

export class MllpDecoder {
  private pieces: Buffer[] = [];
  /** Bytes kept in `pieces`: never more than maxFrameBytes. */
  private kept = 0;
  /** Bytes of the current frame received so far, kept or not. */
  private received = 0;
  private inFrame = false;

  constructor(private readonly maxFrameBytes: number) {}

  /** What the unfinished frame holds in memory. */
  get bufferedBytes(): number {
    return this.kept;
  }

  /** Whether a frame has begun (its VT read) and not ended. */
  get midFrame(): boolean {
    return this.inFrame;
  }

  push(chunk: Buffer): DecodedFrame[] {
    const frames: DecodedFrame[] = [];
    const next = new ByteFinder(chunk);
    let at = 0;
    while (at < chunk.length) {
      if (!this.inFrame) {
        const start = next.find(VT, at);
        if (start === -1) break; // bytes outside a frame carry nothing to answer
        this.inFrame = true;
        at = start + 1;
        continue;
      }
      const vt = next.find(VT, at);
      const fs = next.find(FS, at);
      const stop = fs === -1 ? vt : vt === -1 ? fs : Math.min(vt, fs);
      const until = stop === -1 ? chunk.length : stop;
      if (until > at) this.take(chunk.subarray(at, until));
      if (stop === -1) break;
      if (stop === fs) {
        frames.push(this.finish());
        this.inFrame = false;
        at = chunk[fs + 1] === CR ? fs + 2 : fs + 1;
      } else {
        const aborted = this.abort('restarted');
        if (aborted) frames.push(aborted);
        // Still in a frame: the one the last of these VTs begins.
        at = vt + 1;
        while (chunk[at] === VT) at++;
      }
    }
    return frames;
  }

  /** The connection ended (or is being closed): an unfinished frame is reported, not dropped. */
  end(): DecodedFrame[] {
    const aborted = this.inFrame ? this.abort('unfinished') : undefined;
    this.inFrame = false;
    return aborted ? [aborted] : [];
  }

  private take(piece: Buffer): void {
    this.received += piece.length;
    const room = this.maxFrameBytes - this.kept;
    if (room <= 0) return;
    const kept = piece.length > room ? piece.subarray(0, room) : piece;
    // A small slice of a large chunk would pin the whole chunk in memory: copy it instead.
    this.pieces.push(kept.length * 2 < kept.buffer.byteLength ? Buffer.from(kept) : kept);
    this.kept += kept.length;
  }

  private finish(): DecodedFrame {
    const bytes = this.received;
    const payload = this.drain();
    return bytes > this.maxFrameBytes ? { kind: 'oversized', head: payload, bytes } : { kind: 'message', payload };
  }

  private abort(cause: 'restarted' | 'unfinished'): DecodedFrame | undefined {
    // A VT right after a VT aborts nothing worth keeping.
    if (this.received === 0) return undefined;
    const bytes = this.received;
    return { kind: 'aborted', fragment: this.drain(), bytes, cause };
  }

  private drain(): Buffer {
    const joined = this.pieces.length === 1 ? (this.pieces[0] as Buffer) : Buffer.concat(this.pieces, this.kept);
    this.pieces = [];
    this.kept = 0;
    this.received = 0;
    return joined;
  }
}

/**
 * Finds VT and FS in one chunk, remembering where each was last found, so that however many
 * frames or aborts a chunk holds, no stretch of it is searched twice for the same byte.
 */
class ByteFinder {
  /** Where each byte was last found (-1: not in the rest of the chunk); -2: not searched yet. */
  private vt = -2;
  private fs = -2;

  constructor(private readonly chunk: Buffer) {}

  find(byte: typeof VT | typeof FS, from: number): number {
    const last = byte === VT ? this.vt : this.fs;
    if (last === -1 || last >= from) return last;
    const at = this.chunk.indexOf(byte, from);
    if (byte === VT) this.vt = at;
    else this.fs = at;
    return at;
  }
}

export function frame(message: string | Buffer, encoding: BufferEncoding = 'utf8'): Buffer {
  const body = typeof message === 'string' ? Buffer.from(message, encoding) : message;
  return Buffer.concat([Buffer.from([VT]), body, Buffer.from([FS, CR])]);
}
