import type { Logger } from '@app/common/logging/logger';
import type {
  ChatParams,
  ChoiceDelta,
  Feature,
  FinishReason,
  TokenLogprob,
  ToolCall,
  Usage,
} from '@app/common/protocol/chat';
import type { BackendResult, BackendTask, DeltaSink } from './backend';
import { BackendError, cancelledError } from './backend';
import {
  badResponse,
  describeUrl,
  endpoint,
  failure,
  getJson,
  parseErrorBody,
  readLines,
  send,
  streamError,
} from './upstream/http-client';
import { SseDecoder } from './upstream/sse';
import { stopTextFilter } from './upstream/stop-text';
import type { SseEvent } from './upstream/sse';
import type { ProbeResult } from './upstream/upstream-monitor';
import { UpstreamBackend } from './upstream/upstream-backend';
import { UpstreamMonitor } from './upstream/upstream-monitor';
import type { UpstreamOptions } from './upstream/upstream-options';
import {
  CONNECT_TIMEOUT_MS,
  MAX_CHOICES,
  PROBE_TIMEOUT_MS,
  tokenLogprob,
  toolCallId,
  watched,
} from './upstream/upstream-options';

/**
 * What vLLM and llama.cpp's server accept on /v1/chat/completions: tools, both response formats,
 * logprobs, logit_bias, usage in the stream (stream_options.include_usage), and n (vLLM). Not
 * reasoning_effort: vLLM uses it for gpt-oss only and llama.cpp not at all, so declaring it would
 * promise reasoning that most servers do not give; an operator who knows better adds it with --features.
 */
export const OPENAI_FEATURES: Feature[] = [
  'tools',
  'json_object',
  'json_schema',
  'logprobs',
  'n',
  'stream_usage',
  'logit_bias',
];

/** llama.cpp's server (its /models say `owned_by: "llamacpp"`) refuses n > 1: "Only one completion choice is allowed". */
const SINGLE_CHOICE_SERVERS = new Set(['llamacpp']);

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

/** Serves tasks through an OpenAI-compatible server's /chat/completions (llama.cpp, vLLM, LM Studio). */
export class OpenAIBackend extends UpstreamBackend {
  readonly name = 'openai';
  private readonly base: URL;
  protected readonly monitor: UpstreamMonitor;

  constructor(
    private readonly options: UpstreamOptions,
    logger: Logger,
  ) {
    super();
    this.base = new URL(options.upstream);
    this.monitor = new UpstreamMonitor({
      backend: this.name,
      mapping: options.models,
      featureOverride: options.features,
      extraFeatures: options.webSearch ? ['web_search'] : [],
      defaultFeatures: OPENAI_FEATURES,
      discoveryIntervalMs: options.discoveryIntervalMs,
      healthIntervalMs: options.healthIntervalMs,
      probeTimeoutMs: PROBE_TIMEOUT_MS,
      probe: (signal) => this.probe(signal),
      logger,
    });
  }

  /** GET {upstream}/models: the models, and from their `owned_by` which server this is. */
  private async probe(signal: AbortSignal): Promise<ProbeResult> {
    const url = endpoint(this.base, '/models');
    const answer = (await getJson(url, {
      apiKey: this.options.apiKey,
      signal,
      connectTimeoutMs: CONNECT_TIMEOUT_MS,
    }).catch((error: unknown) => {
      if ((error as { code?: unknown }).code === 'model_not_found') {
        // A 404 for the list itself: the base URL is wrong, most often a missing /v1.
        throw new BackendError(
          'upstream_bad_request',
          `${describeUrl(url)} answered 404: check --upstream (an OpenAI-compatible server's base URL usually ends in /v1)`,
        );
      }
      throw error;
    })) as { data?: unknown } | null;
    if (!Array.isArray(answer?.data)) {
      throw badResponse('/models has no data array');
    }
    const entries = answer.data as { id?: unknown; owned_by?: unknown }[];
    const models = entries
      .map((m) => (typeof m?.id === 'string' ? m.id : null))
      .filter((m): m is string => m !== null && m.length > 0 && m.length <= 200);
    const owners = [...new Set(entries.map((m) => m?.owned_by).filter((o): o is string => typeof o === 'string'))];
    const single = owners.some((o) => SINGLE_CHOICE_SERVERS.has(o));
    return {
      models,
      features: single ? OPENAI_FEATURES.filter((f) => f !== 'n') : OPENAI_FEATURES,
      runtime: owners.join(',') || 'openai-compatible',
    };
  }

  run(task: BackendTask, sink: DeltaSink, signal: AbortSignal): Promise<BackendResult> {
    return watched(this.monitor, () => this.chat(this.monitor.upstreamName(task.model), task.params, sink, signal));
  }

  private async chat(model: string, params: ChatParams, sink: DeltaSink, signal: AbortSignal): Promise<BackendResult> {
    const url = endpoint(this.base, '/chat/completions');
    const res = await send({
      method: 'POST',
      url,
      apiKey: this.options.apiKey,
      body: openaiChatRequest(model, params),
      signal,
      connectTimeoutMs: CONNECT_TIMEOUT_MS,
    });
    if (res.statusCode !== 200) {
      throw await failure(res, url, signal);
    }
    const n = Math.min(MAX_CHOICES, Math.max(1, params.n ?? 1));
    const stream = new OpenAIChatStream(n, Boolean(params.logprobs), params.top_logprobs ?? 0);
    const stopText = stopTextFilter(params, n);
    const decoder = new SseDecoder();
    const emit = (deltas: ChoiceDelta[]) => {
      if (signal.aborted) {
        throw cancelledError();
      }
      const out = stopText ? stopText.filter(deltas) : deltas;
      if (out.length > 0) {
        sink.delta(out);
      }
    };
    for await (const line of readLines(res, url, signal)) {
      const event = decoder.line(line);
      if (event) {
        emit(stream.push(event));
        if (stream.done || stopText?.done) {
          break;
        }
      }
    }
    if (stopText?.done) {
      // Every choice met a stop string: the runtime was left before it counted tokens.
      emit(stream.drain());
      return stopText.result(null);
    }
    if (!stream.done) {
      const last = decoder.end();
      if (last) {
        emit(stream.push(last));
      }
    }
    if (signal.aborted) {
      throw cancelledError();
    }
    const held = stopText?.drain() ?? [];
    if (held.length > 0) {
      sink.delta(held);
    }
    emit(stream.drain());
    return stopText ? stopText.result(stream.result()) : stream.result();
  }
}
