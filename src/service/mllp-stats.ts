import type { AckCode } from '../adapters/hl7/ack';

/** pino's shape, so a pino logger fits. Entries carry addresses, sizes and counts, never content. */
export interface MllpLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  /** What is said at info once a spell, the rest of the spell (a pino logger has it; one without says nothing then). */
  debug?(obj: object, msg: string): void;
}

/** Counters since start (connectionsOpen is a level), for the service to publish as metrics. */
export interface MllpStats {
  connectionsOpen: number;
  connectionsAccepted: number;
  /** Refused because maxConnections were open. */
  connectionsRefused: number;
  connectionsClosedIdle: number;
  bytesReceived: number;
  framesReceived: number;
  /** Messages given to the handler (each message of a batch counts). */
  messagesHandled: number;
  framesOversized: number;
  framesAborted: number;
  /** Frames whose bytes do not fit the character set MSH-18 (or the configuration) names. */
  framesUndecodable: number;
  deadLetters: number;
  /** Times a connection stopped reading because it had too much waiting to be answered. */
  readsPaused: number;
  acks: Record<AckCode, number>;
}

export function emptyStats(): MllpStats {
  return {
    connectionsOpen: 0,
    connectionsAccepted: 0,
    connectionsRefused: 0,
    connectionsClosedIdle: 0,
    bytesReceived: 0,
    framesReceived: 0,
    messagesHandled: 0,
    framesOversized: 0,
    framesAborted: 0,
    framesUndecodable: 0,
    deadLetters: 0,
    readsPaused: 0,
    acks: { AA: 0, AE: 0, AR: 0, CA: 0, CE: 0, CR: 0 },
  };
}
