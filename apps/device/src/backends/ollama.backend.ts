import type { Logger } from '@app/common/logging/logger';
import type { ChatParams, ChoiceDelta, Feature } from '@app/common/protocol/chat';
import type { EmbedParams } from '@app/common/protocol/embeddings';
import type { BackendResult, BackendTask, DeltaSink, EmbedResult, EmbedTask } from './backend';
import { cancelledError } from './backend';
import { ollamaChatRequest } from './ollama-chat-request';
import { OllamaChatStream } from './ollama-chat-stream';
import { ollamaEmbedRequest, ollamaEmbedResult } from './ollama-embed-request';
import { endpoint, failure, finished, getJson, postJson, readLines, send } from './upstream/http-client';
import { badResponse } from './upstream/runtime-errors';
import { text } from './upstream/runtime-fields';
import type { ProbeResult, RuntimeIdentity } from './upstream/upstream-monitor';
import { UpstreamBackend } from './upstream/upstream-backend';
import { UNKNOWN_IDENTITY, UpstreamMonitor } from './upstream/upstream-monitor';
import type { UpstreamOptions } from './upstream/upstream-options';
import { stopTextFilter } from './upstream/stop-text';
import { CONNECT_TIMEOUT_MS, PROBE_TIMEOUT_MS, watched } from './upstream/upstream-options';

/**
 * What Ollama's /api/chat honours: tools, `format` ("json" or a JSON schema), the usage counts of its
 * final line, and `think`. Not `n` nor `logit_bias`, which it silently ignores (a client would get one
 * choice, or an unbiased answer, that looks right). `logprobs`, `continue`, `embeddings` and
 * `embed_dimensions` only from the versions that added them (see {@link ollamaFeatures}).
 */
export const OLLAMA_FEATURES: Feature[] = ['tools', 'json_object', 'json_schema', 'stream_usage', 'reasoning_effort'];
/** Ollama 0.12.11 added `logprobs` / `top_logprobs` to /api/chat; older versions drop them without a word. */
export const OLLAMA_LOGPROBS_SINCE = [0, 12, 11] as const;
/**
 * Ollama 0.2.8 continues a final assistant message ("preserve last assistant message", ollama#5802):
 * the prompt ends with its text instead of closing it. Older versions would start a new reply.
 */
export const OLLAMA_CONTINUE_SINCE = [0, 2, 8] as const;
/** Ollama 0.2.6 added /api/embed, with a list of inputs (ollama#5127); before it, only /api/embeddings, one prompt each. */
export const OLLAMA_EMBED_SINCE = [0, 2, 6] as const;
/**
 * Ollama 0.11.11 added `dimensions` to /api/embed (ollama#12242: the first k values, normalised again);
 * older versions drop the field and answer the model's whole vector.
 */
export const OLLAMA_EMBED_DIMENSIONS_SINCE = [0, 11, 11] as const;

/** Ollama's answer when a `think` level is sent to a model that only takes true/false (levels are gpt-oss's). */
const THINK_LEVEL_REFUSED = /think value .* is not supported/i;

/** The features of an Ollama of this version (null when it does not say): the base set, and those that came later. */
export function ollamaFeatures(version: string | null): Feature[] {
  const features = [...OLLAMA_FEATURES];
  if (versionAtLeast(version, OLLAMA_LOGPROBS_SINCE)) {
    features.push('logprobs');
  }
  if (versionAtLeast(version, OLLAMA_CONTINUE_SINCE)) {
    features.push('continue');
  }
  // Never `embed_tokens`: /api/embed takes text only ("invalid input type" for anything else).
  if (versionAtLeast(version, OLLAMA_EMBED_SINCE)) {
    features.push('embeddings');
  }
  if (versionAtLeast(version, OLLAMA_EMBED_DIMENSIONS_SINCE)) {
    features.push('embed_dimensions');
  }
  return features;
}

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

/** An entry of Ollama's /api/tags, as far as the agent reads it (any field may be missing or of another type). */
interface OllamaTag {
  name?: unknown;
  model?: unknown;
  digest?: unknown;
  details?: { family?: unknown; parameter_size?: unknown; quantization_level?: unknown } | null;
}

/**
 * What /api/tags says of a model: its digest (64 hex digits, which Switchyard writes `sha256:<hex>`;
 * anything else is no digest) and its details.
 */
export function ollamaIdentity(entry: OllamaTag): RuntimeIdentity {
  const digest = typeof entry.digest === 'string' ? entry.digest.toLowerCase().replace(/^sha256:/, '') : '';
  return {
    ...UNKNOWN_IDENTITY,
    digest: /^[0-9a-f]{64}$/.test(digest) ? `sha256:${digest}` : null,
    family: text(entry.details?.family, 100),
    parameter_size: text(entry.details?.parameter_size, 32),
    quantization: text(entry.details?.quantization_level, 32),
  };
}

/** Serves tasks through a local Ollama: chat with /api/chat, streaming its NDJSON answer; embeddings with /api/embed. */
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

  /** GET /api/version (which features this Ollama has) and GET /api/tags (which models, and what each is). */
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
    const models: string[] = [];
    const identities = new Map<string, RuntimeIdentity>();
    for (const entry of tags.models as OllamaTag[]) {
      const name = typeof entry?.name === 'string' ? text(entry.name, 200) : text(entry?.model, 200);
      if (name !== null) {
        models.push(name);
        identities.set(name, ollamaIdentity(entry));
      }
    }
    return {
      models,
      identities,
      features: ollamaFeatures(version),
      runtime: `ollama ${version ?? '(version unknown)'}`,
    };
  }

  run(task: BackendTask, sink: DeltaSink, signal: AbortSignal): Promise<BackendResult> {
    return watched(this.monitor, () =>
      this.chat(this.monitor.upstreamName(task.model), task.params, sink, signal, task.traceparent),
    );
  }

  embed(task: EmbedTask, signal: AbortSignal): Promise<EmbedResult> {
    return watched(this.monitor, () =>
      this.embedInputs(this.monitor.upstreamName(task.model), task.params, signal, task.traceparent),
    );
  }

  /** POST /api/embed, answered in one body: every input's vector and the count of their tokens. */
  private async embedInputs(
    model: string,
    params: EmbedParams,
    signal: AbortSignal,
    traceparent?: string,
  ): Promise<EmbedResult> {
    const answer = await postJson(endpoint(this.base, '/api/embed'), ollamaEmbedRequest(model, params), {
      apiKey: this.options.apiKey,
      signal,
      traceparent,
      connectTimeoutMs: CONNECT_TIMEOUT_MS,
    });
    return ollamaEmbedResult(answer, params);
  }

  private async chat(
    model: string,
    params: ChatParams,
    sink: DeltaSink,
    signal: AbortSignal,
    traceparent?: string,
  ): Promise<BackendResult> {
    const url = endpoint(this.base, '/api/chat');
    const post = (thinkLevels: boolean) =>
      send({
        method: 'POST',
        url,
        apiKey: this.options.apiKey,
        body: ollamaChatRequest(model, params, thinkLevels),
        signal,
        traceparent,
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
        if (!stopText?.done) {
          // The runtime's last event: its connection serves the next task.
          finished(res);
        }
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
