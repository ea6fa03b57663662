import type { ChoiceDelta, FinishReason, ToolCall, Usage } from '@app/common/protocol/chat';
import type { BackendResult } from './backend';
import { badResponse, streamError } from './upstream/runtime-errors';
import { tokenLogprob, toolCallId } from './upstream/upstream-options';

/** Reads Ollama's NDJSON chat stream, one line at a time, into deltas and the final result. */
export class OllamaChatStream {
  done = false;
  private finish: FinishReason = 'stop';
  private usage: Usage | null = null;
  private toolCalls = 0;
  private lines = 0;

  constructor(private readonly topLogprobs: number) {}

  /** One line of the stream: the delta it carries, if any. Throws for an error line or a malformed one. */
  push(line: string): ChoiceDelta | null {
    this.lines++;
    let chunk: unknown;
    try {
      chunk = JSON.parse(line);
    } catch {
      throw badResponse(`line ${this.lines} is not JSON`);
    }
    if (!chunk || typeof chunk !== 'object' || Array.isArray(chunk)) {
      throw badResponse(`line ${this.lines} is not a JSON object`);
    }
    const c = chunk as {
      error?: unknown;
      message?: { content?: unknown; thinking?: unknown; tool_calls?: unknown };
      done?: unknown;
      done_reason?: unknown;
      prompt_eval_count?: unknown;
      eval_count?: unknown;
      logprobs?: unknown;
    };
    if (c.error !== undefined) {
      throw streamError({ message: typeof c.error === 'string' ? c.error : JSON.stringify(c.error) });
    }
    if (c.message !== undefined && (typeof c.message !== 'object' || c.message === null)) {
      throw badResponse(`line ${this.lines} has no message object`);
    }
    const delta: ChoiceDelta = { index: 0 };
    const message = c.message ?? {};
    if (typeof message.thinking === 'string' && message.thinking !== '') {
      delta.reasoning = message.thinking;
    }
    if (typeof message.content === 'string' && message.content !== '') {
      delta.content = message.content;
    }
    if (Array.isArray(message.tool_calls) && message.tool_calls.length > 0) {
      delta.tool_calls = message.tool_calls.map((call) => this.toolCall(call));
      this.toolCalls += delta.tool_calls.length;
    }
    if (Array.isArray(c.logprobs) && c.logprobs.length > 0) {
      const logprobs = c.logprobs.map((l) => tokenLogprob(l, this.topLogprobs));
      if (logprobs.some((l) => l === null)) {
        throw badResponse(`line ${this.lines} has malformed logprobs`);
      }
      delta.logprobs = logprobs as NonNullable<ChoiceDelta['logprobs']>;
    }
    if (c.done === true) {
      this.done = true;
      this.finish = c.done_reason === 'length' ? 'length' : 'stop';
      const prompt = typeof c.prompt_eval_count === 'number' ? c.prompt_eval_count : null;
      const completion = typeof c.eval_count === 'number' ? c.eval_count : null;
      if (prompt !== null || completion !== null) {
        this.usage = {
          prompt_tokens: prompt ?? 0,
          completion_tokens: completion ?? 0,
          total_tokens: (prompt ?? 0) + (completion ?? 0),
        };
      }
    }
    return Object.keys(delta).length > 1 ? delta : null;
  }

  private toolCall(raw: unknown): ToolCall {
    const call = raw as { id?: unknown; function?: { name?: unknown; arguments?: unknown } } | null;
    const name = call?.function?.name;
    if (typeof name !== 'string' || name === '') {
      throw badResponse(`line ${this.lines} has a tool call without a name`);
    }
    const args = call?.function?.arguments;
    return {
      id: typeof call?.id === 'string' && call.id !== '' ? call.id : toolCallId(),
      type: 'function',
      function: { name, arguments: typeof args === 'string' ? args : JSON.stringify(args ?? {}) },
    };
  }

  /** After the last line: the finish reason (tool_calls when it called any and was not cut short) and usage. */
  result(): BackendResult {
    if (!this.done) {
      throw badResponse('the stream ended before its final line (done: true)');
    }
    const finish = this.toolCalls > 0 && this.finish !== 'length' ? 'tool_calls' : this.finish;
    return { finish_reasons: [finish], usage: this.usage };
  }
}
