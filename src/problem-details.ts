import { STATUS_CODES, type ServerResponse } from 'node:http';

/**
 * An error answered as problem details (RFC 9457): how every HTTP endpoint of serve and of the
 * library answers one, but the FHIR notification endpoint, whose senders read an OperationOutcome.
 * Without a type the problem is about:blank, whose title is the status's own phrase. The
 * connection is closed after it: a request refused may not have been read to its end (too large,
 * too many in hand, unauthenticated), and Node would read and throw away the rest of its body,
 * however long, to take the next request; a peer pipelining past its limit loses the rest too.
 */
export function sendProblem(res: ServerResponse, status: number, detail: string, problem: { type?: string; title?: string; errors?: readonly unknown[] } = {}): void {
  if (res.headersSent) return;
  const { type, title = STATUS_CODES[status] ?? 'Error', errors } = problem;
  res.writeHead(status, { 'content-type': 'application/problem+json', connection: 'close' });
  res.end(JSON.stringify({ ...(type && { type }), title, status, detail, ...(errors && { errors }) }));
}
