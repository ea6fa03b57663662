import { randomUUID } from 'node:crypto';
import { openAIError } from '@app/common';
import type { ChoiceDelta, ErrorCode, FinishReason, OrgCompat, TokenLogprob, ToolCall, Usage } from '@app/common';
import type { WireFormat } from '../responder/responder';

const FINGERPRINT = 'fp_switchyard';

/**
 * `chatcmpl-` + 24 random hex characters: from node's randomUUID, which draws its entropy a page at a
 * time (randomBytes per id was a system call each, more than rendering a short answer).
 */
export const completionId = () => `chatcmpl-${randomUUID().replace(/-/g, '').slice(0, 24)}`;

export interface Meta {
  id: string;
  created: number;
  model: string;
  mode: string;
  task_address: string;
}

interface ChoiceState {
  content: string;
  reasoning: string;
  toolCalls: ToolCall[];
  logprobs: TokenLogprob[];
}

/** Accumulates deltas into the non-streamed `chat.completion` object. */
export class CompletionAccumulator {
  private readonly choices: ChoiceState[] = [];
  private logprobsRequested: boolean;

  constructor(logprobs: boolean) {
    this.logprobsRequested = logprobs;
  }

  add(deltas: ChoiceDelta[]): void {
    for (const d of deltas) {
      const c = (this.choices[d.index] ??= { content: '', reasoning: '', toolCalls: [], logprobs: [] });
      c.content += d.content ?? '';
      c.reasoning += d.reasoning ?? '';
      c.toolCalls.push(...(d.tool_calls ?? []));
      c.logprobs.push(...(d.logprobs ?? []));
    }
  }

  render(meta: Meta, finishReasons: FinishReason[], usage: Usage | null) {
    const count = Math.max(finishReasons.length, this.choices.length, 1);
    const choices = Array.from({ length: count }, (_, index) => {
      const c = this.choices[index] ?? { content: '', reasoning: '', toolCalls: [], logprobs: [] };
      return {
        index,
        message: {
          role: 'assistant' as const,
          content: c.toolCalls.length > 0 && c.content === '' ? null : c.content,
          refusal: null,
          ...(c.reasoning ? { reasoning_content: c.reasoning } : {}),
          ...(c.toolCalls.length > 0 ? { tool_calls: c.toolCalls } : {}),
        },
        logprobs: this.logprobsRequested ? { content: c.logprobs, refusal: null } : null,
        finish_reason: finishReasons[index] ?? 'stop',
      };
    });
    return {
      id: meta.id,
      object: 'chat.completion' as const,
      created: meta.created,
      model: meta.model,
      choices,
      ...(usage ? { usage } : {}),
      system_fingerprint: FINGERPRINT,
      mode: meta.mode,
      task_address: meta.task_address,
    };
  }
}

/** Renders `chat.completion.chunk` SSE frames. */
export class ChunkRenderer {
  constructor(
    private readonly meta: Meta,
    private readonly includeUsage: boolean,
  ) {}

  private frame(choices: unknown[], usage?: Usage | null): string {
    const chunk = {
      id: this.meta.id,
      object: 'chat.completion.chunk',
      created: this.meta.created,
      model: this.meta.model,
      system_fingerprint: FINGERPRINT,
      choices,
      ...(this.includeUsage ? { usage: usage ?? null } : {}),
      mode: this.meta.mode,
      task_address: this.meta.task_address,
    };
    return `data: ${JSON.stringify(chunk)}\n\n`;
  }

  /** The first chunk of each choice: the role, with empty content. */
  roles(n: number): string {
    let out = '';
    for (let index = 0; index < n; index++) {
      out += this.frame([{ index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]);
    }
    return out;
  }

  deltas(deltas: ChoiceDelta[]): string {
    const choices = deltas.map((d) => ({
      index: d.index,
      delta: {
        ...(d.content !== undefined ? { content: d.content } : {}),
        ...(d.reasoning !== undefined ? { reasoning_content: d.reasoning } : {}),
        ...(d.tool_calls ? { tool_calls: d.tool_calls.map((call, i) => ({ index: i, ...call })) } : {}),
      },
      logprobs: d.logprobs ? { content: d.logprobs, refusal: null } : null,
      finish_reason: null,
    }));
    return this.frame(choices);
  }

  finish(finishReasons: FinishReason[], usage: Usage | null): string {
    let out = this.frame(
      finishReasons.map((reason, index) => ({ index, delta: {}, logprobs: null, finish_reason: reason })),
    );
    if (this.includeUsage) {
      // A count the device did not give is not shown as zero: `usage: null`, as the whole answer leaves it out.
      out += this.frame([], usage);
    }
    return out + 'data: [DONE]\n\n';
  }

  /** A failure after the stream started: the same error object as an HTTP error response would carry. */
  error(status: number, code: string, message: string): string {
    return `data: ${JSON.stringify(openAIError(status, message, code))}\n\n`;
  }
}

/**
 * Usage as the Nodea specification reports it with n > 1: `completion_tokens` counts one choice, not
 * the total. Devices report the total only, so choice 0's count is the one Switchyard made relaying
 * it (a piece of output a token); the prompt is the device's. Null when the device reported none.
 */
export function usageOfOneChoice(usage: Usage | null, choiceTokens: number[] | undefined): Usage | null {
  if (!usage || !choiceTokens?.length) {
    return usage;
  }
  const completion = choiceTokens[0];
  return {
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: completion,
    total_tokens: usage.prompt_tokens + completion,
  };
}

/** OpenAI's chat completions, as the responder writes them: SSE chunks, or one `chat.completion`. */
export class OpenAIFormat implements WireFormat {
  readonly contentType = 'text/event-stream; charset=utf-8';
  readonly ping = ': ping\n\n';
  private readonly chunks: ChunkRenderer;
  private readonly completion: CompletionAccumulator;

  constructor(
    private readonly meta: Meta,
    includeUsage: boolean,
    logprobs: boolean,
    private readonly n: number,
    /** The organization's rules where OpenAI and the Nodea specification differ (docs/api.md, "Compatibility"). */
    private readonly compat: OrgCompat = 'openai',
  ) {
    this.chunks = new ChunkRenderer(meta, includeUsage);
    this.completion = new CompletionAccumulator(logprobs);
  }

  head(): string {
    return this.chunks.roles(this.n);
  }

  delta(choices: ChoiceDelta[]): string {
    return this.chunks.deltas(choices);
  }

  finish(finishReasons: FinishReason[], usage: Usage | null, choiceTokens?: number[]): string {
    return this.chunks.finish(finishReasons, this.usage(usage, choiceTokens));
  }

  failure(code: ErrorCode, status: number, message: string): string {
    return this.chunks.error(status, code, message);
  }

  assigned(): void {}

  collect(choices: ChoiceDelta[]): void {
    this.completion.add(choices);
  }

  body(finishReasons: FinishReason[], usage: Usage | null, choiceTokens?: number[]) {
    return this.completion.render(this.meta, finishReasons, this.usage(usage, choiceTokens));
  }

  /** The usage the client is shown: OpenAI's (every choice), or the Nodea specification's (see usageOfOneChoice). */
  private usage(usage: Usage | null, choiceTokens: number[] | undefined): Usage | null {
    return this.compat === 'nodea' && this.n > 1 ? usageOfOneChoice(usage, choiceTokens) : usage;
  }

  errorBody(code: ErrorCode, status: number, message: string) {
    return openAIError(status, message, code);
  }
}
