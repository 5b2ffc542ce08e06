import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

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
    res.writeHead(429, { 'content-type': 'application/problem+json', connection: 'close' }).end(JSON.stringify({ title: detail, status: 429, detail }));
    return false;
  }
  inHand.set(socket, held + 1);
  res.once('close', () => inHand.set(socket, (inHand.get(socket) ?? 1) - 1));
  return true;
}
