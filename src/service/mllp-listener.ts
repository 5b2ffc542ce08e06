import { createServer, type Server, type Socket } from 'node:net';
import { acknowledgements, type Ack, type CommitAckCode } from '../adapters/hl7/ack';
import { rejection } from '../adapters/hl7/hl7-errors';
import { readMessageHeader } from '../adapters/hl7/message-header';
import { frame, MllpDecoder, type DecodedFrame } from './mllp-framing';

/**
 * An MLLP listener on node:net. Each message gets its acknowledgements (one in original mode; in
 * enhanced mode the accept ACK and then the application ACK, as MSH-15 and MSH-16 ask), in the
 * order the messages arrived, after the handler has finished with it, so the handler decides
 * when a message is safe (stored) before it is acknowledged. A handler that throws gets AR (CE,
 * then AR, in enhanced mode) and the message goes to the dead-letter callback first; if that
 * fails too, the connection is dropped without an ACK, so the sender sends again and nothing is
 * lost. A sender that half-closes after its last message still gets every answer; the
 * connection is closed once they are written.
 */
export interface MllpListenerOptions {
  /** Answers one message (the frame's text, without MLLP bytes) with its ACKs, in sending order. */
  handler: (message: string) => Promise<readonly Ack[]>;
  /** Receives messages the handler could not take (it threw, or the frame was too large). */
  onDeadLetter?: (letter: { message: string; reason: string; error?: unknown }) => void | Promise<void>;
  host?: string;
  port?: number;
  encoding?: 'utf8' | 'latin1';
  /** Frames larger than this are answered AR (CR in enhanced mode) and skipped; default 1 MiB. */
  maxMessageBytes?: number;
}

export class MllpListener {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();

  constructor(private readonly options: MllpListenerOptions) {}

  /** Starts listening (127.0.0.1 and an OS-assigned port unless told otherwise). */
  async start(): Promise<{ host: string; port: number }> {
    if (this.server) throw new Error('MLLP listener already started');
    const server = createServer({ allowHalfOpen: true }, (socket) => this.accept(socket));
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.options.port ?? 0, this.options.host ?? '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    const address = server.address();
    if (address === null || typeof address === 'string') throw new Error('MLLP listener is not on a TCP port');
    return { host: address.address, port: address.port };
  }

  /** Stops accepting, closes every open connection and waits for the server to close. */
  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of this.sockets) socket.destroy();
    await closed;
  }

  private accept(socket: Socket): void {
    this.sockets.add(socket);
    const encoding = this.options.encoding ?? 'utf8';
    const decoder = new MllpDecoder(this.options.maxMessageBytes ?? 1024 * 1024);
    // Messages on one connection are handled one after another, so their answers leave in order.
    let queue = Promise.resolve();
    const next = (step: () => Promise<void> | void) => {
      queue = queue.then(step).catch(() => {
        socket.destroy();
      });
    };
    socket.on('data', (chunk) => {
      for (const decoded of decoder.push(chunk)) next(() => this.respond(socket, decoded, encoding));
    });
    // The sender is done sending: close our side too once every answer is written.
    socket.on('end', () =>
      next(() => {
        socket.end();
      }),
    );
    // A peer that resets the connection is normal; it must not take the process down.
    socket.on('error', () => socket.destroy());
    socket.on('close', () => this.sockets.delete(socket));
  }

  private async respond(socket: Socket, decoded: DecodedFrame, encoding: BufferEncoding): Promise<void> {
    if (socket.destroyed) return;
    const acks =
      decoded.kind === 'message' ? await this.answer(decoded.payload.toString(encoding)) : await this.oversized(decoded.head.toString(encoding));
    if (acks === undefined) {
      socket.destroy();
      return;
    }
    // An enhanced-mode commit ACK and application ACK go out back to back, before the next message's.
    for (const ack of acks) if (!socket.destroyed) socket.write(frame(ack.text, encoding));
  }

  private async answer(message: string): Promise<readonly Ack[] | undefined> {
    try {
      return await this.options.handler(message);
    } catch (error) {
      const kept = await this.deadLetter({ message, reason: 'the handler failed', error });
      // Not stored: CE asks the sender to send it again.
      return kept ? failure(message, 'CE', 'application internal error') : undefined;
    }
  }

  private async oversized(head: string): Promise<Ack[] | undefined> {
    const limit = this.options.maxMessageBytes ?? 1024 * 1024;
    const kept = await this.deadLetter({ message: head, reason: `frame larger than ${limit} bytes (first bytes kept)` });
    // Sending it again would not make it smaller: CR.
    return kept ? failure(head, 'CR', `message larger than ${limit} bytes`) : undefined;
  }

  private async deadLetter(letter: { message: string; reason: string; error?: unknown }): Promise<boolean> {
    try {
      await this.options.onDeadLetter?.(letter);
      return true;
    } catch {
      return false;
    }
  }
}

function failure(message: string, commit: CommitAckCode, reason: string): Ack[] {
  return acknowledgements(readMessageHeader(message), { commit, application: 'AR', problems: [rejection({ segment: 'MSH' }, 207, reason)] });
}
