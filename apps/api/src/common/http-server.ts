import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';

/**
 * How long a client may take to send a request's headers. A client sends them in one go (a few
 * hundred bytes): 10 s covers a slow link's handshake and first packets, and keeps a client that
 * trickles its headers from holding a connection for Node's default of 60 s.
 */
export const HEADERS_TIMEOUT_MS = 10_000;
/**
 * How long a client may take to send a whole request, body included (the answer, a stream of up to
 * MAX_STREAM_MS, is not counted). 60 s lets a body of the default 4 MiB limit arrive at about
 * 560 kbit/s, and ends a trickled request after a minute instead of Node's default five.
 */
export const REQUEST_TIMEOUT_MS = 60_000;
/**
 * How often Node checks the two timeouts above (its default is 30 s, which would let a request run
 * that much past them); a check walks the open connections, cheap at this rate.
 */
export const TIMEOUT_CHECK_INTERVAL_MS = 2_000;
/**
 * How long an idle keep-alive connection stays open: Fastify's own default, longer than the usual
 * load balancers' 60 s, so that the balancer, not the api, closes idle connections (no race where the
 * balancer reuses a connection the api is closing).
 */
export const KEEP_ALIVE_TIMEOUT_MS = 72_000;

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/** An HTTP server of the api (the public port or the admin listener), with the timeouts above. */
export function createHttpServer(handler: Handler): Server {
  const server = createServer(
    {
      headersTimeout: HEADERS_TIMEOUT_MS,
      requestTimeout: REQUEST_TIMEOUT_MS,
      connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS,
    },
    handler,
  );
  server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
  return server;
}
