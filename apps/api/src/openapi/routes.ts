import type { z } from 'zod';
import { usageQueryParams } from '@app/common';
import { chatCompletionSchema } from '../completions/create-chat-completion.dto';
import { schema as ollamaChatSchema } from '../ollama/ollama-chat.dto';
import { showSchema as ollamaShowSchema } from '../ollama/ollama-models';
import { ADMIN_ROUTES } from './admin-routes';
import * as api from './schemas';

/** One route of the document: what it takes and what it answers. */
export interface RouteDoc {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  /** The path as OpenAPI writes it: `/v1/models/{model}`. */
  path: string;
  summary: string;
  tag: 'Models' | 'Chat' | 'Tasks' | 'Usage' | 'Ollama' | 'Operations' | 'Admin' | 'Dashboard';
  auth: 'public' | 'api_key' | 'admin';
  params?: Record<string, string>;
  query?: z.ZodObject;
  body?: { schema: z.ZodType; required: boolean };
  /** The success answer: a registered schema (JSON), or other media types with a description. */
  ok: { status: number; description: string; json?: z.ZodType; other?: Record<string, string> };
  /** Error statuses this route can answer with (beyond those of its auth). */
  errors: number[];
}

/**
 * Every route of the api: the OpenAPI document is built from this table, with the request schemas
 * the controllers validate with and the response schemas of schemas.ts. A medium test checks that the
 * table and the application's routes are the same set.
 */
export const ROUTES: RouteDoc[] = [
  {
    method: 'get',
    path: '/healthz',
    summary: 'Liveness',
    tag: 'Operations',
    auth: 'public',
    ok: { status: 200, description: 'Up', json: api.health },
    errors: [],
  },
  {
    method: 'get',
    path: '/readyz',
    summary: 'Readiness: Postgres and Redis answer',
    tag: 'Operations',
    auth: 'public',
    ok: { status: 200, description: 'Ready', json: api.ready },
    errors: [503],
  },
  {
    method: 'get',
    path: '/metrics',
    summary: 'Prometheus metrics',
    tag: 'Operations',
    auth: 'public',
    ok: {
      status: 200,
      description: 'Prometheus text format',
      other: { 'text/plain': 'Prometheus exposition format 0.0.4' },
    },
    errors: [],
  },
  {
    method: 'get',
    path: '/openapi.json',
    summary: 'This document',
    tag: 'Operations',
    auth: 'public',
    ok: { status: 200, description: 'The OpenAPI 3.1 document', other: { 'application/json': 'OpenAPI 3.1' } },
    errors: [],
  },
  {
    method: 'get',
    path: '/v1/models',
    summary: 'List the models enabled for your organization',
    tag: 'Models',
    auth: 'api_key',
    ok: { status: 200, description: 'The models', json: api.modelList },
    errors: [],
  },
  {
    method: 'get',
    path: '/v1/models/{model}',
    summary: 'Retrieve a model',
    tag: 'Models',
    auth: 'api_key',
    params: { model: api.MODEL },
    ok: { status: 200, description: 'The model', json: api.model },
    errors: [404],
  },
  {
    method: 'post',
    path: '/v1/chat/completions',
    summary: 'Create a chat completion (OpenAI-compatible)',
    tag: 'Chat',
    auth: 'api_key',
    body: { schema: chatCompletionSchema, required: true },
    ok: {
      status: 200,
      description:
        'The completion; with `stream: true`, Server-Sent Events of ChatCompletionChunk ending in `data: [DONE]`',
      json: api.chatCompletion,
      other: { 'text/event-stream': 'data: {ChatCompletionChunk}\\n\\n … data: [DONE]\\n\\n' },
    },
    errors: [400, 404, 413, 502, 504],
  },
  {
    method: 'get',
    path: '/v1/tasks/{address}',
    summary: 'A task record of your organization',
    tag: 'Tasks',
    auth: 'api_key',
    params: { address: api.ADDRESS },
    ok: { status: 200, description: 'The task', json: api.task },
    errors: [404],
  },
  {
    method: 'get',
    path: '/v1/usage',
    summary: 'Usage of your organization',
    tag: 'Usage',
    auth: 'api_key',
    query: usageQueryParams,
    ok: { status: 200, description: 'The report', json: api.usageReport },
    errors: [400],
  },
  {
    method: 'post',
    path: '/api/chat',
    summary: 'Chat (Ollama-compatible)',
    tag: 'Ollama',
    auth: 'api_key',
    body: { schema: ollamaChatSchema, required: true },
    ok: {
      status: 200,
      description: 'The answer; with `stream: true`, NDJSON lines (done: false … then done: true)',
      json: api.ollamaChat,
      other: { 'application/x-ndjson': 'One JSON object per line' },
    },
    errors: [400, 404, 413, 502, 504],
  },
  {
    method: 'post',
    path: '/api/show',
    summary: 'Show a model (Ollama-compatible)',
    tag: 'Ollama',
    auth: 'api_key',
    body: { schema: ollamaShowSchema, required: true },
    ok: { status: 200, description: 'The model', json: api.ollamaShow },
    errors: [400, 404],
  },
  {
    method: 'get',
    path: '/api/ps',
    summary: 'Models with a device online (Ollama-compatible)',
    tag: 'Ollama',
    auth: 'api_key',
    ok: { status: 200, description: 'The models', json: api.ollamaPs },
    errors: [],
  },
  {
    method: 'post',
    path: '/v2/ollama/api/chat',
    summary: 'Chat, at the OpenGPU relay’s path (alias of /api/chat)',
    tag: 'Ollama',
    auth: 'api_key',
    body: { schema: ollamaChatSchema, required: true },
    ok: {
      status: 200,
      description: 'As /api/chat',
      json: api.ollamaChat,
      other: { 'application/x-ndjson': 'One JSON object per line' },
    },
    errors: [400, 404, 413, 502, 504],
  },
  {
    method: 'post',
    path: '/v2/vllm/v1/chat/completions',
    summary: 'Chat completion, at the OpenGPU relay’s vLLM path (direct mode only)',
    tag: 'Chat',
    auth: 'api_key',
    body: { schema: chatCompletionSchema, required: true },
    ok: {
      status: 200,
      description: 'As /v1/chat/completions, always in direct mode',
      json: api.chatCompletion,
      other: { 'text/event-stream': 'data: {ChatCompletionChunk}\\n\\n … data: [DONE]\\n\\n' },
    },
    errors: [400, 404, 413, 502, 504],
  },
  {
    method: 'get',
    path: '/api/tags',
    summary: 'List models (Ollama-compatible)',
    tag: 'Ollama',
    auth: 'api_key',
    ok: { status: 200, description: 'The models', json: api.ollamaTags },
    errors: [],
  },
  {
    method: 'get',
    path: '/api/version',
    summary: 'Ollama API version',
    tag: 'Ollama',
    auth: 'public',
    ok: { status: 200, description: 'The version', json: api.ollamaVersion },
    errors: [],
  },
  ...ADMIN_ROUTES,
];
