import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { FastifyRequest } from 'fastify';
import { createHttpServer } from './http-server';

/** Marks the requests that came in on the admin listener (ADMIN_PORT), on the raw request. */
const ADMIN_LISTENER = Symbol('switchyard.adminListener');

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/**
 * The operators' surface: the admin API and the dashboard. With ADMIN_PORT set it is served only on
 * the admin listener, so that it can be kept off the network the public port faces.
 */
export function isAdminSurface(url: string): boolean {
  const path = url.split('?')[0];
  return /^\/(admin|dashboard)(\/|$)/.test(path);
}

/** Routes the admin listener serves besides the admin surface: what a probe of that port asks. */
export function isProbe(url: string): boolean {
  return /^\/(healthz|readyz)(\?|$)/.test(url);
}

/** The API's OpenAPI document: the admin listener serves it too, with the admin routes (see OpenApiController). */
export function isApiDocument(url: string): boolean {
  return /^\/openapi\.json(\?|$)/.test(url);
}

/** Whether the request came in on the admin listener. */
export function onAdminListener(request: FastifyRequest): boolean {
  return (request.raw as IncomingMessage & { [ADMIN_LISTENER]?: boolean })[ADMIN_LISTENER] === true;
}

/**
 * Fastify's request handler, captured by its serverFactory, so that a second HTTP server (the admin
 * listener) can feed the same application: one process, one set of routes and hooks, two ports. Both
 * servers are made by createHttpServer (its timeouts).
 */
export class ListenerFactory {
  private handler: Handler | null = null;

  /** For Fastify's `serverFactory` option: the public server, which keeps the handler for the admin one. */
  readonly serverFactory = (handler: Handler): Server => {
    this.handler = handler;
    return createHttpServer(handler);
  };

  /** A server whose requests are marked as coming in on the admin listener. */
  adminServer(): Server {
    const handler = this.handler;
    if (!handler) {
      throw new Error('the admin listener needs the application to be created first');
    }
    return createHttpServer((req, res) => {
      (req as IncomingMessage & { [ADMIN_LISTENER]?: boolean })[ADMIN_LISTENER] = true;
      handler(req, res);
    });
  }
}
