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

/** OpenAI's `web_search_options`: how much context to search for, and where the user roughly is. */
export const webSearchOptionsSchema = z.object({
  search_context_size: z.enum(['low', 'medium', 'high']).optional(),
  user_location: z
    .object({
      type: z.literal('approximate'),
      approximate: z.object({
        city: z.string().max(200).optional(),
        country: z.string().max(200).optional(),
        region: z.string().max(200).optional(),
        timezone: z.string().max(200).optional(),
      }),
    })
    .optional(),
});
export type WebSearchOptions = z.infer<typeof webSearchOptionsSchema>;

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
  /** OpenAI's web search settings, for a device set up for web search (feature `web_search`); passed on as sent. */
  web_search_options: webSearchOptionsSchema.optional(),
  /**
   * vLLM's extension: when a stop string ends the output, the stop string is part of it (by default,
   * as OpenAI does, it is not). Older devices drop the field and follow the default.
   */
  include_stop_str_in_output: z.boolean().optional(),
  /** Whether the device should report usage; always true, devices report it when they can. */
  stream_usage: z.boolean().optional(),
  /**
   * A resumed task (docs/architecture.md, "Resume"): the answer so far, which another device
   * produced and the client already has. The device's runtime continues an assistant reply that
   * begins with this text, and the device sends only what follows it; `max_tokens` is already
   * reduced by the tokens of the prefix. Sent only to a device that declares the `continue` feature.
   */
  assistant_prefix: z.string().min(1).max(4_000_000).optional(),
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
  'web_search',
  // Last: presence lists and announces carry names, so a new feature only needs adding here.
  /** Continues an assistant reply from a given prefix (a resumed task's `assistant_prefix`). */
  'continue',
  /** Embeds text (models of kind `embedding`; see embeddings.ts). */
  'embeddings',
  /** Embeds inputs given as token ids. */
  'embed_tokens',
  /** Shortens vectors to a requested `dimensions`. */
  'embed_dimensions',
  /**
   * Takes a second embedding task while one runs (docs/protocol.md): its runtime gets the next batch
   * while the agent still sends the vectors of the one before. Not a job's requirement: a capacity.
   */
  'embed_prefetch',
] as const;
export type Feature = (typeof FEATURES)[number];

/** A feature a request needs, and the request field that needs it (the `param` of unsupported_by_node). */
export interface Requirement {
  feature: Feature;
  param: string;
}

/**
 * What a request needs from the device that serves it, each with the field at its origin. A tool
 * result in the conversation needs tools as much as `tools` does: a runtime without tool support
 * cannot render it into the prompt (the result would be dropped or garble the template).
 */
export function requirements(params: ChatParams, streamUsage: boolean): Requirement[] {
  const needs: Requirement[] = [];
  const toolMessage = params.messages.findIndex((m) => m.role === 'tool');
  if (params.tools?.length) {
    needs.push({ feature: 'tools', param: 'tools' });
  } else if (toolMessage >= 0) {
    needs.push({ feature: 'tools', param: `messages[${toolMessage}]` });
  }
  if (params.response_format?.type === 'json_object') {
    needs.push({ feature: 'json_object', param: 'response_format' });
  }
  if (params.response_format?.type === 'json_schema') {
    needs.push({ feature: 'json_schema', param: 'response_format' });
  }
  if (params.logprobs) {
    needs.push({ feature: 'logprobs', param: 'logprobs' });
  }
  if ((params.n ?? 1) > 1) {
    needs.push({ feature: 'n', param: 'n' });
  }
  if (streamUsage) {
    needs.push({ feature: 'stream_usage', param: 'stream_options' });
  }
  if (params.logit_bias && Object.keys(params.logit_bias).length > 0) {
    needs.push({ feature: 'logit_bias', param: 'logit_bias' });
  }
  if (params.reasoning_effort) {
    needs.push({ feature: 'reasoning_effort', param: 'reasoning_effort' });
  }
  if (params.web_search_options) {
    needs.push({ feature: 'web_search', param: 'web_search_options' });
  }
  if (params.assistant_prefix !== undefined) {
    needs.push({ feature: 'continue', param: 'assistant_prefix' });
  }
  return needs;
}

/** The features a request needs from the device that serves it. */
export function requiredFeatures(params: ChatParams, streamUsage: boolean): Feature[] {
  return requirements(params, streamUsage).map((r) => r.feature);
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
