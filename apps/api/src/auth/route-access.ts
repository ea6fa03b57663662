import { RequestMethod } from '@nestjs/common';
import { METHOD_METADATA, PATH_METADATA } from '@nestjs/common/constants';
import { DiscoveryService, MetadataScanner, ModulesContainer, Reflector } from '@nestjs/core';
import type { INestApplication } from '@nestjs/common';
import { ACCESS_KEY } from './access.decorator';
import type { Access } from './access.decorator';

/** `METHOD /path/:param` as Fastify names a route. */
export type RouteKey = string;

export const routeKey = (method: string, url: string): RouteKey => `${method.toUpperCase()} ${url}`;

/**
 * The access every route of the app declares (@Public, @AdminOnly, else api_key), by its Fastify
 * route, read once at boot from the controllers' metadata: so that credentials can be checked in a
 * Fastify hook, before the body is read, by the same declarations the Nest guard enforces.
 */
export function routeAccess(app: INestApplication): Map<RouteKey, Access> {
  const discovery = new DiscoveryService(app.get(ModulesContainer));
  const scanner = new MetadataScanner();
  const reflector = app.get(Reflector);
  const map = new Map<RouteKey, Access>();
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
      const access = reflector.getAllAndOverride<Access | undefined>(ACCESS_KEY, [handler, controller]) ?? 'api_key';
      const subs = [Reflect.getMetadata(PATH_METADATA, handler) as string | string[] | undefined].flat();
      for (const prefix of prefixes) {
        for (const sub of subs) {
          const path = `/${[prefix, sub].filter((p) => p && p !== '/').join('/')}`.replace(/\/+/g, '/');
          map.set(routeKey(RequestMethod[method], path), access);
        }
      }
    }
  }
  return map;
}
