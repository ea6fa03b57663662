import type { ChatParams } from '@app/common/protocol/chat';
import { withAssistantPrefix } from './upstream/assistant-prefix';

/**
 * Which OpenAI-compatible server answers, as far as the request depends on it: vLLM, llama.cpp's
 * server (each known from its /models `owned_by`), or another one.
 */
export type OpenAIServer = 'vllm' | 'llamacpp' | 'other';

/**
 * The /chat/completions request for a task: the params as they are, streamed, with usage in the stream.
 * A resumed task's `assistant_prefix` becomes the final assistant message, with vLLM's
 * `continue_final_message: true, add_generation_prompt: false` (the final message is left open and
 * continued). llama.cpp's server continues a final assistant message by itself (its assistant
 * prefill, on by default) and, since it took vLLM's flags, also when started with
 * --no-prefill-assistant; older builds ignore `continue_final_message`, and their prefill sets the
 * generation prompt itself. Another server is sent vLLM's form (only an operator's --features
 * declares `continue` for one).
 */
export function openaiChatRequest(
  model: string,
  params: ChatParams,
  server: OpenAIServer = 'other',
): Record<string, unknown> {
  const prefix = params.assistant_prefix;
  // llama.cpp prefills a trailing assistant message too, so the answer so far is its continuation.
  const conversation =
    prefix === undefined ? params.messages : withAssistantPrefix(params.messages, prefix, server === 'llamacpp');
  const messages = conversation.map((m) => ({
    role: m.role,
    content: m.content,
    // OpenAI has no name on tool results (the api keeps it there for deprecated function results).
    ...(m.name !== undefined && m.role !== 'tool' ? { name: m.name } : {}),
    ...(m.tool_calls?.length ? { tool_calls: m.tool_calls } : {}),
    ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}),
  }));
  const body: Record<string, unknown> = {
    model,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: params.max_tokens,
  };
  const passThrough = [
    'temperature',
    'top_p',
    'frequency_penalty',
    'presence_penalty',
    'n',
    'response_format',
    'tools',
    'tool_choice',
    'logit_bias',
    'reasoning_effort',
    'web_search_options',
  ] as const;
  for (const key of passThrough) {
    if (params[key] !== undefined) {
      body[key] = params[key];
    }
  }
  // With include_stop_str_in_output the device watches for the stop strings itself (StopTextFilter):
  // only vLLM knows the option, and a runtime that stops on them never shows them.
  if (params.stop?.length && !params.include_stop_str_in_output) {
    body.stop = params.stop;
  }
  if (params.logprobs) {
    body.logprobs = true;
    body.top_logprobs = params.top_logprobs ?? 0;
  }
  if (prefix !== undefined) {
    // vLLM refuses both true at once; the defaults are false and true.
    body.continue_final_message = true;
    body.add_generation_prompt = false;
  }
  return body;
}
