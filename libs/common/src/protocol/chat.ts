import { z } from 'zod';

/**
 * The chat request as Switchyard carries it from the api to a device, and the output a device sends
 * back: OpenAI's field names, already validated by the api, with `null`s dropped and defaults
 * applied. Part of the device protocol (see device-protocol.ts and docs/protocol.md); the types are
 * inferred from these schemas, so the two cannot drift.
 */

/** The largest token count a task row can hold (a Postgres integer). */
export const MAX_TOKENS_COUNT = 2_147_483_647;

export const toolCallSchema = z.object({
  id: z.string().max(200),
  type: z.literal('function'),
  function: z.object({ name: z.string().max(200), arguments: z.string().max(1_000_000) }),
});
export type ToolCall = z.infer<typeof toolCallSchema>;

export const chatMessageSchema = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: z.string().nullable(),
  name: z.string().optional(),
  tool_calls: z.array(toolCallSchema).optional(),
  tool_call_id: z.string().optional(),
});
export type ChatMessage = z.infer<typeof chatMessageSchema>;

export const toolDefinitionSchema = z.object({
  type: z.literal('function'),
  function: z.object({
    name: z.string(),
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().optional(),
  }),
});
export type ToolDefinition = z.infer<typeof toolDefinitionSchema>;

export const responseFormatSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }),
  z.object({ type: z.literal('json_object') }),
  z.object({
    type: z.literal('json_schema'),
    json_schema: z.object({
      name: z.string(),
      schema: z.record(z.string(), z.unknown()).optional(),
      strict: z.boolean().optional(),
    }),
  }),
]);
export type ResponseFormat = z.infer<typeof responseFormatSchema>;

export const chatParamsSchema = z.object({
  messages: z.array(chatMessageSchema).min(1),
  max_tokens: z.number().int().min(1),
  temperature: z.number().optional(),
  top_p: z.number().optional(),
  stop: z.array(z.string()).optional(),
  frequency_penalty: z.number().optional(),
  presence_penalty: z.number().optional(),
  n: z.number().int().min(1).max(8).optional(),
  response_format: responseFormatSchema.optional(),
  tools: z.array(toolDefinitionSchema).optional(),
  tool_choice: z.enum(['auto', 'none']).optional(),
  logprobs: z.boolean().optional(),
  top_logprobs: z.number().int().min(0).max(20).optional(),
  logit_bias: z.record(z.string(), z.number()).optional(),
  reasoning_effort: z.enum(['low', 'medium', 'high']).optional(),
  /** Whether the device should report usage; always true, devices report it when they can. */
  stream_usage: z.boolean().optional(),
});
export type ChatParams = z.infer<typeof chatParamsSchema>;

/** Features a backend may or may not support; a job lists the ones it needs. */
export const FEATURES = [
  'tools',
  'json_object',
  'json_schema',
  'logprobs',
  'n',
  'stream_usage',
  'logit_bias',
  'reasoning_effort',
] as const;
export type Feature = (typeof FEATURES)[number];

/** The features a request needs from the device that serves it. */
export function requiredFeatures(params: ChatParams, streamUsage: boolean): Feature[] {
  const needs: Feature[] = [];
  if (params.tools?.length) {
    needs.push('tools');
  }
  if (params.response_format?.type === 'json_object') {
    needs.push('json_object');
  }
  if (params.response_format?.type === 'json_schema') {
    needs.push('json_schema');
  }
  if (params.logprobs) {
    needs.push('logprobs');
  }
  if ((params.n ?? 1) > 1) {
    needs.push('n');
  }
  if (streamUsage) {
    needs.push('stream_usage');
  }
  if (params.logit_bias && Object.keys(params.logit_bias).length > 0) {
    needs.push('logit_bias');
  }
  if (params.reasoning_effort) {
    needs.push('reasoning_effort');
  }
  return needs;
}

export const finishReasonSchema = z.enum(['stop', 'length', 'tool_calls']);
export type FinishReason = z.infer<typeof finishReasonSchema>;

const tokenCount = z.number().int().min(0).max(MAX_TOKENS_COUNT);
export const usageSchema = z.object({
  prompt_tokens: tokenCount,
  completion_tokens: tokenCount,
  total_tokens: tokenCount,
});
export type Usage = z.infer<typeof usageSchema>;

const topLogprobSchema = z.object({
  token: z.string().max(1000),
  logprob: z.number(),
  bytes: z.array(z.number().int()).max(4000).nullable(),
});
export const tokenLogprobSchema = topLogprobSchema.extend({ top_logprobs: z.array(topLogprobSchema).max(20) });
export type TokenLogprob = z.infer<typeof tokenLogprobSchema>;

/** One piece of output for one choice. */
export const choiceDeltaSchema = z.object({
  index: z.number().int().min(0).max(7),
  content: z.string().max(1_000_000).optional(),
  reasoning: z.string().max(1_000_000).optional(),
  tool_calls: z.array(toolCallSchema).max(64).optional(),
  logprobs: z.array(tokenLogprobSchema).max(10_000).optional(),
});
export type ChoiceDelta = z.infer<typeof choiceDeltaSchema>;
