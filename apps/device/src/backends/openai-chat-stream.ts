import type { ChoiceDelta, FinishReason, TokenLogprob, ToolCall, Usage } from '@app/common/protocol/chat';
import type { BackendResult } from './backend';
import { badResponse, streamError, parseErrorBody } from './upstream/runtime-errors';
import type { SseEvent } from './upstream/sse';
import { tokenLogprob, toolCallId } from './upstream/upstream-options';

interface PendingCall {
  id: string;
  name: string;
  arguments: string;
}

interface ChoiceState {
  /** Tool call fragments by their `index`, joined until the choice finishes. */
  calls: Map<number, PendingCall>;
  finish: FinishReason | null;
  toolCalls: number;
  content: boolean;
  logprobs: number;
}

function finishReason(raw: unknown): FinishReason {
  if (raw === 'length') {
    return 'length';
  }
  if (raw === 'tool_calls' || raw === 'function_call') {
    return 'tool_calls';
  }
  // stop, eos (older llama.cpp), content_filter: the answer ended.
  return 'stop';
}

/**
 * Reads an OpenAI-compatible chat completion stream (`chat.completion.chunk` events, then `[DONE]`)
 * into deltas: content, reasoning (`reasoning_content`, or `reasoning` as newer vLLM names it),
 * logprobs, and tool calls, whose fragments (id and name first, arguments in pieces) are joined and
 * emitted whole when their choice finishes.
 */
export class OpenAIChatStream {
  done = false;
  private readonly choices = new Map<number, ChoiceState>();
  private usage: Usage | null = null;
  private events = 0;

  constructor(
    private readonly n: number,
    private readonly logprobsRequested: boolean,
    private readonly topLogprobs: number,
  ) {}

  /** One event of the stream: the deltas it carries. Throws for an error event or a malformed one. */
  push(event: SseEvent): ChoiceDelta[] {
    this.events++;
    if (event.data.trim() === '[DONE]') {
      this.done = true;
      return this.flushAll();
    }
    let chunk: unknown;
    try {
      chunk = JSON.parse(event.data);
    } catch {
      if (event.event === 'error') {
        throw streamError({ message: event.data });
      }
      throw badResponse(`event ${this.events} is not JSON`);
    }
    if (!chunk || typeof chunk !== 'object' || Array.isArray(chunk)) {
      throw badResponse(`event ${this.events} is not a JSON object`);
    }
    const c = chunk as { error?: unknown; choices?: unknown; usage?: unknown };
    if (c.error !== undefined || event.event === 'error') {
      throw streamError(parseErrorBody(event.data));
    }
    if (c.usage && typeof c.usage === 'object') {
      const u = c.usage as { prompt_tokens?: unknown; completion_tokens?: unknown; total_tokens?: unknown };
      const int = (v: unknown) => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : 0);
      this.usage = {
        prompt_tokens: int(u.prompt_tokens),
        completion_tokens: int(u.completion_tokens),
        total_tokens:
          typeof u.total_tokens === 'number' ? int(u.total_tokens) : int(u.prompt_tokens) + int(u.completion_tokens),
      };
    }
    if (c.choices === undefined || c.choices === null) {
      return [];
    }
    if (!Array.isArray(c.choices)) {
      throw badResponse(`event ${this.events} has choices that are not a list`);
    }
    const out: ChoiceDelta[] = [];
    for (const raw of c.choices as unknown[]) {
      out.push(...this.choice(raw));
    }
    return out;
  }

  private state(index: number): ChoiceState {
    let state = this.choices.get(index);
    if (!state) {
      state = { calls: new Map(), finish: null, toolCalls: 0, content: false, logprobs: 0 };
      this.choices.set(index, state);
    }
    return state;
  }

  private choice(raw: unknown): ChoiceDelta[] {
    const choice = raw as {
      index?: unknown;
      delta?: {
        content?: unknown;
        reasoning_content?: unknown;
        reasoning?: unknown;
        tool_calls?: unknown;
      } | null;
      logprobs?: { content?: unknown } | null;
      finish_reason?: unknown;
    } | null;
    const index = choice?.index ?? 0;
    if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= Math.max(this.n, 1)) {
      throw badResponse(`event ${this.events} has a choice index ${JSON.stringify(index)} (asked for ${this.n})`);
    }
    const state = this.state(index);
    const delta: ChoiceDelta = { index };
    const d = choice?.delta ?? {};
    const reasoning = typeof d.reasoning_content === 'string' ? d.reasoning_content : d.reasoning;
    if (typeof reasoning === 'string' && reasoning !== '') {
      delta.reasoning = reasoning;
    }
    if (typeof d.content === 'string' && d.content !== '') {
      delta.content = d.content;
      state.content = true;
    }
    if (Array.isArray(d.tool_calls)) {
      d.tool_calls.forEach((fragment: unknown, position) => this.fragment(state, fragment, position));
    }
    const logprobs = choice?.logprobs?.content;
    if (Array.isArray(logprobs) && logprobs.length > 0) {
      const mapped = logprobs.map((l) => tokenLogprob(l, this.topLogprobs));
      if (mapped.some((l) => l === null)) {
        throw badResponse(`event ${this.events} has malformed logprobs`);
      }
      delta.logprobs = mapped as TokenLogprob[];
      state.logprobs += mapped.length;
    }
    const out: ChoiceDelta[] = Object.keys(delta).length > 1 ? [delta] : [];
    if (choice?.finish_reason !== undefined && choice.finish_reason !== null) {
      state.finish = finishReason(choice.finish_reason);
      const calls = this.flush(index, state);
      if (calls) {
        out.push(calls);
      }
    }
    return out;
  }

  private fragment(state: ChoiceState, raw: unknown, position: number): void {
    const f = raw as { index?: unknown; id?: unknown; function?: { name?: unknown; arguments?: unknown } } | null;
    const key = typeof f?.index === 'number' ? f.index : position;
    let call = state.calls.get(key);
    if (!call) {
      call = { id: '', name: '', arguments: '' };
      state.calls.set(key, call);
    }
    // The id and name come with the first fragment; some servers repeat them, which must not double them.
    if (typeof f?.id === 'string' && f.id !== '' && call.id === '') {
      call.id = f.id;
    }
    if (typeof f?.function?.name === 'string' && f.function.name !== '' && call.name === '') {
      call.name = f.function.name;
    }
    if (typeof f?.function?.arguments === 'string') {
      call.arguments += f.function.arguments;
    }
  }

  /** The joined tool calls of a choice, as one delta, in the order of their indexes. */
  private flush(index: number, state: ChoiceState): ChoiceDelta | null {
    if (state.calls.size === 0) {
      return null;
    }
    const calls: ToolCall[] = [...state.calls.entries()]
      .sort(([a], [b]) => a - b)
      .map(([, call]) => {
        if (call.name === '') {
          throw badResponse('a tool call without a function name');
        }
        return {
          id: call.id || toolCallId(),
          type: 'function',
          function: { name: call.name, arguments: call.arguments === '' ? '{}' : call.arguments },
        };
      });
    state.calls.clear();
    state.toolCalls += calls.length;
    return { index, tool_calls: calls };
  }

  private flushAll(): ChoiceDelta[] {
    const out: ChoiceDelta[] = [];
    for (const [index, state] of [...this.choices.entries()].sort(([a], [b]) => a - b)) {
      const calls = this.flush(index, state);
      if (calls) {
        out.push(calls);
      }
    }
    return out;
  }

  /** After the stream: whatever tool calls are still pending, to emit before the result. */
  drain(): ChoiceDelta[] {
    return this.flushAll();
  }

  /**
   * The finish reason of each of the n choices and the usage. A stream that ended without `[DONE]`
   * before every choice finished was cut off; a server that ignored n or logprobs gave an answer
   * that would look right but is not what was asked, so it is an error too.
   */
  result(): BackendResult {
    const finished = [...this.choices.values()].every((s) => s.finish !== null);
    if (!this.done && (this.choices.size === 0 || !finished)) {
      throw badResponse('the stream ended before [DONE]');
    }
    if (this.choices.size < this.n) {
      throw badResponse(`asked for n=${this.n} choices, the upstream answered ${this.choices.size}: it ignores n`);
    }
    if (this.logprobsRequested && [...this.choices.values()].some((s) => s.content && s.logprobs === 0)) {
      throw badResponse('asked for logprobs, the upstream sent none: it ignores logprobs');
    }
    const finish_reasons = Array.from({ length: this.n }, (_, index) => {
      const state = this.choices.get(index)!;
      const reason = state.finish ?? 'stop';
      return state.toolCalls > 0 && reason !== 'length' ? 'tool_calls' : reason;
    });
    return { finish_reasons, usage: this.usage };
  }
}
