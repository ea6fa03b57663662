import { z } from 'zod';
import { AppError } from '@app/common';
import type { ChatMessage, ChatParams, ResponseFormat } from '@app/common';
import { DEFAULT_MAX_TOKENS } from '../common/chat-defaults';
import { paramPath } from '../common/validation';

/**
 * Top-level fields of Ollama's /api/chat that Switchyard acts on (keep_alive is known, and ignored).
 * `temperature` at the top level is the OpenGPU relay's; Ollama itself takes it under `options`.
 */
const KNOWN = new Set([
  'model',
  'messages',
  'stream',
  'mode',
  'think',
  'format',
  'tools',
  'options',
  'keep_alive',
  'temperature',
]);
/** Options Switchyard maps; any other option is accepted and listed as ignored. */
const KNOWN_OPTIONS = new Set(['temperature', 'top_p', 'num_predict', 'stop', 'presence_penalty', 'frequency_penalty']);

const toolCall = z.object({
  function: z.object({ name: z.string().min(1), arguments: z.record(z.string(), z.unknown()).default({}) }),
});

const message = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: z.string().default(''),
  images: z.array(z.string()).optional(),
  tool_calls: z.array(toolCall).optional(),
  thinking: z.string().optional(),
  tool_name: z.string().optional(),
});

export const schema = z.object({
  model: z.string().min(1, 'model is required').max(200),
  messages: z.array(message).min(1, 'must contain at least one message'),
  stream: z.boolean().optional(),
  // `opengpu` is the OpenGPU relay's name for the shared pool: a synonym of `network`.
  mode: z.enum(['auto', 'direct', 'network', 'opengpu']).optional(),
  temperature: z.number().min(0).max(2).optional(),
  think: z.union([z.boolean(), z.enum(['low', 'medium', 'high'])]).optional(),
  format: z.union([z.literal('json'), z.record(z.string(), z.unknown())]).optional(),
  tools: z
    .array(
      z.object({
        type: z.literal('function'),
        function: z.object({
          name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be 1-64 letters, digits, underscores or dashes'),
          description: z.string().optional(),
          parameters: z.record(z.string(), z.unknown()).optional(),
        }),
      }),
    )
    .max(128)
    .optional(),
  options: z
    .looseObject({
      temperature: z.number().min(0).max(2).optional(),
      top_p: z.number().min(0).max(1).optional(),
      // -1 (unbounded) and -2 (fill the context) are Ollama's; Switchyard then uses its default bound.
      num_predict: z.number().int().min(-2).optional(),
      stop: z.union([z.string(), z.array(z.string()).max(4)]).optional(),
      seed: z.number().int().optional(),
      presence_penalty: z.number().min(-2).max(2).optional(),
      frequency_penalty: z.number().min(-2).max(2).optional(),
    })
    .optional(),
  keep_alive: z.union([z.string(), z.number()]).optional(),
});

export interface OllamaChatRequest {
  model: string;
  mode: 'auto' | 'direct' | 'network';
  stream: boolean;
  params: ChatParams;
  ignored: string[];
}

const isRecord = (v: unknown): v is Record<string, unknown> => Boolean(v) && typeof v === 'object' && !Array.isArray(v);

/**
 * The sent fields that have no effect: unknown top-level ones, keep_alive, and the options
 * Switchyard does not map (as `options.<name>`). Worked out before validation, so that an error
 * answer carries the header too.
 */
export function ollamaIgnoredParams(raw: unknown): string[] {
  if (!isRecord(raw)) {
    return [];
  }
  const sent = Object.keys(raw).filter((k) => raw[k] !== null);
  const options = isRecord(raw.options) ? raw.options : {};
  return [
    ...sent.filter((k) => !KNOWN.has(k)),
    ...(sent.includes('keep_alive') ? ['keep_alive'] : []),
    ...Object.keys(options)
      .filter((k) => !KNOWN_OPTIONS.has(k) && options[k] !== null)
      .map((k) => `options.${k}`),
  ];
}

/**
 * Validates an Ollama /api/chat request and maps it onto the request devices receive. Unlike Ollama,
 * `stream` defaults to false here (documented in docs/api.md).
 */
export function parseOllamaChat(raw: unknown): OllamaChatRequest {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new AppError('invalid_request', 'The request body must be a JSON object.');
  }
  const input = Object.fromEntries(Object.entries(raw as Record<string, unknown>).filter(([, v]) => v !== null));
  const parsed = schema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const param = paramPath(issue.path);
    if (param === 'model' && input.model === undefined) {
      throw new AppError('model_required', 'model is required', 'model');
    }
    throw new AppError('invalid_request', param ? `invalid ${param}: ${issue.message}` : issue.message, param);
  }
  const b = parsed.data;
  b.messages.forEach((m, i) => {
    if (m.images && m.images.length > 0) {
      throw new AppError(
        'unsupported_content_part',
        'images are not supported: devices serve text only',
        `messages[${i}].images`,
      );
    }
  });
  const options = b.options ?? {};
  const ignored = ollamaIgnoredParams(input);
  // Both are accepted; Ollama's own place wins when both are sent.
  const temperature = options.temperature ?? b.temperature;

  let callCount = 0;
  const messages: ChatMessage[] = b.messages.map((m): ChatMessage => {
    if (m.role === 'assistant' && m.tool_calls?.length) {
      return {
        role: 'assistant',
        content: m.content,
        tool_calls: m.tool_calls.map((c) => ({
          id: `call_${callCount++}`,
          type: 'function',
          function: { name: c.function.name, arguments: JSON.stringify(c.function.arguments) },
        })),
      };
    }
    if (m.role === 'tool') {
      // Ollama names the tool, not the call: the result answers the latest call of that tool.
      return { role: 'tool', content: m.content, tool_call_id: m.tool_name ?? 'tool', name: m.tool_name };
    }
    return { role: m.role, content: m.content };
  });

  const format: ResponseFormat | undefined =
    b.format === undefined
      ? undefined
      : b.format === 'json'
        ? { type: 'json_object' }
        : { type: 'json_schema', json_schema: { name: 'response', schema: b.format } };
  const effort = b.think === true ? 'medium' : b.think === false ? undefined : b.think;
  const numPredict = options.num_predict !== undefined && options.num_predict > 0 ? options.num_predict : undefined;
  const params: ChatParams = {
    messages,
    max_tokens: numPredict ?? DEFAULT_MAX_TOKENS,
    ...(temperature !== undefined ? { temperature } : {}),
    ...(options.top_p !== undefined ? { top_p: options.top_p } : {}),
    ...(options.stop !== undefined ? { stop: typeof options.stop === 'string' ? [options.stop] : options.stop } : {}),
    ...(options.presence_penalty !== undefined ? { presence_penalty: options.presence_penalty } : {}),
    ...(options.frequency_penalty !== undefined ? { frequency_penalty: options.frequency_penalty } : {}),
    ...(format ? { response_format: format } : {}),
    ...(b.tools?.length ? { tools: b.tools } : {}),
    ...(effort ? { reasoning_effort: effort } : {}),
  };
  const mode = b.mode === 'opengpu' ? 'network' : (b.mode ?? 'auto');
  return { model: b.model, mode, stream: b.stream ?? false, params, ignored };
}
