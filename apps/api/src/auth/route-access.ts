import { RequestMethod } from '@nestjs/common';
import { METHOD_METADATA, PATH_METADATA } from '@nestjs/common/constants';
import { DiscoveryService, MetadataScanner, ModulesContainer, Reflector } from '@nestjs/core';
import type { INestApplication } from '@nestjs/common';
import { ACCESS_KEY } from './access.decorator';
import type { Access } from './access.decorator';

/** `METHOD /path/:param` as Fastify names a route. */
export type RouteKey = string;

export const routeKey = (method: string, url: string): RouteKey => `${method.toUpperCase()} ${url}`;

/** One route of the app, with what its metadata is read from. */
export interface AppRoute {
  key: RouteKey;
  controller: new (...args: unknown[]) => unknown;
  /** The handler's name on the controller's prototype. */
  name: string;
  handler: () => unknown;
}

/** Every route of the app's controllers, by its Fastify route, read from their metadata. */
export function appRoutes(app: INestApplication): AppRoute[] {
  const discovery = new DiscoveryService(app.get(ModulesContainer));
  const scanner = new MetadataScanner();
  const routes: AppRoute[] = [];
  for (const wrapper of discovery.getControllers()) {
    const controller = wrapper.metatype as (new (...args: unknown[]) => unknown) | null;
    if (!controller) {
      continue;
    }
    const prefixes = [Reflect.getMetadata(PATH_METADATA, controller) as string | string[] | undefined].flat();
    for (const name of scanner.getAllMethodNames(controller.prototype)) {
      const handler = (controller.prototype as Record<string, unknown>)[name] as () => unknown;
      const method = Reflect.getMetadata(METHOD_METADATA, handler) as RequestMethod | undefined;
      if (method === undefined) {
        continue;
      }
      const subs = [Reflect.getMetadata(PATH_METADATA, handler) as string | string[] | undefined].flat();
      for (const prefix of prefixes) {
        for (const sub of subs) {
          const path = `/${[prefix, sub].filter((p) => p && p !== '/').join('/')}`.replace(/\/+/g, '/');
          routes.push({ key: routeKey(RequestMethod[method], path), controller, name, handler });
        }
      }
    }
  }
  return routes;
}

/**
 * The access every route of the app declares (@Public, @AdminOnly, else api_key), by its Fastify
 * route, read once at boot from the controllers' metadata: so that credentials can be checked in a
 * Fastify hook, before the body is read, by the same declarations the Nest guard enforces.
 */
export function routeAccess(app: INestApplication): Map<RouteKey, Access> {
  const reflector = app.get(Reflector);
  const map = new Map<RouteKey, Access>();
  for (const { key, controller, handler } of appRoutes(app)) {
    map.set(key, reflector.getAllAndOverride<Access | undefined>(ACCESS_KEY, [handler, controller]) ?? 'api_key');
  }
  return map;
}
