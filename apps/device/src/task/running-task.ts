import { performance } from 'node:perf_hooks';
import type { ChatMessage, ChoiceDelta, FinishReason, ToolCall, Usage } from '@app/common/protocol/chat';
import type { AssignPayload } from '@app/common/protocol/device-protocol';
import type { EmbedInput } from '@app/common/protocol/embeddings';
import { SpanKind, endFailed, startSpan, traceIdOf, traceparentOf } from '@app/common/tracing/tracing';
import type { Span } from '@app/common/tracing/tracing';
import type { DispatcherLink } from '../link/dispatcher-link';

export type Outcome = 'completed' | 'failed' | 'cancelled' | 'disconnected' | 'shutdown';

/** How a task ended, as its log line reports it. */
export interface TaskEnding {
  finish_reasons?: FinishReason[];
  usage?: Usage | null;
  error_code?: string;
}

/** A chat task streams deltas; an embedding task sends its vectors once the runtime gave them all. */
export type TaskKind = 'chat' | 'embed';

/**
 * A task the device runs (one at a time, or two embedding tasks): what it was given, the signal its
 * backend runs under, the sequence number of its next event, and what its log line says (its content
 * too, with --log-content).
 */
export class RunningTask {
  readonly address: string;
  readonly model: string;
  readonly attempt: number;
  readonly kind: TaskKind;
  /** The api's request id, so that one id follows the request through every log. */
  readonly requestId: string | null;
  /** Its trace (OpenTelemetry), when the dispatcher sent one: its log line names it. */
  readonly traceId: string | null;
  /**
   * The span of its runtime call (child of the dispatcher's device run), when traces are exported; its
   * `traceparent` goes to the runtime with the request.
   */
  private readonly span: Span | null;
  private readonly controller = new AbortController();
  /** The backend's run returned or threw: it is done with the signal. */
  private settled = false;
  private nextSeq = 0;
  private readonly startedAt = performance.now();
  private firstDeltaAt: number | null = null;
  private deltas = 0;
  /** An embedding task's inputs, the length of the vectors the runtime gave, and the events that carried them. */
  private readonly inputs: number;
  private dimensions: number | null = null;
  private embeddingEvents = 0;
  private vectorsAt: number | null = null;
  /** Kept only with --log-content; a resumed task's answer so far goes with its prompt. */
  private readonly prompt?: ChatMessage[];
  private readonly assistantPrefix?: string;
  private readonly output?: { content: string; reasoning: string; tool_calls: ToolCall[] }[];
  /** An embedding task's inputs, kept only with --log-content (its vectors are not: they are no one's reading). */
  private readonly input?: EmbedInput;

  constructor(
    payload: AssignPayload,
    /** The connection the task came on: its events go out on that one only. */
    readonly connection: DispatcherLink['connection'],
    logContent: boolean,
  ) {
    this.address = payload.task_address;
    this.model = payload.model;
    this.attempt = payload.attempt;
    this.requestId = payload.request_id ?? null;
    this.traceId = traceIdOf(payload.traceparent);
    this.span = startSpan('runtime call', payload.traceparent, {
      kind: SpanKind.CLIENT,
      attributes: { 'switchyard.task_address': payload.task_address, 'switchyard.model': payload.model },
    });
    this.inputs = payload.kind === 'embed' ? payload.embed.input.length : 0;
    if (payload.kind === 'embed') {
      this.kind = 'embed';
      if (logContent) {
        this.input = payload.embed.input;
      }
      return;
    }
    this.kind = 'chat';
    if (logContent) {
      this.prompt = payload.params.messages;
      this.assistantPrefix = payload.params.assistant_prefix;
      this.output = [];
    }
  }

  /** The `traceparent` its runtime request carries (its runtime call's span), when traces are exported. */
  get traceparent(): string | undefined {
    return this.span ? traceparentOf(this.span) : undefined;
  }

  /** The task ended: its runtime call's span too. */
  endSpan(outcome: Outcome, errorCode?: string): void {
    if (outcome === 'completed') {
      this.span?.end();
    } else {
      endFailed(this.span, errorCode ?? outcome);
    }
  }

  /** What the backend runs under: aborted when the task is stopped before its backend is done. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** The sequence number of the task's next event: 0 for its first, one more per event sent. */
  get seq(): number {
    return this.nextSeq;
  }

  /** An event of the task went out with {@link seq}. */
  sent(): void {
    this.nextSeq++;
  }

  /** The backend's run returned or threw. */
  settle(): void {
    this.settled = true;
  }

  /**
   * Stops the task's backend if it still runs. One that returned or threw is not aborted: an abort with
   * no reason builds an AbortError (a DOMException, with its stack) for no listener, 6 % of an agent's
   * busy time at 1,200 tasks/s.
   */
  stopBackend(): void {
    if (!this.settled) {
      this.controller.abort();
    }
  }

  /** Counts a delta (and keeps its content with --log-content). */
  recordDelta(choices: ChoiceDelta[]): void {
    this.firstDeltaAt ??= performance.now();
    this.deltas++;
    if (this.output) {
      for (const choice of choices) {
        const out = (this.output[choice.index] ??= { content: '', reasoning: '', tool_calls: [] });
        out.content += choice.content ?? '';
        out.reasoning += choice.reasoning ?? '';
        out.tool_calls.push(...(choice.tool_calls ?? []));
      }
    }
  }

  /** The runtime gave an embedding task's vectors, each of `dimensions` values. */
  recordVectors(dimensions: number): void {
    this.vectorsAt = performance.now();
    this.dimensions = dimensions;
  }

  /** A `task:embedding` event went out. */
  recordEmbeddingEvent(): void {
    this.embeddingEvents++;
  }

  /** The fields of the task's one log line. */
  logLine(outcome: Outcome, ending: TaskEnding): Record<string, unknown> {
    const ms = (x: number) => Math.round(x * 10) / 10;
    const common = {
      task_address: this.address,
      request_id: this.requestId,
      ...(this.traceId ? { trace_id: this.traceId } : {}),
      model: this.model,
      attempt: this.attempt,
      kind: this.kind,
      outcome,
      error_code: ending.error_code,
      prompt_tokens: ending.usage?.prompt_tokens,
      total_ms: ms(performance.now() - this.startedAt),
    };
    if (this.kind === 'embed') {
      // No finish reasons, deltas or time to first token: the counts that say what an embedding task was.
      return {
        ...common,
        inputs: this.inputs,
        dimensions: this.dimensions,
        events: this.embeddingEvents,
        // From the assignment to the runtime's answer: its time, before the agent's encoding and sending.
        runtime_ms: this.vectorsAt === null ? null : ms(this.vectorsAt - this.startedAt),
        ...(this.input ? { input: this.input } : {}),
      };
    }
    return {
      ...common,
      finish_reasons: ending.finish_reasons,
      completion_tokens: ending.usage?.completion_tokens ?? null,
      deltas: this.deltas,
      ttft_ms: this.firstDeltaAt === null ? null : ms(this.firstDeltaAt - this.startedAt),
      ...(this.output
        ? {
            prompt: this.prompt,
            ...(this.assistantPrefix !== undefined ? { assistant_prefix: this.assistantPrefix } : {}),
            completion: this.output,
          }
        : {}),
    };
  }
}
