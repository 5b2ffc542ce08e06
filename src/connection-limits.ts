import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { sendProblem } from './problem-details';
import { onceASpell } from './once-a-spell';

/**
 * Requests one connection may have in hand at once. Node reads pipelined requests off a socket
 * while the answers to those before them are still being made, and stops reading only once answers
 * wait to be written: with answers that wait on the store (/healthz, /metrics, a webhook's commit),
 * a peer that pipelined requests and read nothing had over a hundred thousand in hand, some 150 MB
 * a connection, and ten such peers a gigabyte. Past this many, a request is answered 429 at once,
 * and the answers the peer does not read fill its socket, which stops Node reading it.
 */
export const IN_HAND_PER_CONNECTION = 32;

const inHand = new WeakMap<Socket, number>();

/**
 * Counts a request against its connection until its answer is done, or answers it 429 and says
 * false when the connection has IN_HAND_PER_CONNECTION in hand already. No client but one that
 * pipelines has more than one.
 */
export function takeInHand(req: IncomingMessage, res: ServerResponse): boolean {
  const { socket } = req;
  const held = inHand.get(socket) ?? 0;
  if (held >= IN_HAND_PER_CONNECTION) {
    const detail = `more than ${IN_HAND_PER_CONNECTION} requests in hand on one connection: read the answers before sending more`;
    sendProblem(res, 429, detail);
    return false;
  }
  inHand.set(socket, held + 1);
  res.once('close', () => inHand.set(socket, (inHand.get(socket) ?? 1) - 1));
  return true;
}

/**
 * Connections open at once to serve's HTTP face; past this, a new one is closed as it comes. The
 * service's webhook, a FHIR server's notifications and a scraper keep a few each, but a peer on the
 * network (serve listening beyond this machine) could open tens of thousands of idle ones and spend
 * the process's file descriptors, which the store, the chart's and the service's connections and
 * MLLP's need: MLLP has its own cap (maxConnections, 100).
 */
export const HTTP_MAX_CONNECTIONS = 1000;

/**
 * Holds `server` to HTTP_MAX_CONNECTIONS, said at warn once a spell to `log` (none while it gives
 * none): a sender whose connections are closed as they come sees resets and nothing else.
 */
export function capConnections(server: Server, log: () => { warn(obj: object, msg: string): void } | undefined): void {
  server.maxConnections = HTTP_MAX_CONNECTIONS;
  const dropSaid = onceASpell(Date.now);
  server.on('drop', () => {
    const said = log();
    if (said && dropSaid()) said.warn({ maxConnections: HTTP_MAX_CONNECTIONS }, 'HTTP connection refused: too many open (said once in ten minutes)');
  });
}

/**
 * Bytes of request bodies being read at once, over every connection. A body must be read whole
 * before a webhook's signature can be checked or a notification read, and each may be 1 MiB: 400
 * connections sending theirs slowly took serve from 176 to 548 MB, and more would have taken the
 * rest. Past this, a body is refused 503 with Retry-After, which the service's webhook and a FHIR
 * server's notification retry (the webhook's fallback is the poll): no sender of real traffic
 * comes near it (a webhook is some 30 KB, 200 a second read in milliseconds).
 */
export const BODY_BYTES_IN_HAND = 64 * 1024 * 1024;
let bodyBytesInHand = 0;
/** The bytes of request bodies being read now, under BODY_BYTES_IN_HAND: what a test waits for before it finds the budget spent. */
export const bodyBytesReading = (): number => bodyBytesInHand;

/** A request's body: read whole, past the limit (unread further), the budget spent, or cut off by its sender. */
export type BodyRead = { kind: 'read'; text: string } | { kind: 'too-large' } | { kind: 'busy' } | { kind: 'cut-off' };

export async function readBody(req: IncomingMessage, limit: number): Promise<BodyRead> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of req) {
      const bytes = (chunk as Buffer).length;
      if (size + bytes > limit) return { kind: 'too-large' };
      if (bodyBytesInHand + bytes > BODY_BYTES_IN_HAND) return { kind: 'busy' };
      size += bytes;
      bodyBytesInHand += bytes;
      chunks.push(chunk as Buffer);
    }
  } catch {
    return { kind: 'cut-off' };
  } finally {
    bodyBytesInHand -= size;
  }
  return { kind: 'read', text: Buffer.concat(chunks).toString('utf8') };
}

/**
 * How long a request may take to arrive whole. Node's own is 300 s: a sender holding a body half
 * sent holds its place under BODY_BYTES_IN_HAND that long, and some 64 of them turned every webhook
 * away for five minutes. The service and a FHIR server send a body in milliseconds; the embedded
 * chart's transactions come from this machine.
 */
export const REQUEST_TIMEOUT_MS = 30_000;

/** A server's request timing for createServer, past which Node answers 408 and closes. */
export function requestTiming(requestTimeout = REQUEST_TIMEOUT_MS): { requestTimeout: number; headersTimeout: number; connectionsCheckingInterval: number } {
  // Node looks for requests past their time once per connectionsCheckingInterval (30 s unless told).
  return { requestTimeout, headersTimeout: requestTimeout, connectionsCheckingInterval: Math.min(1000, requestTimeout) };
}
