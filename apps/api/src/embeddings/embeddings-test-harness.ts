// The unit specs' harness for the embedding handlers (embeddings.controller.spec.ts here, and
// ollama/ollama-embed.handler.spec.ts, which wraps the same EmbeddingsHandler): a caller, a service
// result, and fakes of the reply and the service that record what the handlers did with them.
// Test code only: nothing but *.spec.ts files imports it.
import { EventEmitter } from 'node:events';
import type { FastifyReply } from 'fastify';
import { encodeVector } from '@app/common';
import type { AppConfig } from '@app/common';
import type { AuthContext } from '../auth/auth-context';
import type { EmbedRequest, EmbedResult } from './embed-request';
import type { EmbeddingsService } from './embeddings.service';

export const caller = { orgId: 'org-1' } as AuthContext;

export const RESULT: EmbedResult = {
  model: 'nomic-embed-text:v1.5',
  mode: 'network',
  vectors: [encodeVector([0.5, 1])],
  promptTokens: 3,
  taskAddresses: ['network:8d0e1c1a-3a43-4d8e-9f4c-6f1d2b7a9c00'],
};

/** A reply as the handlers use it: headers, status, body, and the connection's close. */
export function fakeReply() {
  const raw = Object.assign(new EventEmitter(), { destroyed: false, writableFinished: false });
  const sent: { status?: number; headers: Record<string, string>; body?: unknown } = { headers: {} };
  const reply = {
    raw,
    request: { id: 'req-1' },
    header: (name: string, value: string) => ((sent.headers[name] = value), reply),
    headers: (values: Record<string, string>) => (Object.assign(sent.headers, values), reply),
    type: (value: string) => ((sent.headers['content-type'] = value), reply),
    code: (status: number) => ((sent.status = status), reply),
    send: (body: unknown) => ((sent.body = body), reply),
  };
  const json = () => JSON.parse((sent.body as Buffer).toString('utf8'));
  return { reply: reply as unknown as FastifyReply, raw, sent, json };
}

/** The service as the handlers call it: what it was asked, and an answer to give. */
export function fakeService(
  answer: (signal: AbortSignal) => Promise<{ result: EmbedResult; headers: Record<string, string> } | null>,
) {
  const calls: { request: EmbedRequest; signal: AbortSignal }[] = [];
  const service = {
    // As the real one: each batch's vectors go to onBatch before the answer (here, one batch).
    embed: async (
      _caller: AuthContext,
      request: EmbedRequest,
      signal: AbortSignal,
      onBatch?: (first: number, vectors: string[]) => void,
    ) => {
      calls.push({ request, signal });
      const answered = await answer(signal);
      if (answered) {
        onBatch?.(0, answered.result.vectors);
      }
      return answered;
    },
  };
  return { service: service as unknown as EmbeddingsService, calls };
}

export const config = { DEFAULT_MODEL: 'default-embed' } as AppConfig;
export const headers = { 'x-ratelimit-limit-requests': '60' };
