import { SetMetadata } from '@nestjs/common';
import type { INestApplication } from '@nestjs/common';
import { ROUTE_ARGS_METADATA } from '@nestjs/common/constants';
import { RouteParamtypes } from '@nestjs/common/enums/route-paramtypes.enum';
import { ModulesContainer } from '@nestjs/core';
import { appRoutes } from './app-routes';
import type { RouteKey } from './app-routes';

const BODY_LIMIT_KEY = 'switchyard:bodyLimit';

/** A body limit of a route's own (bytes), for a route that must take less than BODY_LIMIT_BYTES. */
export const BodyLimit = (bytes: number) => SetMetadata(BODY_LIMIT_KEY, bytes);

/** What the api reads of a route's body. */
export interface BodyPolicy {
  /**
   * Whether the handler takes a body (a `@Body()` parameter). The body of a route that takes none is
   * read off the wire and dropped, never buffered or parsed.
   */
  takesBody: boolean;
  /** The largest body, in bytes: BODY_LIMIT_BYTES, or less where the route says so (@BodyLimit). */
  limit: number;
}

/** The body policy of every route of the app, read once at boot from the controllers' metadata. */
export function routeBodies(app: INestApplication, defaultLimit: number): Map<RouteKey, BodyPolicy> {
  const map = new Map<RouteKey, BodyPolicy>();
  for (const { key, controller, name, handler } of appRoutes(app.get(ModulesContainer))) {
    const args = (Reflect.getMetadata(ROUTE_ARGS_METADATA, controller, name) ?? {}) as Record<string, unknown>;
    const takesBody = Object.keys(args).some((arg) =>
      [RouteParamtypes.BODY, RouteParamtypes.RAW_BODY].includes(Number(arg.split(':')[0])),
    );
    const own = Reflect.getMetadata(BODY_LIMIT_KEY, handler) as number | undefined;
    map.set(key, { takesBody, limit: Math.min(own ?? defaultLimit, defaultLimit) });
  }
  return map;
}
