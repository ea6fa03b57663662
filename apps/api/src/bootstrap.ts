import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type { NestApplicationOptions } from '@nestjs/common';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { AppError, LOGGER, RequestTraces, openAIError, tracingEnabled } from '@app/common';
import type { AppConfig, Logger } from '@app/common';
import { installAuthHook } from './auth/auth.hook';
import { routeKey } from './auth/route-access';
import { ListenerFactory, isAdminSurface, isApiDocument, isProbe, onAdminListener } from './common/admin-listener';
import { refuseBeforeBody, unknownUrl } from './common/refuse';
import { readBody } from './common/request-body';
import { routeBodies } from './common/route-body';
import { routeFamily } from './common/route-family';
import { installUnknownRouteHook } from './common/unknown-route.hook';
import { MetricsService } from './metrics/metrics.service';

const INVALID_JSON = 'We could not parse the JSON body of your request. The body must be valid JSON.';
/**
 * No request needs deeper JSON; deeper bodies are refused before they reach validation, the queue
 * (whose serialisation has its own depth limit) or a device.
 */
const MAX_JSON_DEPTH = 64;

/** Whether a parsed JSON value nests deeper than MAX_JSON_DEPTH (iterative: no stack overflow). */
function tooDeep(value: unknown): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    if (node !== null && typeof node === 'object') {
      if (depth > MAX_JSON_DEPTH) {
        return true;
      }
      for (const child of Object.values(node)) {
        stack.push([child, depth + 1]);
      }
    }
  }
  return false;
}

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;

/** Options of the Nest application: body parsing is ours (see configureApiApp), the same for every content type. */
export const API_APP_OPTIONS: NestApplicationOptions = { bodyParser: false };

/** Makes the api's HTTP servers, and feeds the admin listener from the application's own handler (see listenApi). */
const listeners = new ListenerFactory();

/**
 * No page of the api may be framed by another site (clickjacking the dashboard's buttons): every
 * answer says so, in the old header and in CSP's (the dashboard's pages send a full CSP of their own).
 */
function noFraming(reply: FastifyReply): void {
  void reply.header('x-frame-options', 'DENY').header('content-security-policy', "frame-ancestors 'none'");
}

/** The Fastify adapter of the api: body limit, errors before routing in our shapes, request ids. */
export function createApiAdapter(config: AppConfig): FastifyAdapter {
  return new FastifyAdapter({
    // Our servers (common/http-server.ts: their timeouts); the admin listener (ADMIN_PORT) serves the
    // same application, so its server needs Fastify's handler.
    serverFactory: listeners.serverFactory,
    bodyLimit: config.BODY_LIMIT_BYTES,
    // Behind a proxy, the client's address (for the failed-authentication limit) is X-Forwarded-For's.
    trustProxy: config.TRUST_PROXY,
    // Errors Fastify raises before routing (a malformed URL) get our error shapes too.
    frameworkErrors: (_error: Error, request: FastifyRequest, reply: FastifyReply) => {
      const message = 'The request URL is malformed.';
      const body =
        routeFamily(request.url) === 'ollama' ? { error: message } : openAIError(400, message, 'invalid_request');
      noFraming(reply);
      void reply.code(400).send(body);
    },
    // A caller's request id is kept when it is sane, so that it can follow a request through logs.
    genReqId: (req: { headers: Record<string, string | string[] | undefined> }) => {
      const given = req.headers['x-request-id'];
      return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID();
    },
  });
}

/**
 * What the api's Fastify instance needs beyond the Nest module: the request id header, the one body
 * parser, request metrics. The process entry point and the medium tests both call it.
 */
export function configureApiApp(app: NestFastifyApplication, config: AppConfig): void {
  const fastify = app.getHttpAdapter().getInstance();
  fastify.addHook('onRequest', async (request, reply) => {
    void reply.header('x-request-id', request.id);
    noFraming(reply);
    if (tracingEnabled()) {
      // The request's span (child of the client's traceparent): ended when the answer is written or
      // the client leaves.
      RequestTraces.begin(request.id, `${request.method} ${request.routeOptions.url ?? 'unmatched'}`, request.headers);
      reply.raw.once('close', () => RequestTraces.end(request.id, reply.statusCode));
    }
  });
  // Before anything else looks at the request: a URL that no route takes is answered unread.
  installUnknownRouteHook(app);
  if (config.ADMIN_PORT) {
    splitListeners(app, app.get<Logger>(LOGGER));
  }
  installAuthHook(app, config);
  // Errors raised by Fastify itself (unparseable JSON, body too large) reach AllExceptionsFilter through
  // Nest's own Fastify error handler, as HttpExceptions (see common/error-body.ts).
  // Bodies are JSON whatever their Content-Type says: Ollama's documented curl examples send none
  // (curl then says application/x-www-form-urlencoded). Fastify's JSON parser refuses __proto__ and
  // constructor.prototype keys; a body that is not JSON gets 400 invalid_json.
  const json = fastify.getDefaultJsonParser('error', 'error');
  fastify.removeAllContentTypeParsers();
  const utf8 = new TextDecoder('utf-8', { fatal: true });
  // The body is read by readBody, not Fastify's parser: a body over the limit is read on (up to a
  // bound) and dropped before the 413, so that a client still sending receives it. Each route's limit
  // is its own where it says so (@BodyLimit), and a route that takes no body never has one kept or
  // parsed (common/route-body.ts). Only known routes get here: unknown ones were answered unread.
  const bodies = routeBodies(app, config.BODY_LIMIT_BYTES);
  const fallback = { takesBody: true, limit: config.BODY_LIMIT_BYTES };
  fastify.addContentTypeParser('*', (req, payload, done) => {
    const policy = bodies.get(routeKey(req.method, req.routeOptions.url ?? '')) ?? fallback;
    readBody(payload, Number(req.headers['content-length']), policy.limit, policy.takesBody).then(
      (body) => parse(req, body, done),
      (error: Error) => done(error, undefined),
    );
  });
  const parse = (req: FastifyRequest, body: Buffer, done: (err: Error | null, body?: unknown) => void) => {
    let text: string;
    try {
      text = utf8.decode(body);
    } catch {
      done(new AppError('invalid_json', 'The request body is not valid UTF-8 (JSON must be).'), undefined);
      return;
    }
    if (text.trim() === '') {
      done(null, undefined);
      return;
    }
    void json(req, text, (err, value) => {
      if (err) {
        done(new AppError('invalid_json', INVALID_JSON), undefined);
      } else if (tooDeep(value)) {
        done(
          new AppError('invalid_request', `The JSON body is nested more than ${MAX_JSON_DEPTH} levels deep.`),
          undefined,
        );
      } else {
        done(null, value);
      }
    });
  };
  const metrics = app.get(MetricsService);
  fastify.addHook('onResponse', async (request, reply) => {
    metrics.httpRequests.inc({
      route: request.routeOptions.url ?? 'unmatched',
      method: request.method,
      status: String(reply.statusCode),
    });
  });
}

/**
 * With ADMIN_PORT set, the admin API and the dashboard answer only on the admin listener, and the
 * admin listener answers only them (and the health probes, and the API document, which describes the
 * admin API only there): elsewhere they are an unknown URL, the same 404 as any other, before any
 * credential is looked at or any body read.
 */
function splitListeners(app: NestFastifyApplication, logger: Logger): void {
  app
    .getHttpAdapter()
    .getInstance()
    .addHook('onRequest', async (request, reply) => {
      // The matched route, not the raw URL: what is served is decided on what would run.
      const url = request.routeOptions.url ?? request.url;
      const allowed = onAdminListener(request)
        ? isAdminSurface(url) || isProbe(url) || isApiDocument(url)
        : !isAdminSurface(url);
      if (!allowed) {
        return refuseBeforeBody(request, reply, unknownUrl(), logger);
      }
    });
}

/**
 * Starts listening: the public port (API_PORT on HOST) and, with ADMIN_PORT set, the admin listener
 * on ADMIN_HOST (loopback by default). Returns the admin server, to be closed on shutdown.
 */
export async function listenApi(app: NestFastifyApplication, config: AppConfig): Promise<Server | null> {
  await app.listen(config.API_PORT, config.HOST);
  if (!config.ADMIN_PORT) {
    return null;
  }
  const server = listeners.adminServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.ADMIN_PORT, config.ADMIN_HOST, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return server;
}
