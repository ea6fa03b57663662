import { RequestMethod } from '@nestjs/common';
import { METHOD_METADATA, PATH_METADATA } from '@nestjs/common/constants';
import { DiscoveryService, MetadataScanner, ModulesContainer, Reflector } from '@nestjs/core';
import { ACCESS_KEY } from '../../../apps/api/src/auth/access.decorator';
import type { Access } from '../../../apps/api/src/auth/access.decorator';
import type { InProcessApp } from './apps';

export interface Route {
  method: string;
  path: string;
  access: Access;
}

/**
 * Every route of the api's application, with the access its metadata declares (api_key when none).
 * Read from the metadata here, not with the app's own appRoutes, so that a route the app's list
 * missed is still checked.
 */
export function apiRoutes(app: InProcessApp['app']): Route[] {
  const discovery = new DiscoveryService(app.get(ModulesContainer));
  const scanner = new MetadataScanner();
  const reflector = app.get(Reflector);
  const routes: Route[] = [];
  for (const wrapper of discovery.getControllers()) {
    const controller = wrapper.metatype as new (...args: unknown[]) => unknown;
    // A controller (and a handler) may have several paths: a route for each.
    const prefixes = [Reflect.getMetadata(PATH_METADATA, controller) ?? ''].flat() as string[];
    for (const name of scanner.getAllMethodNames(controller.prototype)) {
      const handler = (controller.prototype as Record<string, unknown>)[name] as () => unknown;
      const method = Reflect.getMetadata(METHOD_METADATA, handler) as RequestMethod | undefined;
      if (method === undefined) {
        continue;
      }
      const subs = [Reflect.getMetadata(PATH_METADATA, handler) ?? ''].flat() as string[];
      const access = reflector.getAllAndOverride<Access | undefined>(ACCESS_KEY, [handler, controller]) ?? 'api_key';
      for (const prefix of prefixes) {
        for (const sub of subs) {
          const path = `/${[prefix, sub].filter((p) => p && p !== '/').join('/')}`.replace(/\/+/g, '/');
          routes.push({ method: RequestMethod[method], path, access });
        }
      }
    }
  }
  return routes;
}
