import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/** A TCP hop in front of the FHIR server that can be taken down and brought back. */
export async function switchableProxy(targetPort: number): Promise<{ port: number; down: boolean; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const state = { down: false };
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    if (state.down) return socket.destroy();
    const upstream = connect(targetPort, '127.0.0.1');
    socket.pipe(upstream).pipe(socket);
    upstream.on('error', () => socket.destroy());
    socket.on('error', () => upstream.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    get down() {
      return state.down;
    },
    set down(value: boolean) {
      state.down = value;
      if (value) for (const s of sockets) s.destroy();
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
