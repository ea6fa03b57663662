import type { Logger } from '@app/common/logging/logger';
import type { ChatParams, ChoiceDelta, Feature } from '@app/common/protocol/chat';
import type { EmbedParams } from '@app/common/protocol/embeddings';
import type { BackendResult, BackendTask, DeltaSink, EmbedResult, EmbedTask } from './backend';
import type { OpenAIServer } from './openai-chat-request';
import { openaiChatRequest } from './openai-chat-request';
import { OpenAIChatStream } from './openai-chat-stream';
import type { OpenAIEmbedFormat } from './openai-embed-request';
import { openaiEmbedRequest, openaiEmbedResult, refusesBase64 } from './openai-embed-request';
import { BackendError, cancelledError, isCancellation } from './backend';
import {
  describeUrl,
  endpoint,
  failure,
  finished,
  getJson,
  readJson,
  readLines,
  readText,
  send,
} from './upstream/http-client';
import type { UpstreamErrorBody } from './upstream/runtime-errors';
import { badResponse, httpError, parseErrorBody } from './upstream/runtime-errors';
import { SseDecoder } from './upstream/sse';
import { stopTextFilter } from './upstream/stop-text';
import { count, text } from './upstream/runtime-fields';
import type { ProbeResult, RuntimeIdentity } from './upstream/upstream-monitor';
import { UpstreamBackend } from './upstream/upstream-backend';
import { UNKNOWN_IDENTITY, UpstreamMonitor } from './upstream/upstream-monitor';
import type { UpstreamOptions } from './upstream/upstream-options';
import { CONNECT_TIMEOUT_MS, MAX_CHOICES, PROBE_TIMEOUT_MS, watched } from './upstream/upstream-options';

/**
 * What vLLM and llama.cpp's server accept on /v1/chat/completions: tools, both response formats,
 * logprobs, logit_bias, usage in the stream (stream_options.include_usage), and n (vLLM). Not
 * reasoning_effort: vLLM uses it for gpt-oss only and llama.cpp not at all, so declaring it would
 * promise reasoning that most servers do not give; an operator who knows better adds it with --features.
 * `continue` comes once a probe has seen which server answers ({@link openaiFeatures}).
 *
 * Embeddings: /embeddings, with inputs as text or token ids (`embed_tokens`: vLLM and llama.cpp's
 * server take both). Not `embed_dimensions`: vLLM honours `dimensions` only for matryoshka models and
 * refuses it for the others (vllm-project/vllm#16331), llama.cpp's server ignores it
 * (ggml-org/llama.cpp#25210), and no /models entry says which model is which, so declaring it would
 * send requests that fail or come back at full length; an operator who serves a matryoshka model on
 * vLLM adds it with --features.
 */
export const OPENAI_FEATURES: Feature[] = [
  'tools',
  'json_object',
  'json_schema',
  'logprobs',
  'n',
  'stream_usage',
  'logit_bias',
  'embeddings',
  'embed_tokens',
];

/** llama.cpp's server (its /models say `owned_by: "llamacpp"`) refuses n > 1: "Only one completion choice is allowed". */
const SINGLE_CHOICE_SERVERS = new Set(['llamacpp']);

/**
 * The server, from the `owned_by` of its /models entries: vLLM or llama.cpp when every entry says so.
 * Any other (LM Studio, a proxy in front of several) is `other`.
 */
export function openaiServer(owners: string[]): OpenAIServer {
  if (owners.length > 0 && owners.every((o) => o === 'vllm')) {
    return 'vllm';
  }
  if (owners.length > 0 && owners.every((o) => o === 'llamacpp')) {
    return 'llamacpp';
  }
  return 'other';
}

/**
 * The features of a server with these `owned_by`s: not `n` where llama.cpp answers, and `continue` only
 * from the servers known to continue a final assistant message (vLLM's continue_final_message,
 * llama.cpp's assistant prefill). Another server would answer a new reply after the answer so far, a
 * wrong answer that looks right.
 */
export function openaiFeatures(owners: string[]): Feature[] {
  const features = owners.some((o) => SINGLE_CHOICE_SERVERS.has(o))
    ? OPENAI_FEATURES.filter((f) => f !== 'n')
    : [...OPENAI_FEATURES];
  if (openaiServer(owners) !== 'other') {
    features.push('continue');
  }
  return features;
}

/** An /embeddings answer: the JSON of a 200, or the status and error body of any other. */
type EmbeddingsReply = { ok: true; answer: unknown } | { ok: false; status: number; error: UpstreamErrorBody };

/** An entry of an OpenAI-compatible server's /models, as far as the agent reads it. */
interface OpenAIModelEntry {
  id?: unknown;
  owned_by?: unknown;
  root?: unknown;
  max_model_len?: unknown;
}

/**
 * What a /models entry says of a model: vLLM gives the weights it loaded (`root`) and the context
 * length (`max_model_len`); none of these servers gives a digest.
 */
export function openaiIdentity(entry: OpenAIModelEntry): RuntimeIdentity {
  return { ...UNKNOWN_IDENTITY, root: text(entry.root, 500), context_length: count(entry.max_model_len) };
}

/** Serves tasks through an OpenAI-compatible server's /chat/completions and /embeddings (llama.cpp, vLLM, LM Studio). */
export class OpenAIBackend extends UpstreamBackend {
  readonly name = 'openai';
  private readonly base: URL;
  protected readonly monitor: UpstreamMonitor;
  /** What the last probe found answering; a resumed task's request depends on it. */
  private server: OpenAIServer = 'other';
  /** How /embeddings is asked to write vectors: base64 until this runtime refuses it (see embedInputs). */
  private embedFormat: OpenAIEmbedFormat = 'base64';

  constructor(
    private readonly options: UpstreamOptions,
    private readonly logger: Logger,
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
    const entries = answer.data as OpenAIModelEntry[];
    const models: string[] = [];
    const identities = new Map<string, RuntimeIdentity>();
    const owners = [...new Set(entries.map((m) => m?.owned_by).filter((o): o is string => typeof o === 'string'))];
    // llama.cpp's server runs one model and describes it in /props, not in its model list.
    const props = owners.includes('llamacpp') ? await this.llamaCppProps(signal) : null;
    for (const entry of entries) {
      const id = text(entry?.id, 200);
      if (id !== null) {
        models.push(id);
        identities.set(id, props ?? openaiIdentity(entry));
      }
    }
    this.server = openaiServer(owners);
    return {
      models,
      identities,
      features: openaiFeatures(owners),
      runtime: owners.join(',') || 'openai-compatible',
    };
  }

  /**
   * GET /props at the server's root (beside /v1): the model file and the context size. Null when it
   * does not answer as llama.cpp's does (a proxy, an old build): the models are then described as
   * their list entries describe them.
   */
  private async llamaCppProps(signal: AbortSignal): Promise<RuntimeIdentity | null> {
    const root = new URL(this.base.href);
    root.pathname = root.pathname.replace(/\/+$/, '').replace(/\/v1$/, '');
    const url = endpoint(root, '/props');
    try {
      const props = (await getJson(url, {
        apiKey: this.options.apiKey,
        signal,
        connectTimeoutMs: CONNECT_TIMEOUT_MS,
      })) as {
        model_path?: unknown;
        default_generation_settings?: { n_ctx?: unknown } | null;
      } | null;
      if (!props || typeof props !== 'object') {
        return null;
      }
      return {
        ...UNKNOWN_IDENTITY,
        root: text(props.model_path, 500),
        context_length: count(props.default_generation_settings?.n_ctx),
      };
    } catch (error) {
      if (isCancellation(error)) {
        throw error;
      }
      return null;
    }
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

  /**
   * POST {upstream}/embeddings, answered in one body: every input's vector, by index, and the prompt's
   * tokens. Asked in base64 until the runtime refuses it ({@link refusesBase64}): the refused request is
   * sent once more in float, and float is asked from then on once the runtime took it (a 400 that named
   * base64 for another reason fails in float too, and leaves base64 asked).
   */
  private async embedInputs(
    model: string,
    params: EmbedParams,
    signal: AbortSignal,
    traceparent?: string,
  ): Promise<EmbedResult> {
    const url = endpoint(this.base, '/embeddings');
    const format = this.embedFormat;
    let reply = await this.postEmbeddings(url, openaiEmbedRequest(model, params, format), signal, traceparent);
    if (!reply.ok && format === 'base64' && refusesBase64(reply.status, reply.error)) {
      const refused = reply.status;
      reply = await this.postEmbeddings(url, openaiEmbedRequest(model, params, 'float'), signal, traceparent);
      if (reply.ok && this.embedFormat === 'base64') {
        this.embedFormat = 'float';
        // Not the runtime's message: a validation error may echo the request, inputs included.
        this.logger.info(
          { upstream: describeUrl(url), status: refused },
          'the runtime does not take encoding_format "base64"; embedding with "float" from now on',
        );
      }
    }
    if (!reply.ok) {
      throw httpError(reply.status, reply.error);
    }
    return openaiEmbedResult(reply.answer, params);
  }

  /**
   * Sends an /embeddings request and reads its answer: the JSON of a 200 (readJson, as postJson reads
   * it), or the status and error body of any other. Not postJson itself, which turns the
   * error into the task error at once: a refusal of base64 is told from other 400s by its status and body.
   */
  private async postEmbeddings(
    url: URL,
    body: Record<string, unknown>,
    signal: AbortSignal,
    traceparent?: string,
  ): Promise<EmbeddingsReply> {
    const res = await send({
      method: 'POST',
      url,
      apiKey: this.options.apiKey,
      body,
      signal,
      traceparent,
      connectTimeoutMs: CONNECT_TIMEOUT_MS,
    });
    if (res.statusCode !== 200) {
      return { ok: false, status: res.statusCode ?? 0, error: parseErrorBody(await readText(res, url, signal)) };
    }
    return { ok: true, answer: await readJson(res, url, signal) };
  }

  private async chat(
    model: string,
    params: ChatParams,
    sink: DeltaSink,
    signal: AbortSignal,
    traceparent?: string,
  ): Promise<BackendResult> {
    const url = endpoint(this.base, '/chat/completions');
    const res = await send({
      method: 'POST',
      url,
      apiKey: this.options.apiKey,
      body: openaiChatRequest(model, params, this.server),
      signal,
      traceparent,
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
          if (!stopText?.done) {
            // The runtime's last event: its connection serves the next task.
            finished(res);
          }
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
