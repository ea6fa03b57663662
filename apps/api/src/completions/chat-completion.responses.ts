import { z } from 'zod';
import { named } from '../openapi/components';

const toolCall = z.strictObject({
  id: z.string(),
  type: z.literal('function'),
  function: z.strictObject({ name: z.string(), arguments: z.string() }),
});
const tokenUsage = z.strictObject({
  prompt_tokens: z.number().int(),
  completion_tokens: z.number().int(),
  total_tokens: z.number().int(),
});
const logprobs = z.looseObject({ content: z.array(z.looseObject({})).nullable(), refusal: z.null() }).nullable();
const finishReason = z.enum(['stop', 'length', 'tool_calls', 'function_call', 'content_filter']);

/** The answer of a chat completion with `stream: false`. */
export const chatCompletion = named(
  'ChatCompletion',
  'A chat completion (stream: false): OpenAI’s object plus `mode` and `task_address`.',
  z.strictObject({
    id: z.string(),
    object: z.literal('chat.completion'),
    created: z.number().int(),
    model: z.string(),
    choices: z.array(
      z.strictObject({
        index: z.number().int(),
        message: z.strictObject({
          role: z.literal('assistant'),
          content: z.string().nullable(),
          refusal: z.null(),
          reasoning_content: z.string().optional(),
          tool_calls: z.array(toolCall).optional(),
        }),
        logprobs,
        finish_reason: finishReason,
      }),
    ),
    usage: tokenUsage.optional(),
    system_fingerprint: z.string(),
    mode: z.enum(['direct', 'network']),
    task_address: z.string(),
  }),
);

/** One event of a streamed chat completion: described in the document, not referenced by a route. */
export const chatCompletionChunk = named(
  'ChatCompletionChunk',
  'One `data:` event of a streamed chat completion (the stream ends with `data: [DONE]`).',
  z.looseObject({
    id: z.string(),
    object: z.literal('chat.completion.chunk'),
    created: z.number().int(),
    model: z.string(),
    system_fingerprint: z.string(),
    choices: z.array(
      z.looseObject({ index: z.number().int(), delta: z.looseObject({}), finish_reason: finishReason.nullable() }),
    ),
    usage: tokenUsage.nullable().optional(),
    mode: z.enum(['direct', 'network']),
    task_address: z.string(),
  }),
);

/** What the chat completion routes answer: JSON, or with `stream: true` Server-Sent Events. */
export const CHAT_COMPLETION_MEDIA = {
  'text/event-stream': 'data: {ChatCompletionChunk}\\n\\n … data: [DONE]\\n\\n',
};
