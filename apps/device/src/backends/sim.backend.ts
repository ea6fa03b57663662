import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { ChoiceDelta, Feature, Usage } from '@app/common/protocol/chat';
import { FEATURES } from '@app/common/protocol/chat';
import type { ModelIdentity } from '@app/common/protocol/messages';
import type { Backend, BackendResult, BackendTask, DeltaSink, EmbedResult, EmbedTask } from './backend';
import { BackendError, abortableSleep, cancelledError } from './backend';
import { planContinuation } from './sim-continuation';
import { simEmbedding, simEmbeddingTokens } from './sim-embedding';
import { countWords } from './sim-generation';
import { planReply } from './sim-plan';

/**
 * The `sim` backend: a deterministic stand-in for a model, for demos, load tests and capacity
 * planning. The same conversation always gets the same reply (a PRNG seeded from SHA-256 of the
 * messages' contents and the choice index picks words from a fixed vocabulary), paced like a real
 * runtime: the first token after `ttftMs`, then `tokensPerSecond`. It honours the request fields a
 * real runtime would (max_tokens, stop, n, tools, response_format, logprobs, reasoning_effort) so
 * that every path of the relay can be exercised without a GPU, and continues an assistant prefix (a
 * resumed task) exactly where its uninterrupted reply would have gone on. It embeds too: a unit
 * vector per input, seeded by the input (sim-embedding.ts), after `ttftMs` (a runtime's evaluation of
 * the inputs).
 */
export interface SimOptions {
  models: string[];
  /** Time to first token, in milliseconds. */
  ttftMs: number;
  /** Pace after the first token; 0 emits as fast as the event loop allows. */
  tokensPerSecond: number;
  /** Length of the natural reply in tokens (words); max_tokens and stop may cut it short. */
  tokens: number;
  /** The features announced. Usage is reported only with `stream_usage`, like a runtime without counts. */
  features: Feature[];
  /**
   * The length of the sim's vectors (its embedding models' size, 1 to EMBED_MAX_DIMENSIONS; by default
   * SIM_DEFAULTS.embeddingDimensions); a request's `dimensions` asks for fewer.
   */
  embeddingDimensions?: number;
}

/**
 * Every feature but web_search by default: a sim answers as if it had searched (it ignores the
 * options), so declaring web search is left to the operator (--web-search or --sim-features), as on
 * a real runtime, and requests that need it stay refused unless a device was set up for them.
 */
export const SIM_DEFAULTS = {
  ttftMs: 200,
  tokensPerSecond: 20,
  tokens: 64,
  features: FEATURES.filter((f) => f !== 'web_search'),
  // nomic-embed-text's size, a common embedding model (Ollama's most pulled).
  embeddingDimensions: 768,
} as const;

/** With no pacing, hand the event loop back this often so that a cancel or a socket event gets through. */
const YIELD_EVERY_STEPS = 32;
/** The protocol carries at most 8 choices (the api accepts n from 1 to 8). */
const MAX_CHOICES = 8;
/**
 * While embedding, hand the event loop back after this many values (a few milliseconds of work), so
 * that a cancel gets through a task of 2,048 inputs of thousands of dimensions.
 */
const EMBED_YIELD_EVERY_VALUES = 256 * 1024;

/**
 * The digest a sim announces for a model: SHA-256 of `switchyard-sim/<model id>`. Its "weights" are the
 * model id and the fixed vocabulary, so the same model has the same digest on every sim, and an admin
 * can pin it like a real one.
 */
export function simDigest(model: string): string {
  return `sha256:${createHash('sha256').update(`switchyard-sim/${model}`).digest('hex')}`;
}

export class SimBackend implements Backend {
  readonly name = 'sim';
  readonly features: Feature[];
  private readonly options: SimOptions;

  constructor(options: SimOptions) {
    this.options = options;
    this.features = [...options.features];
  }

  models(): string[] {
    return [...this.options.models];
  }

  identities(): ModelIdentity[] {
    return this.options.models.map((model) => ({
      model,
      digest: simDigest(model),
      family: 'sim',
      parameter_size: null,
      quantization: null,
      root: null,
      context_length: null,
    }));
  }

  /** The sim is always there: nothing to watch. */
  available(): boolean {
    return true;
  }

  async start(): Promise<void> {}

  stop(): void {}

  async run(task: BackendTask, sink: DeltaSink, signal: AbortSignal): Promise<BackendResult> {
    if (signal.aborted) {
      throw cancelledError();
    }
    const { params } = task;
    const n = Math.min(MAX_CHOICES, Math.max(1, Math.floor(params.n ?? 1)));
    const prefix = params.assistant_prefix;
    const plans = Array.from({ length: n }, (_, index) =>
      prefix === undefined
        ? planReply(params, index, this.options.tokens)
        : planContinuation(params, index, this.options.tokens, prefix),
    );

    const { ttftMs, tokensPerSecond } = this.options;
    const interval = tokensPerSecond > 0 ? 1000 / tokensPerSecond : 0;
    const start = performance.now();
    if (ttftMs > 0) {
      await abortableSleep(ttftMs, signal);
    }
    // Choices advance together, one step each per event, as a batched runtime (vLLM, llama.cpp) generates them.
    const longest = Math.max(...plans.map((p) => p.steps.length));
    for (let step = 0; step < longest; step++) {
      if (step > 0) {
        // Scheduled against the start, not the previous token, so timer lateness does not accumulate.
        const wait = interval > 0 ? start + ttftMs + step * interval - performance.now() : 0;
        if (wait >= 1) {
          await abortableSleep(wait, signal);
        } else if (step % YIELD_EVERY_STEPS === 0) {
          await new Promise<void>((resolve) => setImmediate(resolve));
        }
      }
      if (signal.aborted) {
        throw cancelledError();
      }
      const choices: ChoiceDelta[] = [];
      plans.forEach((plan, index) => {
        if (step < plan.steps.length) {
          choices.push({ index, ...plan.steps[step].delta });
        }
      });
      sink.delta(choices);
    }
    if (signal.aborted) {
      throw cancelledError();
    }

    const completionTokens = plans.reduce((sum, p) => sum + p.steps.reduce((s, step) => s + step.tokens, 0), 0);
    // A continued reply's prefix is prompt to the sim, as it is to a runtime.
    const promptTokens = params.messages.reduce((sum, m) => sum + countWords(m.content), 0) + plans[0].prefixTokens;
    const usage: Usage | null = this.features.includes('stream_usage')
      ? {
          prompt_tokens: promptTokens,
          completion_tokens: completionTokens,
          total_tokens: promptTokens + completionTokens,
        }
      : null;
    return { finish_reasons: plans.map((p) => p.finish), usage };
  }

  /**
   * The inputs' vectors (see {@link simEmbedding}), after `ttftMs`. `dimensions` shortens them, and
   * more than the model's `embeddingDimensions` is refused as OpenAI refuses it (a model cannot make
   * its vectors longer). Usage, with `stream_usage`, counts the inputs' tokens as it counts a prompt's.
   */
  async embed(task: EmbedTask, signal: AbortSignal): Promise<EmbedResult> {
    if (signal.aborted) {
      throw cancelledError();
    }
    const { input, dimensions } = task.params;
    const size = this.options.embeddingDimensions ?? SIM_DEFAULTS.embeddingDimensions;
    if (dimensions !== undefined && dimensions > size) {
      throw new BackendError(
        'upstream_bad_request',
        `the model's vectors have ${size} dimensions, fewer than the ${dimensions} requested`,
      );
    }
    const length = dimensions ?? size;
    if (this.options.ttftMs > 0) {
      await abortableSleep(this.options.ttftMs, signal);
    }
    const inputs: readonly (string | number[])[] = input;
    const vectors: Float32Array[] = [];
    let work = 0;
    for (const item of inputs) {
      if (work >= EMBED_YIELD_EVERY_VALUES) {
        work = 0;
        await new Promise<void>((resolve) => setImmediate(resolve));
        if (signal.aborted) {
          throw cancelledError();
        }
      }
      vectors.push(simEmbedding(item, length));
      work += length;
    }
    if (signal.aborted) {
      throw cancelledError();
    }
    const promptTokens = this.features.includes('stream_usage')
      ? inputs.reduce((sum, item) => sum + simEmbeddingTokens(item), 0)
      : null;
    return { vectors, promptTokens };
  }
}
