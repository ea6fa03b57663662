import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { LOGGER } from '@app/common';
import type { Logger } from '@app/common';
import { refuseBeforeBody, unknownUrl } from './refuse';

/**
 * An unknown URL, or a known one with a method it does not take, gets its 404 `unknown_url` as the
 * request's first step, before its body is read: Fastify's own 404 handler would read and parse the
 * body first, for anyone, without credentials.
 */
export function installUnknownRouteHook(app: NestFastifyApplication): void {
  const logger = app.get<Logger>(LOGGER);
  app
    .getHttpAdapter()
    .getInstance()
    .addHook('onRequest', async (request, reply) => {
      if (request.routeOptions.url === undefined) {
        return refuseBeforeBody(request, reply, unknownUrl(), logger);
      }
    });
}
