import { createServer as createHttpServer, request, type IncomingHttpHeaders } from 'node:http';
import { connect, createServer as createTcpServer, type AddressInfo, type Server, type Socket } from 'node:net';

/**
 * The load balancer a deployment of several instances puts in front of them: `tcpBalancer`
 * hands each connection (MLLP) to the next instance in turn, `httpBalancer` each request (the
 * service's webhooks). An instance that refuses the connection (killed) is skipped, as a health
 * check would take it out. `ports` may be changed while it runs: an instance restarted on a new port.
 */
export interface Balancer {
  port: number;
  ports: number[];
  close(): Promise<void>;
}

/** One request as the HTTP balancer passed it on, with the answer; bodies kept in memory, never logged. */
export interface Exchange {
  /** The instance's port; 0 when none took the connection (answered 502). */
  to: number;
  at: number;
  method: string;
  path: string;
  body: string;
  status: number;
  answer: string;
}

export async function tcpBalancer(ports: number[]): Promise<Balancer> {
  const state = { ports, next: 0 };
  const sockets = new Set<Socket>();
  const server = createTcpServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    socket.pause();
    const attempt = (left: number) => {
      if (left === 0) return void socket.destroy();
      const upstream = connect(state.ports[state.next++ % state.ports.length] as number, '127.0.0.1');
      upstream.once('error', () => attempt(left - 1));
      upstream.once('connect', () => {
        upstream.removeAllListeners('error');
        upstream.on('error', () => socket.destroy());
        upstream.on('close', () => socket.destroy());
        socket.on('close', () => upstream.destroy());
        socket.pipe(upstream);
        upstream.pipe(socket);
        socket.resume();
      });
    };
    attempt(state.ports.length);
  });
  return balancer(server, state, () => sockets.forEach((s) => s.destroy()));
}

export async function httpBalancer(ports: number[]): Promise<Balancer & { exchanges: Exchange[] }> {
  const state = { ports, next: 0 };
  const exchanges: Exchange[] = [];
  const server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const exchange: Exchange = { to: 0, at: Date.now(), method: req.method ?? '', path: req.url ?? '', body: body.toString('utf8'), status: 502, answer: '' };
      exchanges.push(exchange);
      const attempt = (left: number) => {
        if (left === 0) return void res.writeHead(502).end();
        const to = state.ports[state.next++ % state.ports.length] as number;
        const headers: IncomingHttpHeaders = { ...req.headers, host: `127.0.0.1:${to}`, connection: 'close' };
        const upstream = request({ host: '127.0.0.1', port: to, method: req.method, path: req.url, headers, agent: false }, (answer) => {
          const parts: Buffer[] = [];
          answer.on('data', (c: Buffer) => parts.push(c));
          answer.on('end', () => {
            Object.assign(exchange, { to, status: answer.statusCode ?? 0, answer: Buffer.concat(parts).toString('utf8') });
            res.writeHead(answer.statusCode ?? 502, answer.headers).end(Buffer.concat(parts));
          });
          answer.on('error', () => res.destroy());
        });
        // Refused: that instance is gone, the next is asked. Any other failure may have reached it: the sender hears of it.
        upstream.on('error', (err: NodeJS.ErrnoException) => (err.code === 'ECONNREFUSED' ? attempt(left - 1) : res.destroy()));
        upstream.end(body);
      };
      attempt(state.ports.length);
    });
  });
  return Object.assign(await balancer(server, state, () => server.closeAllConnections()), { exchanges });
}

async function balancer(server: Server | ReturnType<typeof createHttpServer>, state: { ports: number[] }, drop: () => void): Promise<Balancer> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    get ports() {
      return state.ports;
    },
    set ports(value: number[]) {
      state.ports = value;
    },
    close: () =>
      new Promise<void>((resolve) => {
        drop();
        server.close(() => resolve());
      }),
  };
}
