import type { Logger } from '@app/common/logging/logger';
import type { ChatParams, ChoiceDelta, Feature, FinishReason, ToolCall, Usage } from '@app/common/protocol/chat';
import type { BackendResult, BackendTask, DeltaSink } from './backend';
import { BackendError, cancelledError } from './backend';
import { badResponse, endpoint, failure, getJson, readLines, send, streamError } from './upstream/http-client';
import type { ProbeResult } from './upstream/upstream-monitor';
import { UpstreamBackend } from './upstream/upstream-backend';
import { UpstreamMonitor } from './upstream/upstream-monitor';
import type { UpstreamOptions } from './upstream/upstream-options';
import { stopTextFilter } from './upstream/stop-text';
import { CONNECT_TIMEOUT_MS, PROBE_TIMEOUT_MS, tokenLogprob, toolCallId, watched } from './upstream/upstream-options';

/**
 * What Ollama's /api/chat honours: tools, `format` ("json" or a JSON schema), the usage counts of its
 * final line, and `think`. Not `n` nor `logit_bias`, which it silently ignores (a client would get one
 * choice, or an unbiased answer, that looks right). `logprobs` only from the version that added it.
 */
export const OLLAMA_FEATURES: Feature[] = ['tools', 'json_object', 'json_schema', 'stream_usage', 'reasoning_effort'];
/** Ollama 0.12.11 added `logprobs` / `top_logprobs` to /api/chat; older versions drop them without a word. */
export const OLLAMA_LOGPROBS_SINCE = [0, 12, 11] as const;

/** Ollama's answer when a `think` level is sent to a model that only takes true/false (levels are gpt-oss's). */
const THINK_LEVEL_REFUSED = /think value .* is not supported/i;

/** Whether a version string (`0.12.11`, `0.13.0-rc1`) is at least `min`; unknown and dev (`0.0.0`) builds are not. */
export function versionAtLeast(version: string | null, min: readonly number[]): boolean {
  const match = /^v?(\d+)\.(\d+)\.(\d+)/.exec(version ?? '');
  if (!match) {
    return false;
  }
  const parts = match.slice(1, 4).map(Number);
  for (let i = 0; i < min.length; i++) {
    if (parts[i] !== min[i]) {
      return parts[i] > min[i];
    }
  }
  return true;
}

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
 */
export function ollamaChatRequest(model: string, params: ChatParams, thinkLevels = true): Record<string, unknown> {
  const callNames = new Map<string, string>();
  for (const message of params.messages) {
    for (const call of message.tool_calls ?? []) {
      callNames.set(call.id, call.function.name);
    }
  }
  const messages = params.messages.map((m, i) => {
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

/** Serves tasks through a local Ollama's /api/chat, streaming its NDJSON answer. */
export class OllamaBackend extends UpstreamBackend {
  readonly name = 'ollama';
  private readonly base: URL;
  protected readonly monitor: UpstreamMonitor;
  /** Models that refused a `think` level; they get `think: true`. */
  private readonly booleanThink = new Set<string>();

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
      defaultFeatures: OLLAMA_FEATURES,
      discoveryIntervalMs: options.discoveryIntervalMs,
      healthIntervalMs: options.healthIntervalMs,
      probeTimeoutMs: PROBE_TIMEOUT_MS,
      probe: (signal) => this.probe(signal),
      // `ollama pull llama3.2` is listed as llama3.2:latest, and /api/chat takes either name.
      aliases: (name) => (name.includes(':') ? [name] : [name, `${name}:latest`]),
      logger,
    });
  }

  /** GET /api/version (which features this Ollama has) and GET /api/tags (which models). */
  private async probe(signal: AbortSignal): Promise<ProbeResult> {
    const request = { apiKey: this.options.apiKey, signal, connectTimeoutMs: CONNECT_TIMEOUT_MS };
    let version: string | null = null;
    try {
      const answer = (await getJson(endpoint(this.base, '/api/version'), request)) as { version?: unknown } | null;
      version = typeof answer?.version === 'string' ? answer.version : null;
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (code === 'upstream_unreachable' || code === 'cancelled') {
        throw error;
      }
      // A proxy in front of Ollama may not pass /api/version: the version stays unknown.
    }
    const tags = (await getJson(endpoint(this.base, '/api/tags'), request)) as { models?: unknown } | null;
    if (!Array.isArray(tags?.models)) {
      throw badResponse('/api/tags has no models array');
    }
    const models = (tags.models as { name?: unknown; model?: unknown }[])
      .map((m) => (typeof m?.name === 'string' ? m.name : typeof m?.model === 'string' ? m.model : null))
      .filter((m): m is string => m !== null && m.length > 0 && m.length <= 200);
    const features = versionAtLeast(version, OLLAMA_LOGPROBS_SINCE)
      ? [...OLLAMA_FEATURES, 'logprobs' as const]
      : OLLAMA_FEATURES;
    return { models, features, runtime: `ollama ${version ?? '(version unknown)'}` };
  }

  run(task: BackendTask, sink: DeltaSink, signal: AbortSignal): Promise<BackendResult> {
    return watched(this.monitor, () => this.chat(this.monitor.upstreamName(task.model), task.params, sink, signal));
  }

  private async chat(model: string, params: ChatParams, sink: DeltaSink, signal: AbortSignal): Promise<BackendResult> {
    const url = endpoint(this.base, '/api/chat');
    const post = (thinkLevels: boolean) =>
      send({
        method: 'POST',
        url,
        apiKey: this.options.apiKey,
        body: ollamaChatRequest(model, params, thinkLevels),
        signal,
        connectTimeoutMs: CONNECT_TIMEOUT_MS,
      });
    const levels = !this.booleanThink.has(model);
    let res = await post(levels);
    if (res.statusCode !== 200) {
      const error = await failure(res, url, signal);
      if (!(levels && params.reasoning_effort && THINK_LEVEL_REFUSED.test(error.message))) {
        throw error;
      }
      // Levels are gpt-oss's; other thinking models (qwen3, deepseek-r1) take true/false. Nothing was generated yet.
      this.booleanThink.add(model);
      res = await post(false);
      if (res.statusCode !== 200) {
        throw await failure(res, url, signal);
      }
    }
    const stream = new OllamaChatStream(params.top_logprobs ?? 0);
    const stopText = stopTextFilter(params, 1);
    const emit = (deltas: ChoiceDelta[]) => {
      const out = stopText ? stopText.filter(deltas) : deltas;
      if (out.length > 0) {
        sink.delta(out);
      }
    };
    for await (const line of readLines(res, url, signal)) {
      if (signal.aborted) {
        throw cancelledError();
      }
      if (line.trim() === '') {
        continue;
      }
      const delta = stream.push(line);
      if (delta) {
        emit([delta]);
      }
      if (stream.done || stopText?.done) {
        break;
      }
    }
    if (signal.aborted) {
      throw cancelledError();
    }
    if (!stopText) {
      return stream.result();
    }
    if (stopText.done) {
      // The stop string came: Ollama was left before its final line, which carries the counts.
      return stopText.result(null);
    }
    const held = stopText.drain();
    if (held.length > 0) {
      sink.delta(held);
    }
    return stopText.result(stream.result());
  }
}
