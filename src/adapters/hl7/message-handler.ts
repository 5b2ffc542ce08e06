import type { Ack } from './ack';
import { ackFor, handleHl7Message, type Hl7HandlerOptions, type Hl7Result } from './handle-message';

export interface MessageHandlerOptions extends Omit<Hl7HandlerOptions, 'receivedAt'> {
  /**
   * Keeps the result (the service stores checks and dead letters here). The ACKs are sent only
   * after it resolves; if it throws, the listener answers AR (CE in enhanced mode) and
   * dead-letters the message.
   */
  onResult?: (result: Hl7Result, message: string) => Promise<void>;
  /** The clock, for receivedAt and the ACKs' MSH-7. */
  now?: () => Date;
}

/** The handler an MllpListener takes: handle the message, keep the result, then acknowledge. */
export function createMessageHandler(options: MessageHandlerOptions): (message: string) => Promise<Ack[]> {
  const now = options.now ?? (() => new Date());
  return async (message) => {
    const receivedAt = now();
    const result = await handleHl7Message(message, { ...options, receivedAt: receivedAt.toISOString() });
    await options.onResult?.(result, message);
    return ackFor(result, { now: receivedAt });
  };
}
