import { z } from 'zod';
import { AppError } from '@app/common';
import type { ChatMessage, ChatParams, ToolDefinition } from '@app/common';
import { paramPath } from '../common/validation';

/** Accepted and without effect; listed in the x-switchyard-ignored-params response header. */
const IGNORED = new Set([
  'seed',
  'user',
  'safety_identifier',
  'store',
  'metadata',
  'service_tier',
  'prompt_cache_key',
  'prompt_cache_retention',
  'prompt_cache_options',
]);
/** Refused with 400 unsupported_parameter: honouring them is impossible on a device, ignoring them would mislead. */
const REJECTED = ['prediction', 'verbosity', 'moderation', 'modalities', 'audio', 'web_search_options'];
const KNOWN = new Set([
  'model',
  'messages',
  'stream',
  'temperature',
  'top_p',
  'max_completion_tokens',
  'max_tokens',
  'stop',
  'frequency_penalty',
  'presence_penalty',
  'mode',
  'stream_options',
  'response_format',
  'tools',
  'tool_choice',
  'functions',
  'function_call',
  'logprobs',
  'top_logprobs',
  'n',
  'logit_bias',
  'reasoning_effort',
  'parallel_tool_calls',
  ...REJECTED,
]);

export const DEFAULT_MAX_TOKENS = 512;

const textPart = z.object({ type: z.literal('text'), text: z.string() });
const content = z.union([z.string(), z.array(textPart)]);
const toolCall = z.object({
  id: z.string().min(1),
  type: z.literal('function'),
  function: z.object({ name: z.string().min(1), arguments: z.string() }),
});
const functionDef = z.object({
  name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be 1-64 letters, digits, underscores or dashes'),
  description: z.string().optional(),
  parameters: z.record(z.string(), z.unknown()).optional(),
  strict: z.boolean().nullish(),
});

const message = z.discriminatedUnion('role', [
  z.object({ role: z.enum(['system', 'developer']), content, name: z.string().optional() }),
  z.object({ role: z.literal('user'), content, name: z.string().optional() }),
  z
    .object({
      role: z.literal('assistant'),
      content: content.nullish(),
      name: z.string().optional(),
      tool_calls: z.array(toolCall).optional(),
      function_call: z.object({ name: z.string(), arguments: z.string() }).optional(),
      refusal: z.string().nullish(),
    })
    .refine((m) => m.content != null || m.tool_calls?.length || m.function_call, {
      message: 'an assistant message needs content or tool_calls',
      path: ['content'],
    }),
  z.object({ role: z.literal('tool'), content, tool_call_id: z.string().min(1) }),
  z.object({ role: z.literal('function'), content: content.nullable(), name: z.string().min(1) }),
]);

const number = (min: number, max: number) => z.number().min(min).max(max);

export const chatCompletionSchema = z.object({
  model: z.string().min(1).max(200).optional(),
  messages: z.array(message).min(1, 'must contain at least one message'),
  stream: z.boolean().optional(),
  temperature: number(0, 2).optional(),
  top_p: number(0, 1).optional(),
  max_completion_tokens: z.number().int().min(1).optional(),
  max_tokens: z.number().int().min(1).optional(),
  stop: z.union([z.string(), z.array(z.string()).min(1).max(4)]).optional(),
  frequency_penalty: number(-2, 2).optional(),
  presence_penalty: number(-2, 2).optional(),
  mode: z.enum(['auto', 'direct', 'network']).optional(),
  stream_options: z
    .object({
      include_usage: z.boolean().optional(),
      // A Switchyard extension: SSE comments with the queue position while the request waits.
      include_queue_status: z.boolean().optional(),
    })
    .optional(),
  response_format: z
    .discriminatedUnion('type', [
      z.object({ type: z.literal('text') }),
      z.object({ type: z.literal('json_object') }),
      z.object({
        type: z.literal('json_schema'),
        json_schema: z.object({
          name: z.string().min(1).max(64),
          description: z.string().optional(),
          schema: z.record(z.string(), z.unknown()).optional(),
          strict: z.boolean().nullish(),
        }),
      }),
    ])
    .optional(),
  tools: z
    .array(z.object({ type: z.literal('function'), function: functionDef }))
    .max(128)
    .optional(),
  tool_choice: z
    .union([z.enum(['auto', 'none', 'required']), z.object({ type: z.string(), function: z.unknown() })])
    .optional(),
  functions: z.array(functionDef).max(128).optional(),
  function_call: z.union([z.enum(['auto', 'none']), z.object({ name: z.string() })]).optional(),
  logprobs: z.boolean().optional(),
  top_logprobs: z.number().int().min(0).max(20).optional(),
  n: z.number().int().min(1).max(8).optional(),
  logit_bias: z.record(z.string().regex(/^\d+$/, 'keys must be token ids'), number(-100, 100)).optional(),
  reasoning_effort: z.enum(['low', 'medium', 'high']).optional(),
  parallel_tool_calls: z.boolean().optional(),
});

export type ChatCompletionBody = z.infer<typeof chatCompletionSchema>;

export interface ChatCompletionRequest {
  /** The model as the client named it (echoed in responses). */
  model: string;
  mode: 'auto' | 'direct' | 'network';
  stream: boolean;
  includeUsage: boolean;
  /** Open the stream at once and report the queue position every second until the first token. */
  includeQueueStatus: boolean;
  /** Before clamping to the model's max output tokens. */
  params: ChatParams;
  ignored: string[];
}

const isRecord = (v: unknown): v is Record<string, unknown> => Boolean(v) && typeof v === 'object' && !Array.isArray(v);

/** Drops the null fields of an object (one level), keeping those named in `keep`. */
function withoutNulls(value: unknown, keep: string[] = []): unknown {
  return isRecord(value)
    ? Object.fromEntries(Object.entries(value).filter(([k, v]) => v !== null || keep.includes(k)))
    : value;
}

/**
 * `null` counts as not sent: at the top level, in messages (except a message's content, where null
 * is meaningful), in stream_options, response_format.json_schema, and tool and function definitions.
 * JSON schemas themselves are left as they are (null is a valid value there).
 */
function dropNulls(body: Record<string, unknown>): Record<string, unknown> {
  const out = withoutNulls(body) as Record<string, unknown>;
  if (Array.isArray(out.messages)) {
    out.messages = out.messages.map((m) => withoutNulls(m, ['content']));
  }
  out.stream_options = withoutNulls(out.stream_options);
  if (isRecord(out.response_format)) {
    out.response_format = { ...out.response_format, json_schema: withoutNulls(out.response_format.json_schema) };
    if ((out.response_format as Record<string, unknown>).json_schema === undefined) {
      delete (out.response_format as Record<string, unknown>).json_schema;
    }
  }
  if (Array.isArray(out.tools)) {
    out.tools = out.tools.map((t) => (isRecord(t) ? { ...t, function: withoutNulls(t.function) } : t));
  }
  if (Array.isArray(out.functions)) {
    out.functions = out.functions.map((f) => withoutNulls(f));
  }
  for (const key of Object.keys(out)) {
    if (out[key] === undefined) {
      delete out[key];
    }
  }
  return out;
}

const unsupported = (param: string, message: string) => new AppError('unsupported_parameter', message, param);

function text(value: string | { text: string }[] | null | undefined): string | null {
  if (value == null) {
    return null;
  }
  return typeof value === 'string' ? value : value.map((p) => p.text).join('');
}

/** Image, audio and file parts are refused before schema validation, with their own code. */
function checkContentParts(messages: unknown): void {
  if (!Array.isArray(messages)) {
    return;
  }
  messages.forEach((m: unknown, i) => {
    const parts = (m as { content?: unknown } | null)?.content;
    if (!Array.isArray(parts)) {
      return;
    }
    parts.forEach((part: unknown, j) => {
      const type = (part as { type?: unknown } | null)?.type;
      if (typeof type === 'string' && type !== 'text') {
        throw new AppError(
          'unsupported_content_part',
          `Content parts of type '${type}' are not supported: devices serve text only.`,
          `messages[${i}].content[${j}]`,
        );
      }
    });
  });
}

/**
 * Validates an OpenAI chat completion request and turns it into what a device receives. Every
 * refusal is a 400 naming the param; nothing is written before this passes.
 */
export function parseChatCompletion(raw: unknown, defaultModel: string | undefined): ChatCompletionRequest {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) {
    throw new AppError('invalid_request', 'The request body must be a JSON object.');
  }
  const body = dropNulls(raw as Record<string, unknown>);
  for (const param of REJECTED) {
    if (param in body) {
      throw unsupported(param, `'${param}' is not supported by Switchyard.`);
    }
  }
  if (body.parallel_tool_calls === false) {
    throw unsupported('parallel_tool_calls', "'parallel_tool_calls: false' is not supported by Switchyard.");
  }
  checkContentParts(body.messages);
  const ignored = Object.keys(body).filter((k) => IGNORED.has(k) || !KNOWN.has(k));
  const parsed = chatCompletionSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const param = paramPath(issue.path);
    throw new AppError('invalid_request', param ? `Invalid '${param}': ${issue.message}` : issue.message, param);
  }
  const b = parsed.data;
  const model = b.model ?? defaultModel;
  if (!model) {
    throw new AppError('model_required', "You must provide a model parameter ('model').", 'model');
  }
  if (b.tool_choice !== undefined && b.tool_choice !== 'auto' && b.tool_choice !== 'none') {
    throw unsupported('tool_choice', "Only tool_choice 'auto' and 'none' are supported.");
  }
  if (b.function_call !== undefined && typeof b.function_call !== 'string') {
    throw unsupported('function_call', "Only function_call 'auto' and 'none' are supported.");
  }
  if (b.stream_options && !b.stream) {
    throw new AppError('invalid_request', "'stream_options' is only allowed when 'stream' is true.", 'stream_options');
  }
  if (b.top_logprobs !== undefined && !b.logprobs) {
    throw new AppError('invalid_request', "'top_logprobs' requires 'logprobs' to be true.", 'top_logprobs');
  }
  if (b.tools && b.functions) {
    throw new AppError('invalid_request', "Send either 'tools' or the deprecated 'functions', not both.", 'functions');
  }

  const tools: ToolDefinition[] | undefined =
    b.tools?.map((t) => ({ type: 'function', function: stripNullish(t.function) })) ??
    b.functions?.map((f) => ({ type: 'function', function: stripNullish(f) }));
  const messages: ChatMessage[] = b.messages.map((m): ChatMessage => {
    switch (m.role) {
      case 'system':
      case 'developer':
        return { role: 'system', content: text(m.content), ...(m.name ? { name: m.name } : {}) };
      case 'user':
        return { role: 'user', content: text(m.content), ...(m.name ? { name: m.name } : {}) };
      case 'assistant': {
        const calls =
          m.tool_calls ??
          (m.function_call
            ? [{ id: m.function_call.name, type: 'function' as const, function: m.function_call }]
            : undefined);
        return { role: 'assistant', content: text(m.content), ...(calls ? { tool_calls: calls } : {}) };
      }
      case 'tool':
        return { role: 'tool', content: text(m.content), tool_call_id: m.tool_call_id };
      case 'function':
        // The deprecated function result becomes a tool result answering the call named after it.
        return { role: 'tool', content: text(m.content), tool_call_id: m.name, name: m.name };
    }
  });
  const toolChoice = b.tool_choice ?? b.function_call;
  const params: ChatParams = {
    messages,
    max_tokens: b.max_completion_tokens ?? b.max_tokens ?? DEFAULT_MAX_TOKENS,
    ...(b.temperature !== undefined ? { temperature: b.temperature } : {}),
    ...(b.top_p !== undefined ? { top_p: b.top_p } : {}),
    ...(b.stop !== undefined ? { stop: typeof b.stop === 'string' ? [b.stop] : b.stop } : {}),
    ...(b.frequency_penalty !== undefined ? { frequency_penalty: b.frequency_penalty } : {}),
    ...(b.presence_penalty !== undefined ? { presence_penalty: b.presence_penalty } : {}),
    ...(b.n !== undefined ? { n: b.n } : {}),
    ...(b.response_format ? { response_format: b.response_format as ChatParams['response_format'] } : {}),
    ...(tools?.length ? { tools } : {}),
    ...(toolChoice !== undefined ? { tool_choice: toolChoice } : {}),
    ...(b.logprobs ? { logprobs: true, top_logprobs: b.top_logprobs ?? 0 } : {}),
    ...(b.logit_bias && Object.keys(b.logit_bias).length ? { logit_bias: b.logit_bias } : {}),
    ...(b.reasoning_effort ? { reasoning_effort: b.reasoning_effort } : {}),
  };
  const includeUsage = Boolean(b.stream && b.stream_options?.include_usage);
  const includeQueueStatus = Boolean(b.stream && b.stream_options?.include_queue_status);
  const stream = b.stream ?? false;
  return { model, mode: b.mode ?? 'auto', stream, includeUsage, includeQueueStatus, params, ignored };
}

function stripNullish(value: z.infer<typeof functionDef>): ToolDefinition['function'] {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v != null)) as ToolDefinition['function'];
}
