import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import * as net from 'node:net';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

/** A real HTTP server on loopback whose answers a test scripts; records every request. */
export async function startScriptedServer(
  handle: (req: RecordedRequest, res: ServerResponse, index: number) => void | Promise<void>,
): Promise<{ url: string; requests: RecordedRequest[]; close(): Promise<void> }> {
  const requests: RecordedRequest[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const recorded = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      requests.push(recorded);
      void handle(recorded, res, requests.length - 1);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': status >= 400 ? 'application/problem+json' : 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

/**
 * A 200 of `mb` megabytes of FHIR JSON's content type, streamed as the client takes it (never held
 * whole here), with its size declared or not; stops when the client hangs up.
 */
export function streamLarge(res: ServerResponse, mb: number, options: { declared: boolean }): void {
  const chunk = 'x'.repeat(1024 * 1024);
  res.writeHead(200, { 'content-type': 'application/fhir+json', ...(options.declared && { 'content-length': String(mb * chunk.length) }) });
  const write = (n: number): void => {
    if (n === 0 || res.destroyed) return void res.end();
    if (res.write(chunk)) return write(n - 1);
    res.once('drain', () => write(n - 1));
  };
  write(mb);
}

/** A request whose target is no URL path: new URL throws on //. */
export const NO_URL_PATH = 'GET // HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';

/**
 * Sends `request` as written on a socket of its own and gives back what was answered: fetch would
 * make a URL of a target such as //, which a server must refuse rather than throw on.
 */
export function rawRequest(baseUrl: string, request: string): Promise<string> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise<string>((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () => socket.end(request));
    let text = '';
    socket.on('data', (d) => (text += String(d))).on('end', () => resolve(text)).on('error', reject);
  });
}
