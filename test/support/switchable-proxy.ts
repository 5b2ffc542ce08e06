import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * A TCP hop in front of a server that can be taken down, or frozen (connections kept, nothing
 * passed on: a network that drops packets), and brought back.
 */
export async function switchableProxy(targetPort: number): Promise<{ port: number; down: boolean; frozen: boolean; readonly open: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const state = { down: false, frozen: false };
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    if (state.down) return socket.destroy();
    const upstream = connect(targetPort, '127.0.0.1');
    // While frozen, what arrives is dropped, never delivered late.
    socket.on('data', (chunk: Buffer) => void (state.frozen || upstream.write(chunk)));
    upstream.on('data', (chunk: Buffer) => void (state.frozen || socket.write(chunk)));
    socket.on('end', () => upstream.end());
    upstream.on('end', () => socket.end());
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
    /** Connections from clients still open. */
    get open() {
      return sockets.size;
    },
    get frozen() {
      return state.frozen;
    },
    set frozen(value: boolean) {
      state.frozen = value;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
