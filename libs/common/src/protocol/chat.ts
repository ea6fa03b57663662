/**
 * The chat request as Switchyard carries it from the api to a device: OpenAI's field names, already
 * validated, with `null`s dropped and defaults applied. Versioned with the protocol (see docs/protocol.md).
 */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | null;
  name?: string;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
}

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface ToolDefinition {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean };
}

export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; json_schema: { name: string; schema?: Record<string, unknown>; strict?: boolean } };

export interface ChatParams {
  messages: ChatMessage[];
  max_tokens: number;
  temperature?: number;
  top_p?: number;
  stop?: string[];
  frequency_penalty?: number;
  presence_penalty?: number;
  n?: number;
  response_format?: ResponseFormat;
  tools?: ToolDefinition[];
  tool_choice?: 'auto' | 'none';
  logprobs?: boolean;
  top_logprobs?: number;
  logit_bias?: Record<string, number>;
  reasoning_effort?: 'low' | 'medium' | 'high';
  /** Whether the device should report usage; always true, devices report it when they can. */
  stream_usage?: boolean;
}

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

export type FinishReason = 'stop' | 'length' | 'tool_calls';

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface TokenLogprob {
  token: string;
  logprob: number;
  bytes: number[] | null;
  top_logprobs: { token: string; logprob: number; bytes: number[] | null }[];
}

/** One piece of output for one choice. */
export interface ChoiceDelta {
  index: number;
  content?: string;
  reasoning?: string;
  tool_calls?: ToolCall[];
  logprobs?: TokenLogprob[];
}
