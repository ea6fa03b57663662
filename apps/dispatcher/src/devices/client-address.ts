import type { IncomingMessage } from 'node:http';
import type { Server, Socket } from 'socket.io';

/**
 * The client address of a request as the api's Fastify takes it with `trustProxy: true`: the first
 * (left-most, furthest from us) address of X-Forwarded-For, else the connection's peer.
 */
export function forwardedAddress(header: string | string[] | undefined, peer: string): string {
  const first = (Array.isArray(header) ? header.join(',') : (header ?? '')).split(',')[0].trim();
  return first || peer;
}

/**
 * Which address each device connection comes from, for the limit of failed handshakes per address:
 * the peer, or behind a proxy that sets X-Forwarded-For (TRUST_PROXY) the address it names, without
 * which every device behind the proxy would share its one address and its one limit. Read when the
 * connection opens, while engine.io still has its request (forgetRequests drops it afterwards): call
 * this before forgetRequests.
 */
export class ClientAddresses {
  private readonly forwarded = new WeakMap<object, string>();

  constructor(
    io: Server,
    private readonly trustProxy: boolean,
  ) {
    if (trustProxy) {
      io.engine.on('connection', (raw: { request: IncomingMessage | null; remoteAddress: string }) => {
        const header = raw.request?.headers['x-forwarded-for'];
        if (header !== undefined) {
          this.forwarded.set(raw, forwardedAddress(header, raw.remoteAddress));
        }
      });
    }
  }

  /** The address a socket's connection comes from. */
  of(socket: Socket): string {
    return (this.trustProxy && this.forwarded.get(socket.conn)) || socket.handshake.address;
  }
}
