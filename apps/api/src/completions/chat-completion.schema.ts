import { z } from 'zod';
import { webSearchOptionsSchema } from '@app/common';

/**
 * The schema of POST /v1/chat/completions, with OpenAI's wire names. Rules that span fields (and
 * the refusals that have their own codes) are in create-chat-completion.dto.ts; the OpenAPI document
 * is generated from this schema.
 */

const textPart = z.object({ type: z.literal('text'), text: z.string() });
const content = z.union([z.string(), z.array(textPart)]);
const toolCall = z.object({
  id: z.string().min(1),
  type: z.literal('function'),
  function: z.object({ name: z.string().min(1), arguments: z.string() }),
});
export const functionDef = z.object({
  name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be 1-64 letters, digits, underscores or dashes'),
  description: z.string().optional(),
  parameters: z.record(z.string(), z.unknown()).optional(),
  strict: z.boolean().nullish(),
});
export type FunctionDef = z.infer<typeof functionDef>;

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
export type MessageBody = z.infer<typeof message>;

const number = (min: number, max: number) => z.number().min(min).max(max);

/** `opengpu` is the OpenGPU relay's name for the shared pool: a synonym of `network`. */
export const MODES = ['auto', 'direct', 'network', 'opengpu'] as const;

export const chatCompletionSchema = z.object({
  model: z.string().min(1).max(200).optional(),
  messages: z.array(message).min(1, 'must contain at least one message'),
  stream: z.boolean().optional(),
  temperature: number(0, 2).optional(),
  top_p: number(0, 1).optional(),
  max_completion_tokens: z.number().int().min(1).optional(),
  max_tokens: z.number().int().min(1).optional(),
  stop: z.union([z.string(), z.array(z.string()).min(1).max(4)]).optional(),
  include_stop_str_in_output: z.boolean().optional(),
  frequency_penalty: number(-2, 2).optional(),
  presence_penalty: number(-2, 2).optional(),
  mode: z.enum(MODES).optional(),
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
  web_search_options: webSearchOptionsSchema.optional(),
  parallel_tool_calls: z.boolean().optional(),
});

export type ChatCompletionBody = z.infer<typeof chatCompletionSchema>;
