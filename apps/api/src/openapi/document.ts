import { z } from 'zod';
import { ERROR_STATUS } from '@app/common';
import type { Access } from '../auth/access.decorator';
import { isAdminSurface } from '../common/admin-listener';
import { routeFamily } from '../common/route-family';
import { ROUTE_TAGS } from './api-route.decorator';
import { components } from './components';
import type { DocumentedRoute } from './documented-routes';
import { errorBody, ollamaError } from './error-bodies';

type Json = Record<string, unknown>;

/** JSON Schema as OpenAPI 3.1 embeds it (draft 2020-12), without the `$schema` of a document of its own. */
function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Json {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, {
    target: 'draft-2020-12',
    io,
    // A transform or a refinement has no JSON Schema: its input type stands for it.
    unrepresentable: 'any',
  }) as Json;
  return rest;
}

const ref = (schema: z.ZodType): Json => {
  const id = components.get(schema)?.id;
  if (!id) {
    throw new Error('a response schema of the OpenAPI document is not registered in components');
  }
  return { $ref: `#/components/schemas/${id}` };
};

/** Statuses every route of an access kind can answer with, beside its own. */
const AUTH_ERRORS: Record<Access, number[]> = {
  public: [500],
  // 429: too many failed authentications from the address; 503: the key lookup cannot reach Postgres.
  api_key: [401, 429, 500, 503],
  admin: [401, 500, 503],
};
const SECURITY: Record<Access, Json[]> = {
  public: [],
  api_key: [{ apiKey: [] }, { apiKeyHeader: [] }],
  admin: [{ adminToken: [] }],
};

/** What each status means, and the codes (of libs/common's ERROR_STATUS) it carries. */
function errorDescription(status: number): string {
  const codes = Object.entries(ERROR_STATUS)
    .filter(([, s]) => s === status)
    .map(([code]) => `\`${code}\``);
  return codes.length ? `Error: ${codes.join(', ')}` : 'Error';
}

function operation(route: DocumentedRoute): Json {
  const { description } = route;
  const ollama = routeFamily(route.path) === 'ollama';
  const parameters = [
    ...route.params.map((name) => ({
      name,
      in: 'path',
      required: true,
      description: description.params?.[name],
      schema: { type: 'string' },
    })),
    ...Object.entries(description.query?.shape ?? {}).map(([name, field]) => ({
      name,
      in: 'query',
      required: !(field as z.ZodType).safeParse(undefined).success,
      description: (field as z.ZodType).description,
      schema: jsonSchema(field as z.ZodType, 'input'),
    })),
  ];
  const content: Json = {};
  if (description.ok.json) {
    content['application/json'] = { schema: ref(description.ok.json) };
  }
  for (const [type, text] of Object.entries(description.ok.other ?? {})) {
    content[type] = { schema: { type: 'string', description: text } };
  }
  const responses: Json = { [route.status]: { description: description.ok.description, content } };
  for (const status of [...new Set([...(description.errors ?? []), ...AUTH_ERRORS[route.auth]])].sort()) {
    const schema = description.errorBodies?.[status] ?? (ollama ? ollamaError : errorBody);
    responses[status] = {
      description: errorDescription(status),
      content: { 'application/json': { schema: ref(schema) } },
    };
  }
  return {
    operationId: `${route.method}${route.path.replace(/[^A-Za-z0-9]+(.)?/g, (_, c: string | undefined) => (c ?? '').toUpperCase())}`,
    summary: description.summary,
    tags: [description.tag],
    security: SECURITY[route.auth],
    ...(parameters.length ? { parameters } : {}),
    ...(description.body
      ? {
          requestBody: {
            required: description.body.required,
            content: { 'application/json': { schema: jsonSchema(description.body.schema, 'input') } },
          },
        }
      : {}),
    responses,
  };
}

/** The names of the component schemas that `value` refers to (`$ref: #/components/schemas/<name>`). */
function refsIn(value: unknown, into: Set<string>): Set<string> {
  if (Array.isArray(value)) {
    value.forEach((v) => refsIn(v, into));
  } else if (value && typeof value === 'object') {
    for (const [key, v] of Object.entries(value)) {
      if (key === '$ref' && typeof v === 'string' && v.startsWith('#/components/schemas/')) {
        into.add(v.slice('#/components/schemas/'.length));
      } else {
        refsIn(v, into);
      }
    }
  }
  return into;
}

/** Only the schemas that the paths use, directly or through other schemas. */
function usedSchemas(paths: Json, schemas: Record<string, Json>): Record<string, Json> {
  const used = refsIn(paths, new Set());
  for (const pending = [...used]; pending.length > 0;) {
    for (const name of refsIn(schemas[pending.pop()!], new Set())) {
      if (!used.has(name)) {
        used.add(name);
        pending.push(name);
      }
    }
  }
  return Object.fromEntries(Object.entries(schemas).filter(([name]) => used.has(name)));
}

/**
 * The OpenAPI 3.1 document of the api, built from the routes of the application and their
 * descriptions (@ApiRoute), over the zod schemas: the request schemas the controllers validate with
 * (so the document cannot drift from what the api accepts) and the response schemas registered in
 * `components` beside each feature (checked against real answers by the e2e suite). Without `admin`,
 * the document of the public port when the admin surface has a listener of its own (ADMIN_PORT): no
 * admin or dashboard route, nor their schemas.
 */
export function buildOpenApiDocument(
  version: string,
  routes: DocumentedRoute[],
  { admin = true }: { admin?: boolean } = {},
): Json {
  // Grouped as the tags are listed (readers scan the document by group); in the app's order within a group.
  const shown = routes
    .filter((r) => admin || !isAdminSurface(r.path))
    .sort((a, b) => ROUTE_TAGS.indexOf(a.description.tag) - ROUTE_TAGS.indexOf(b.description.tag));
  const paths: Record<string, Json> = {};
  for (const route of shown) {
    paths[route.path] = { ...paths[route.path], [route.method]: operation(route) };
  }
  const { schemas } = z.toJSONSchema(components, {
    target: 'draft-2020-12',
    uri: (id) => `#/components/schemas/${id}`,
    unrepresentable: 'any',
  }) as { schemas: Record<string, Json> };
  for (const schema of Object.values(schemas)) {
    delete schema.$schema;
    delete schema.id;
  }
  const tags = ROUTE_TAGS.filter((tag) => shown.some((route) => route.description.tag === tag));
  return {
    openapi: '3.1.0',
    info: {
      title: 'Switchyard',
      version,
      description: `A multi-tenant relay for LLM inference: an OpenAI-compatible and an Ollama-compatible API served by devices${admin ? ', and the admin API' : ''}. See docs/api.md.`,
    },
    servers: [{ url: '/' }],
    tags: tags.map((name) => ({ name })),
    paths,
    components: {
      schemas: admin ? schemas : usedSchemas(paths, schemas),
      securitySchemes: {
        apiKey: {
          type: 'http',
          scheme: 'bearer',
          description: 'An API key of an organization: `Authorization: Bearer sy_…`',
        },
        apiKeyHeader: { type: 'apiKey', in: 'header', name: 'X-API-Key', description: 'The same API key as a header' },
        ...(admin
          ? {
              adminToken: {
                type: 'http',
                scheme: 'bearer',
                description: 'The server’s ADMIN_TOKEN: `Authorization: Bearer …`',
              },
            }
          : {}),
      },
    },
  };
}
