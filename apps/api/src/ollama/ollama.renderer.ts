import type { ChoiceDelta, ErrorCode, FinishReason, ToolCall, Usage } from '@app/common';
import type { WireFormat } from '../responder/responder';

/** Ollama's tool call: arguments as an object. */
function toOllamaCall(call: ToolCall) {
  let args: unknown = {};
  try {
    args = JSON.parse(call.function.arguments);
  } catch {
    args = { raw: call.function.arguments };
  }
  return { function: { name: call.function.name, arguments: args } };
}

const nanos = (ms: number) => Math.round(ms * 1e6);

/**
 * Ollama's /api/chat answers. Durations are measured by the api in nanoseconds: total from the
 * request's arrival, prompt evaluation from the device's assignment to its first output, evaluation
 * from the first output to the end.
 */
export class OllamaRenderer {
  private content = '';
  private thinking = '';
  private readonly toolCalls: ToolCall[] = [];
  private assignedAt: number | null = null;

  constructor(
    private readonly model: string,
    private readonly mode: string,
    private readonly address: string,
    private readonly startedAt: number,
    /**
     * When the first output came, as the flight dates it (Flight.firstOutputAt), null before any: for an
     * answer that is not streamed the dispatcher holds the output, and it reaches the api with its ending.
     */
    private readonly firstOutput: () => number | null,
  ) {}

  assigned(): void {
    this.assignedAt ??= performance.now();
  }

  /** Records a delta of choice 0 (Ollama has one choice) and returns its streamed line. */
  delta(deltas: ChoiceDelta[]): string | null {
    const d = deltas.find((x) => x.index === 0);
    if (!d) {
      return null;
    }
    this.content += d.content ?? '';
    this.thinking += d.reasoning ?? '';
    this.toolCalls.push(...(d.tool_calls ?? []));
    const message = {
      role: 'assistant',
      content: d.content ?? '',
      ...(d.reasoning ? { thinking: d.reasoning } : {}),
      ...(d.tool_calls?.length ? { tool_calls: d.tool_calls.map(toOllamaCall) } : {}),
    };
    return this.line({ model: this.model, created_at: new Date().toISOString(), message, done: false });
  }

  private stats(finish: FinishReason, usage: Usage | null) {
    const now = performance.now();
    const first = this.firstOutput() ?? now;
    return {
      done: true,
      // Ollama reports 'stop' when a model calls tools.
      done_reason: finish === 'length' ? 'length' : 'stop',
      mode: this.mode,
      task_address: this.address,
      total_duration: nanos(now - this.startedAt),
      load_duration: 0,
      // Counts the device did not give are left out, as Ollama leaves out what it did not count.
      ...(usage ? { prompt_eval_count: usage.prompt_tokens } : {}),
      // Never below 0: the first output is dated by the dispatcher's clock of how long it was held.
      prompt_eval_duration: nanos(Math.max(0, first - (this.assignedAt ?? first))),
      ...(usage ? { eval_count: usage.completion_tokens } : {}),
      eval_duration: nanos(now - first),
    };
  }

  /** The whole answer, for stream: false. */
  final(finish: FinishReason, usage: Usage | null) {
    return {
      model: this.model,
      created_at: new Date().toISOString(),
      message: {
        role: 'assistant',
        content: this.content,
        ...(this.thinking ? { thinking: this.thinking } : {}),
        ...(this.toolCalls.length ? { tool_calls: this.toolCalls.map(toOllamaCall) } : {}),
      },
      ...this.stats(finish, usage),
    };
  }

  /** The last streamed line. */
  finalLine(finish: FinishReason, usage: Usage | null): string {
    return this.line({
      model: this.model,
      created_at: new Date().toISOString(),
      message: { role: 'assistant', content: '' },
      ...this.stats(finish, usage),
    });
  }

  line(value: unknown): string {
    return `${JSON.stringify(value)}\n`;
  }
}

/** Ollama's /api/chat, as the responder writes it: NDJSON lines, or one object. */
export class OllamaFormat implements WireFormat {
  readonly contentType = 'application/x-ndjson';
  readonly ping = null;

  constructor(private readonly render: OllamaRenderer) {}

  head(): string {
    return '';
  }

  delta(choices: ChoiceDelta[]): string | null {
    return this.render.delta(choices);
  }

  finish(finishReasons: FinishReason[], usage: Usage | null): string {
    return this.render.finalLine(finishReasons[0], usage);
  }

  failure(_code: ErrorCode, _status: number, message: string): string {
    return this.render.line({ error: message });
  }

  assigned(): void {
    this.render.assigned();
  }

  collect(choices: ChoiceDelta[]): void {
    this.render.delta(choices);
  }

  body(finishReasons: FinishReason[], usage: Usage | null) {
    return this.render.final(finishReasons[0], usage);
  }

  errorBody(_code: ErrorCode, _status: number, message: string) {
    return { error: message };
  }
}
