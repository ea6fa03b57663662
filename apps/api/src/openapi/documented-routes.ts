import { RequestMethod } from '@nestjs/common';
import { HTTP_CODE_METADATA } from '@nestjs/common/constants';
import type { ModulesContainer, Reflector } from '@nestjs/core';
import type { Access } from '../auth/access.decorator';
import { accessOf } from '../auth/route-access';
import { appRoutes } from '../common/app-routes';
import { API_ROUTE_KEY } from './api-route.decorator';
import type { RouteDescription } from './api-route.decorator';

/** One route of the app as the document shows it: what the router says of it, and its description. */
export interface DocumentedRoute {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  /** The path as OpenAPI writes it: `/v1/models/{model}`. */
  path: string;
  /** The path parameters, in the order the path names them. */
  params: string[];
  auth: Access;
  /** The success status: the route's @HttpCode, else Nest's default (201 for POST, 200 otherwise). */
  status: number;
  description: RouteDescription;
}

const METHODS = new Set<string>(['get', 'post', 'put', 'patch', 'delete']);

/**
 * Every route of the application with its description: the @ApiRoute on its handler (the core
 * module's routes get theirs where the api mounts it). A route without one, or whose described path parameters are not its own, stops
 * the document from being built: the document lists every route the api serves, and only those.
 */
export function documentedRoutes(modules: ModulesContainer, reflector: Reflector): DocumentedRoute[] {
  return appRoutes(modules).map((route) => {
    const description = reflector.get<RouteDescription | undefined>(API_ROUTE_KEY, route.handler);
    if (!description) {
      throw new Error(`${route.key} has no @ApiRoute description (apps/api/src/openapi/api-route.decorator.ts)`);
    }
    const method = route.method.toLowerCase();
    if (!METHODS.has(method)) {
      throw new Error(`${route.key}: the OpenAPI document has no place for the method ${route.method}`);
    }
    const params = [...route.path.matchAll(/:(\w+)/g)].map(([, name]) => name);
    const described = Object.keys(description.params ?? {});
    if (params.length !== described.length || params.some((name) => !described.includes(name))) {
      throw new Error(`${route.key} is described with the path parameters [${described.join(', ')}]`);
    }
    const code = Reflect.getMetadata(HTTP_CODE_METADATA, route.handler) as number | undefined;
    return {
      method: method as DocumentedRoute['method'],
      path: route.path.replace(/:(\w+)/g, '{$1}'),
      params,
      auth: accessOf(reflector, route),
      status: code ?? (route.method === RequestMethod[RequestMethod.POST] ? 201 : 200),
      description,
    };
  });
}
