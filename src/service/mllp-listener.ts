import { createServer, type Server, type Socket } from 'node:net';
import { z } from 'zod';
import type { Ack } from '../adapters/hl7/ack';
import { charsetOptionsSchema, type CharsetOptions } from './hl7-charset';
import { answerFrame, type DeadLetter } from './mllp-answers';
import { MllpConnection, type ConnectionLimits } from './mllp-connection';
import { emptyStats, type MllpLog, type MllpStats } from './mllp-stats';
import { onceASpell } from '../once-a-spell';

/**
 * An MLLP listener on node:net. Each message gets its acknowledgements (one in original mode; in
 * enhanced mode the accept ACK and then the application ACK, as MSH-15 and MSH-16 ask), in the
 * order the messages arrived, after the handler has finished with it, so the handler decides
 * when a message is safe (stored) before it is acknowledged. A handler that throws gets AR (CE,
 * then AR, in enhanced mode) and the message goes to the dead-letter callback first; if that
 * fails too, the connection is dropped without an ACK, so the sender sends again and nothing is
 * lost. A sender that half-closes after its last message still gets every answer; the
 * connection is closed once they are written.
 *
 * It is built to survive any sender: memory per connection is bounded (see MllpConnection),
 * decoding is linear in the bytes received, frames over maxFrameBytes are answered AR and kept,
 * idle connections are closed and at most maxConnections are open. Framing, character sets and
 * batches are described in mllp-framing.ts, hl7-charset.ts and mllp-batch.ts.
 */
export interface MllpListenerOptions extends CharsetOptions, Partial<ConnectionLimits> {
  /** Answers one message (the frame's text, without MLLP bytes) with its ACKs, in sending order. */
  handler: (message: string) => Promise<readonly Ack[]>;
  /**
   * Receives what the handler could not take: it threw, the frame was too large, undecodable or
   * abandoned. Without it nothing is kept, so a message the handler failed on is not answered (the
   * sender sends it again); a frame too large or undecodable is refused all the same, as a resend would be.
   */
  onDeadLetter?: (letter: DeadLetter) => void | Promise<void>;
  host?: string;
  port?: number;
  /** Connections open at once; one more closes the one quiet longest, or is closed as it arrives while none is quiet. */
  maxConnections?: number;
  log?: MllpLog;
}

export type { DeadLetter } from './mllp-answers';
export type { MllpLog, MllpStats } from './mllp-stats';
export type { Hl7Charset } from '../adapters/hl7/charsets';

const MiB = 1024 * 1024;

const limitsSchema = z.object({
  maxFrameBytes: z.number().int().positive().default(MiB),
  maxInFlightMessages: z.number().int().positive().default(32),
  maxBufferedBytes: z.number().int().positive().default(4 * MiB),
  // Long enough for a quiet practice's kept-open connection between appointments.
  idleTimeoutMs: z.number().int().nonnegative().default(15 * 60_000),
  midFrameQuietMs: z.number().int().nonnegative().default(10_000),
  maxConnections: z.number().int().positive().default(100),
});

const optionsSchema = limitsSchema.extend(charsetOptionsSchema.shape);

export class MllpListener {
  private server: Server | undefined;
  private readonly connections = new Map<Socket, MllpConnection>();
  private readonly counters = emptyStats();
  /** Messages the store cannot take, said once a spell across every connection: each is resent, often at once. */
  private readonly storeRefusalSaid = onceASpell(() => Date.now());
  private readonly settings: z.infer<typeof optionsSchema>;

  constructor(private readonly options: MllpListenerOptions) {
    // The schema keeps only the limits and character sets, not the callbacks.
    const parsed = optionsSchema.safeParse(options);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new Error(`MLLP listener option ${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid'}`);
    }
    this.settings = parsed.data;
  }

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
    for (const socket of this.connections.keys()) socket.destroy();
    await closed;
  }

  /** A snapshot of the counters (connections open, frames, dead letters, ACKs by code). */
  stats(): MllpStats {
    return { ...this.counters, acks: { ...this.counters.acks } };
  }

  private accept(socket: Socket): void {
    const remote = `${socket.remoteAddress ?? '?'}:${socket.remotePort ?? '?'}`;
    const { log } = this.options;
    // Full, the one quiet longest makes room: connections a sender opened and left (an engine that opens one per
    // message and closes none, or anyone who reached the port) would otherwise keep the PMS out until they idle out.
    if (this.connections.size >= this.settings.maxConnections && !this.makeRoom()) {
      this.counters.connectionsRefused++;
      log?.warn({ remote, open: this.connections.size, maxConnections: this.settings.maxConnections }, 'MLLP connection refused: too many open, none quiet');
      socket.destroy();
      return;
    }
    const { settings, counters: stats } = this;
    const connection = new MllpConnection(socket, {
      limits: settings,
      stats,
      log,
      remote,
      answer: (frame) =>
        answerFrame(frame, { handler: this.options.handler, onDeadLetter: this.options.onDeadLetter, charsets: settings, maxFrameBytes: settings.maxFrameBytes, stats, log, remote, storeRefusalSaid: this.storeRefusalSaid }),
      // Counted until what it sent is handled: a sender resetting connection after connection would pile work past the cap.
      gone: () => {
        this.connections.delete(socket);
        this.counters.connectionsOpen = this.connections.size;
      },
    });
    this.connections.set(socket, connection);
    this.counters.connectionsAccepted++;
    this.counters.connectionsOpen = this.connections.size;
  }

  /** Closes the connection quiet longest, if one is; says whether one was. */
  private makeRoom(): boolean {
    let quietest: { socket: Socket; connection: MllpConnection; since: number } | undefined;
    for (const [socket, connection] of this.connections) {
      const since = connection.quietSince();
      if (since !== undefined && (quietest === undefined || since < quietest.since)) quietest = { socket, connection, since };
    }
    if (!quietest) return false;
    // Gone from the count now: its close event comes later, after the new one is counted.
    this.connections.delete(quietest.socket);
    quietest.connection.closeForRoom();
    return true;
  }
}
