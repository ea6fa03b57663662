import type { ChatParams } from '@app/common/protocol/chat';

/** The /chat/completions request for a task: the params as they are, streamed, with usage in the stream. */
export function openaiChatRequest(model: string, params: ChatParams): Record<string, unknown> {
  const messages = params.messages.map((m) => ({
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
  return body;
}
