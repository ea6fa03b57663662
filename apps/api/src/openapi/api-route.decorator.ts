import { SetMetadata } from '@nestjs/common';
import type { z } from 'zod';

/** The document's groups of routes, in the order it lists them. */
export const ROUTE_TAGS = [
  'Models',
  'Chat',
  'Embeddings',
  'Tasks',
  'Usage',
  'Ollama',
  'Operations',
  'Admin',
  'Dashboard',
] as const;

/** A group of routes in the OpenAPI document. */
export type RouteTag = (typeof ROUTE_TAGS)[number];

/**
 * What the OpenAPI document says of one route beyond what Nest's metadata already says: the method,
 * the path, the access (@Public, @AdminOnly) and the success status (@HttpCode, else Nest's default)
 * are read from the route itself, so that the document cannot disagree with the router on them.
 * Request schemas are the ones the handler validates with; response schemas are registered in
 * `components` (components.ts) and checked against real answers by the e2e suite.
 */
export interface RouteDescription {
  summary: string;
  tag: RouteTag;
  /** Every path parameter of the route, by name: its description. */
  params?: Record<string, string>;
  /** The query string's schema. */
  query?: z.ZodObject;
  /** The body's schema; `required: false` where the handler takes a missing body as `{}`. */
  body?: { schema: z.ZodType; required: boolean };
  /** The success answer: a registered schema (JSON), or other media types with a description. */
  ok: { description: string; json?: z.ZodType; other?: Record<string, string> };
  /** Error statuses this route can answer with, beyond those of its access (401, 429, 500, 503). */
  errors?: number[];
  /** The body of an error status where it is not the route family's error body. */
  errorBodies?: Partial<Record<number, z.ZodType>>;
}

export const API_ROUTE_KEY = 'switchyard:apiRoute';

/** Describes a route for the OpenAPI document (`GET /openapi.json`); every route has one. */
export const ApiRoute = (description: RouteDescription) => SetMetadata(API_ROUTE_KEY, description);
