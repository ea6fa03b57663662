import type { ChatMessage } from '@app/common/protocol/chat';

/**
 * The conversation a runtime continues for a resumed task: the answer so far as its final assistant
 * message. When the client's conversation already ends with an assistant message (no tool calls),
 * `joinTrailing` says whether the runtime continued that message on the first attempt (Ollama and
 * llama.cpp prefill a trailing assistant message, so the answer so far is its continuation and is
 * appended to it; llama.cpp also refuses two assistant messages at the end) or answered after it
 * (vLLM without continue_final_message, so the answer so far is a message of its own).
 */
export function withAssistantPrefix(messages: ChatMessage[], prefix: string, joinTrailing: boolean): ChatMessage[] {
  const last = messages.at(-1);
  if (joinTrailing && last?.role === 'assistant' && !last.tool_calls?.length) {
    return [...messages.slice(0, -1), { ...last, content: (last.content ?? '') + prefix }];
  }
  return [...messages, { role: 'assistant', content: prefix }];
}
