import { RequestMethod } from '@nestjs/common';
import { METHOD_METADATA, PATH_METADATA } from '@nestjs/common/constants';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import type { ModulesContainer } from '@nestjs/core';

/** `METHOD /path/:param` as Fastify names a route. */
export type RouteKey = string;

export const routeKey = (method: string, url: string): RouteKey => `${method.toUpperCase()} ${url}`;

/** One route of the app, with what its metadata is read from. */
export interface AppRoute {
  key: RouteKey;
  /** The HTTP method, upper case (`GET`). */
  method: string;
  /** The path as Nest and Fastify write it: `/v1/models/:model`. */
  path: string;
  controller: new (...args: unknown[]) => unknown;
  /** The handler's name on the controller's prototype. */
  name: string;
  handler: () => unknown;
}

/**
 * Every route of the app's controllers, by its Fastify route, read from their metadata: what the
 * access check, the body policy and the OpenAPI document are built from, so that they cover the same
 * routes as the router.
 */
export function appRoutes(modules: ModulesContainer): AppRoute[] {
  const discovery = new DiscoveryService(modules);
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
      const requestMethod = Reflect.getMetadata(METHOD_METADATA, handler) as RequestMethod | undefined;
      if (requestMethod === undefined) {
        continue;
      }
      const method = RequestMethod[requestMethod];
      const subs = [Reflect.getMetadata(PATH_METADATA, handler) as string | string[] | undefined].flat();
      for (const prefix of prefixes) {
        for (const sub of subs) {
          const path = `/${[prefix, sub].filter((p) => p && p !== '/').join('/')}`.replace(/\/+/g, '/');
          routes.push({ key: routeKey(method, path), method, path, controller, name, handler });
        }
      }
    }
  }
  return routes;
}
