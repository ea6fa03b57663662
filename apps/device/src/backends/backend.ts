import type { ChatParams, ChoiceDelta, Feature, FinishReason, Usage } from '@app/common/protocol/chat';
import type { EmbedParams } from '@app/common/protocol/embeddings';
import type { ModelIdentity } from '@app/common/protocol/messages';

/** What a backend is asked to run: one assigned task, already validated by the api. */
export interface BackendTask {
  /** The public model id as the dispatcher assigned it (one of {@link Backend.models}). */
  model: string;
  params: ChatParams;
  /** The W3C `traceparent` the runtime request carries, when traces are exported. */
  traceparent?: string;
}

/** An embedding task: one batch of a request's inputs, already validated by the api. */
export interface EmbedTask {
  /** The public model id as the dispatcher assigned it (one of {@link Backend.models}). */
  model: string;
  params: EmbedParams;
  /** The W3C `traceparent` the runtime request carries, when traces are exported. */
  traceparent?: string;
}

/** What the runtime answered an embedding task. */
export interface EmbedResult {
  /**
   * One vector per input, in the inputs' order, as float32: what the runtime gave, each value rounded
   * to float32 (Math.fround) and nothing else, since the protocol carries float32 and a client may
   * compare vectors bit for bit. All of one length, 1 to EMBED_MAX_DIMENSIONS, every value finite.
   */
  vectors: Float32Array[];
  /** The tokens of every input together, as the runtime counted them; null when it gives no count. */
  promptTokens: number | null;
}

/** Where a backend writes its output; the agent turns each call into one `task:delta` event. */
export interface DeltaSink {
  /** Output for one or more choices; never called with an empty array. */
  delta(choices: ChoiceDelta[]): void;
}

export interface BackendResult {
  /** finish_reason per choice index. */
  finish_reasons: FinishReason[];
  /** Null when the runtime reports no token counts. */
  usage: Usage | null;
}

/**
 * A local runtime the agent serves tasks from (sim, Ollama, an OpenAI-compatible server). The agent
 * runs at most one task at a time, so a backend need not be re-entrant.
 */
export interface Backend {
  readonly name: string;
  /**
   * The features this backend supports, announced to the dispatcher, which routes accordingly. May
   * change while running (an upstream's version decides some); the backend then calls its listener.
   */
  readonly features: Feature[];
  /** The public model ids this device serves now. */
  models(): string[];
  /**
   * What the runtime says each of those models is (its digest, family, size, quantization, weights,
   * context), for the models it says anything of; announced, and checked against an admin's pins.
   */
  identities(): ModelIdentity[];
  /** Whether the runtime answers; an unreachable one takes no tasks until a health probe succeeds. */
  available(): boolean;
  /**
   * Starts watching the runtime (model discovery, health probes) and resolves once its first state is
   * known, so that the first announce is already right. `onChange` runs whenever models, identities,
   * features or availability change afterwards.
   */
  start(onChange: () => void): Promise<void>;
  /** Stops the watching timers; a run under way is aborted through its signal, not here. */
  stop(): void;
  /**
   * Runs one task to its end. Resolves with the finish reasons and usage; rejects with a
   * {@link BackendError} (or any error, reported as `backend_error`). When `signal` aborts it must
   * stop at once, call the sink no more and reject with {@link cancelledError}.
   */
  run(task: BackendTask, sink: DeltaSink, signal: AbortSignal): Promise<BackendResult>;
  /**
   * Embeds a task's inputs. Whole, not streamed: runtimes answer embeddings in one body, and the
   * agent cuts the vectors into events of its own size. Rejects as {@link run} does, and with
   * {@link cancelledError} when `signal` aborts. Every backend has it; one whose runtime cannot embed
   * does not declare `embeddings`, so that it is never given an embedding task.
   */
  embed(task: EmbedTask, signal: AbortSignal): Promise<EmbedResult>;
}

/** A failure the agent reports as `task:error` with this code (lowercase snake case, as the protocol requires). */
export class BackendError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'BackendError';
  }
}

/** The rejection of a cancelled run; named AbortError like the platform's, so either is recognised. */
export function cancelledError(): BackendError {
  const error = new BackendError('cancelled', 'the task was cancelled');
  error.name = 'AbortError';
  return error;
}

/** Whether an error is a cancellation (ours, or the platform's from an aborted fetch or timer). */
export function isCancellation(error: unknown): boolean {
  return error instanceof Error && (error.name === 'AbortError' || (error as { code?: unknown }).code === 'cancelled');
}

/** Resolves after `ms`, or rejects with {@link cancelledError} as soon as `signal` aborts. */
export function abortableSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(cancelledError());
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(cancelledError());
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
