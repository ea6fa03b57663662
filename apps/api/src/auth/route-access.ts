import { ModulesContainer, Reflector } from '@nestjs/core';
import type { INestApplication } from '@nestjs/common';
import { appRoutes } from '../common/app-routes';
import type { AppRoute, RouteKey } from '../common/app-routes';
import { ACCESS_KEY } from './access.decorator';
import type { Access } from './access.decorator';

// Where the access check's callers (auth.hook.ts, bootstrap.ts) import it from.
export { routeKey } from '../common/app-routes';

/** The access a route's metadata declares (@Public, @AdminOnly on it or its controller), else api_key. */
export function accessOf(reflector: Reflector, route: Pick<AppRoute, 'controller' | 'handler'>): Access {
  return reflector.getAllAndOverride<Access | undefined>(ACCESS_KEY, [route.handler, route.controller]) ?? 'api_key';
}

/**
 * The access every route of the app declares, by its Fastify route, read once at boot from the
 * controllers' metadata: so that credentials can be checked in a Fastify hook, before the body is
 * read, by the same declarations the Nest guard enforces.
 */
export function routeAccess(app: INestApplication): Map<RouteKey, Access> {
  const reflector = app.get(Reflector);
  const map = new Map<RouteKey, Access>();
  for (const route of appRoutes(app.get(ModulesContainer))) {
    map.set(route.key, accessOf(reflector, route));
  }
  return map;
}
