import type { IncomingMessage } from 'node:http';
import type { Server } from 'socket.io';

/**
 * engine.io keeps the HTTP request that opened each connection (its headers, its parser state) for the
 * life of the connection, twice: on the connection (`request`, which socket.io reads only to build the
 * handshake, and the devices namespace uses only the handshake's `auth`) and on the stand-in response
 * its middlewares get (`req`, kept by a listener on the socket). A device's connection lives for
 * days; at ten thousand devices that is 11 MB of heap (bench: 1.1 KB per connection). Both references
 * are dropped once the connection is open, as socket.io's "memory usage" guide suggests.
 */
export function forgetRequests(io: Server): void {
  const responses = new WeakMap<IncomingMessage, { req: unknown }>();
  io.engine.use((req: IncomingMessage, res: { req: unknown }, next: () => void) => {
    responses.set(req, res);
    next();
  });
  io.engine.on('connection', (raw: { request: IncomingMessage | null }) => {
    const res = raw.request && responses.get(raw.request);
    if (res) {
      res.req = null;
    }
    raw.request = null;
  });
}
