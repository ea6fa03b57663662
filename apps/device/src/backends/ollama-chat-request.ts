import type { ChatParams } from '@app/common/protocol/chat';
import { BackendError } from './backend';
import { withAssistantPrefix } from './upstream/assistant-prefix';

/** OpenAI carries tool arguments as a JSON string; Ollama wants the object. */
function toolArguments(raw: string, where: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(raw === '' ? '{}' : raw);
  } catch {
    value = undefined;
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) {
    throw new BackendError('invalid_request', `${where} must be a JSON object for Ollama`);
  }
  return value as Record<string, unknown>;
}

/**
 * The /api/chat request for a task: OpenAI's messages in Ollama's shape (tool call arguments as
 * objects, tool results with the `tool_name` of the call they answer), `format`, `think`, and the
 * sampling options under `options`. `thinkLevels: false` sends `think: true` instead of a level.
 * A resumed task's `assistant_prefix` becomes the final assistant message, which Ollama continues
 * (since 0.2.8: its prompt ends with that message's text, left open).
 */
export function ollamaChatRequest(model: string, params: ChatParams, thinkLevels = true): Record<string, unknown> {
  const callNames = new Map<string, string>();
  for (const message of params.messages) {
    for (const call of message.tool_calls ?? []) {
      callNames.set(call.id, call.function.name);
    }
  }
  const conversation =
    params.assistant_prefix === undefined
      ? params.messages
      : withAssistantPrefix(params.messages, params.assistant_prefix, true);
  const messages = conversation.map((m, i) => {
    switch (m.role) {
      case 'system':
      case 'user':
        return { role: m.role, content: m.content ?? '' };
      case 'assistant':
        return {
          role: 'assistant',
          content: m.content ?? '',
          ...(m.tool_calls?.length
            ? {
                tool_calls: m.tool_calls.map((call, j) => ({
                  function: {
                    name: call.function.name,
                    arguments: toolArguments(
                      call.function.arguments,
                      `messages[${i}].tool_calls[${j}].function.arguments`,
                    ),
                  },
                })),
              }
            : {}),
        };
      case 'tool': {
        const name = m.name ?? (m.tool_call_id !== undefined ? callNames.get(m.tool_call_id) : undefined);
        return { role: 'tool', content: m.content ?? '', ...(name ? { tool_name: name } : {}) };
      }
    }
  });
  const options: Record<string, unknown> = { num_predict: params.max_tokens };
  if (params.temperature !== undefined) {
    options.temperature = params.temperature;
  }
  if (params.top_p !== undefined) {
    options.top_p = params.top_p;
  }
  // With include_stop_str_in_output the device watches for the stop strings itself (StopTextFilter):
  // Ollama stops on them without showing them.
  if (params.stop?.length && !params.include_stop_str_in_output) {
    options.stop = params.stop;
  }
  if (params.presence_penalty !== undefined) {
    options.presence_penalty = params.presence_penalty;
  }
  if (params.frequency_penalty !== undefined) {
    options.frequency_penalty = params.frequency_penalty;
  }
  const body: Record<string, unknown> = { model, messages, stream: true, options };
  // tool_choice "none": the model must not call a tool, and Ollama has no tool_choice, so it gets none to call.
  if (params.tools?.length && params.tool_choice !== 'none') {
    body.tools = params.tools.map((t) => ({
      type: 'function',
      function: {
        name: t.function.name,
        ...(t.function.description !== undefined ? { description: t.function.description } : {}),
        ...(t.function.parameters !== undefined ? { parameters: t.function.parameters } : {}),
      },
    }));
  }
  const format = params.response_format;
  if (format?.type === 'json_object') {
    body.format = 'json';
  } else if (format?.type === 'json_schema') {
    body.format = format.json_schema.schema ?? 'json';
  }
  if (params.reasoning_effort) {
    body.think = thinkLevels ? params.reasoning_effort : true;
  }
  if (params.logprobs) {
    body.logprobs = true;
    body.top_logprobs = params.top_logprobs ?? 0;
  }
  // Ollama itself has no web search in /api/chat: a device declares web_search (--web-search) only
  // when a proxy in front of Ollama does the searching, and that proxy reads this field.
  if (params.web_search_options) {
    body.web_search_options = params.web_search_options;
  }
  return body;
}
