import type { Socket } from 'node:net';
import { MllpDecoder, VT, type DecodedFrame } from './mllp-framing';
import type { MllpLog, MllpStats } from './mllp-stats';

export interface ConnectionLimits {
  maxFrameBytes: number;
  /** Frames received but not yet answered, past which the connection stops reading. */
  maxInFlightMessages: number;
  /** Bytes of those frames, past which the connection stops reading. */
  maxBufferedBytes: number;
  /** No bytes either way and nothing being answered for this long: the connection is closed. 0: never. */
  idleTimeoutMs: number;
  /**
   * A frame begun and no byte of it for this long: its connection counts as quiet when room is
   * made for a new one (quietSince). A frame crosses a network in milliseconds.
   */
  midFrameQuietMs: number;
}

export interface ConnectionContext {
  limits: ConnectionLimits;
  /** The ACK frames for one decoded frame, or undefined to drop the connection without an answer. */
  answer: (frame: DecodedFrame) => Promise<Buffer[] | undefined>;
  stats: MllpStats;
  log?: MllpLog | undefined;
  remote: string;
  /**
   * The socket closed and nothing it sent is being handled: until then the connection holds its
   * place under maxConnections, as one reset by its sender has its frames handled after it closes.
   */
  gone: () => void;
}

/**
 * One MLLP connection. Frames are answered one after another, so answers leave in the order the
 * frames came. The memory a sender can make us hold is bounded: the unfinished frame holds at most
 * maxFrameBytes (the decoder keeps no more), and when the frames waiting to be answered reach
 * maxInFlightMessages or maxBufferedBytes the socket stops reading until they drop below, so
 * TCP's own flow control slows the sender. Answers honour write() returning false: the next frame
 * is answered only once the sender has read the last answers.
 */
export class MllpConnection {
  private readonly decoder: MllpDecoder;
  private readonly waiting: DecodedFrame[] = [];
  private waitingBytes = 0;
  private working = false;
  private paused = false;
  /** Answers written that the sender has not read: waiting for the socket to drain. */
  private blocked = false;
  /**
   * The sender half-closed, or the connection went idle: answer what is left, then close. Reset by
   * the sender: what is left is handled all the same, no answer going back.
   */
  private finishing: 'end' | 'idle' | 'reset' | undefined;
  /** When the sender last sent anything. */
  private lastHeard = Date.now();
  /** What the connection sent before its first VT, while that may still begin an HTTP request line (opensAsHttp); undefined once it cannot. */
  private lead: Buffer | undefined = Buffer.alloc(0);
  /** The socket closed; `gone` is told once nothing is being handled either, and then `told`. */
  private closed: boolean | 'told' = false;

  constructor(
    private readonly socket: Socket,
    private readonly context: ConnectionContext,
  ) {
    this.decoder = new MllpDecoder(context.limits.maxFrameBytes);
    socket.on('data', (chunk: Buffer) => this.receive(chunk));
    socket.on('end', () => this.finish('end'));
    socket.on('close', () => {
      this.closed = true;
      this.goneIfDone();
    });
    // A peer that resets the connection is normal; it must not take the process down, nor lose what it sent:
    // frames received and not yet answered are handled (the sender, unanswered, sends them again: a resend changes
    // nothing), and a frame begun is kept as a dead letter, as one left unfinished at a close is.
    socket.on('error', () => {
      this.finishing = 'reset';
      socket.destroy();
      this.enqueue(this.decoder.end());
    });
    if (context.limits.idleTimeoutMs > 0) {
      socket.setTimeout(context.limits.idleTimeoutMs);
      socket.on('timeout', () => this.idle());
    }
  }

  /**
   * Since when the connection has been quiet (nothing received since, nothing being answered or
   * owed), or undefined while it is not: closing a quiet one loses nothing. A frame begun is quiet
   * only once its sender has sent nothing for midFrameQuietMs: else one byte a connection would
   * keep the PMS out again, until they idled out.
   */
  quietSince(now = Date.now()): number | undefined {
    const busy = this.working || this.waiting.length > 0 || this.blocked || this.finishing !== undefined;
    if (busy || (this.decoder.midFrame && now - this.lastHeard < this.context.limits.midFrameQuietMs)) return undefined;
    return this.lastHeard;
  }

  /** Closes a quiet connection to make room for a new one (the listener's choice); a frame begun is kept, as at an idle close. */
  closeForRoom(): void {
    this.context.stats.connectionsClosedIdle++;
    this.context.log?.info({ remote: this.context.remote, quietMs: Date.now() - this.lastHeard }, 'MLLP connection closed for a new one: the quiet longest of maxConnections open');
    if (this.decoder.midFrame) this.finish('idle');
    else this.socket.destroy();
  }

  private receive(chunk: Buffer): void {
    this.lastHeard = Date.now();
    this.context.stats.bytesReceived += chunk.length;
    if (this.lead !== undefined && this.opensAsHttp(chunk)) {
      this.context.log?.info({ remote: this.context.remote }, 'MLLP connection closed: it opened as an HTTP request, not MLLP');
      this.socket.destroy();
      return;
    }
    this.enqueue(this.decoder.push(chunk));
    const { maxInFlightMessages, maxBufferedBytes } = this.context.limits;
    if (!this.paused && (this.waiting.length >= maxInFlightMessages || this.waitingBytes >= maxBufferedBytes)) {
      this.paused = true;
      this.context.stats.readsPaused++;
      this.socket.pause();
    }
  }

  /**
   * Whether the connection opens with an HTTP request line. A web page open in a browser on any
   * machine that reaches this port can POST to it cross-site without a preflight, a frame in its
   * text/plain body, which the decoder would find past the headers and take as the PMS's message:
   * the page would book, cancel or change a patient's insurance. No MLLP sender begins so. Decided
   * before the connection's first VT is decoded: the request line comes first, if in pieces.
   */
  private opensAsHttp(chunk: Buffer): boolean {
    const vt = chunk.indexOf(VT);
    const lead = Buffer.concat([this.lead ?? Buffer.alloc(0), vt === -1 ? chunk : chunk.subarray(0, vt)]).subarray(0, HTTP_LEAD_BYTES);
    this.lead = vt === -1 && lead.length < HTTP_LEAD_BYTES ? lead : undefined;
    return HTTP_REQUEST_LINE.test(lead.toString('latin1'));
  }

  private enqueue(frames: DecodedFrame[]): void {
    for (const frame of frames) {
      this.context.stats.framesReceived++;
      this.waiting.push(frame);
      this.waitingBytes += size(frame);
    }
    void this.work();
  }

  private finish(why: 'end' | 'idle'): void {
    this.finishing ??= why;
    this.enqueue(this.decoder.end());
  }

  private idle(): void {
    // Looked at once what arrived meanwhile is read: this process held up past the idle time (a loaded machine, a long
    // collection, a host suspended) runs the timer before the reads held up with it, and a sender still sending was closed as idle.
    setImmediate(() => this.idleNow());
  }

  private idleNow(): void {
    // Heard meanwhile: that read put the timeout off.
    if (this.socket.destroyed || Date.now() - this.lastHeard < this.context.limits.idleTimeoutMs) return;
    // Answers waiting for the sender to read them, and none read for so long: a sender that never
    // reads would hold its connection, and a place under maxConnections, for good. What it sent is
    // committed or unanswered, either way sent again, so closing loses nothing.
    if (this.blocked) {
      this.context.stats.connectionsClosedIdle++;
      this.context.log?.info({ remote: this.context.remote, idleTimeoutMs: this.context.limits.idleTimeoutMs }, 'MLLP connection not reading its ACKs; closed');
      this.socket.destroy();
      return;
    }
    // Still answering (a slow handler): not idle; look again later.
    if (this.working || this.waiting.length > 0) {
      this.socket.setTimeout(this.context.limits.idleTimeoutMs);
      return;
    }
    this.context.stats.connectionsClosedIdle++;
    this.context.log?.info({ remote: this.context.remote, idleTimeoutMs: this.context.limits.idleTimeoutMs }, 'MLLP connection idle; closed');
    this.finish('idle');
  }

  private async work(): Promise<void> {
    if (this.working) return;
    this.working = true;
    try {
      for (let next = this.waiting[0]; next !== undefined && (!this.socket.destroyed || this.finishing === 'reset'); next = this.waiting[0]) {
        const acks = await this.context.answer(next);
        if (acks === undefined) {
          this.socket.destroy();
          return;
        }
        await this.write(acks);
        this.waiting.shift();
        this.waitingBytes -= size(next);
        this.resumeIfRoom();
      }
    } catch {
      this.socket.destroy();
      return;
    } finally {
      this.working = false;
      this.goneIfDone();
    }
    if (this.finishing === 'end') this.socket.end();
    else if (this.finishing === 'idle') this.socket.destroy();
  }

  private goneIfDone(): void {
    if (this.closed !== true || this.working) return;
    this.closed = 'told';
    this.context.gone();
  }

  private resumeIfRoom(): void {
    const { maxInFlightMessages, maxBufferedBytes } = this.context.limits;
    if (this.paused && this.waiting.length < maxInFlightMessages && this.waitingBytes < maxBufferedBytes) {
      this.paused = false;
      this.socket.resume();
    }
  }

  private async write(frames: readonly Buffer[]): Promise<void> {
    let room = true;
    for (const frame of frames) if (!this.socket.destroyed) room = this.socket.write(frame);
    if (room || this.socket.destroyed) return;
    this.blocked = true;
    await new Promise<void>((resolve) => {
      const done = () => {
        this.socket.off('drain', done).off('close', done);
        this.blocked = false;
        resolve();
      };
      this.socket.on('drain', done).on('close', done);
    });
  }
}

/** An HTTP method and its space, the longest (OPTIONS, CONNECT) 8 bytes. */
const HTTP_REQUEST_LINE = /^(?:GET|HEAD|POST|PUT|DELETE|OPTIONS|PATCH|TRACE|CONNECT) /;
const HTTP_LEAD_BYTES = 8;

function size(frame: DecodedFrame): number {
  switch (frame.kind) {
    case 'message':
      return frame.payload.length;
    case 'oversized':
      return frame.head.length;
    case 'aborted':
      return frame.fragment.length;
  }
}
