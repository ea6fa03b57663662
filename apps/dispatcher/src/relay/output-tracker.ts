import { createHash } from 'node:crypto';
import type { Hash } from 'node:crypto';
import type { ChoiceDelta, Usage } from '@app/common';

/** Per message, what a prompt may cost beyond its text's bytes (role and template tokens). */
const PROMPT_OVERHEAD_PER_MESSAGE = 16;

/**
 * What a device relayed for one assignment: the order of its events (sequence numbers), the SHA-256 of
 * its output (the task record keeps it, never the text), and what it may claim to have used.
 */
export class OutputTracker {
  private nextSeq = 0;
  private readonly hash: Hash = createHash('sha256');
  /** Output events relayed (a device's own count of tokens may not be trusted), and their UTF-8 bytes. */
  deltas = 0;
  bytes = 0;
  firstOutputAt: number | null = null;

  constructor(
    /** The most completion tokens the request allows: max_tokens per choice. */
    private readonly maxCompletionTokens: number,
    /** The most prompt tokens the input can be: its UTF-8 bytes plus an overhead per message. */
    private readonly maxPromptTokens: number,
  ) {}

  static forRequest(params: { max_tokens: number; n?: number; messages: { content: string | null }[] }): OutputTracker {
    const bytes = params.messages.reduce((n, m) => n + Buffer.byteLength(m.content ?? ''), 0);
    return new OutputTracker(
      params.max_tokens * (params.n ?? 1),
      bytes + PROMPT_OVERHEAD_PER_MESSAGE * (params.messages.length + 1),
    );
  }

  /** Whether `seq` is the next one; if so, it is taken. */
  takeSeq(seq: number): boolean {
    if (seq !== this.nextSeq) {
      return false;
    }
    this.nextSeq++;
    return true;
  }

  output(choices: ChoiceDelta[]): void {
    this.firstOutputAt ??= Date.now();
    this.deltas++;
    for (const choice of choices) {
      // Bytes: everything relayed (content, reasoning, tool calls); the hash: the answer (content, tool calls).
      const calls = choice.tool_calls ? JSON.stringify(choice.tool_calls) : '';
      this.bytes +=
        Buffer.byteLength(choice.content ?? '') + Buffer.byteLength(choice.reasoning ?? '') + Buffer.byteLength(calls);
      this.hash.update(choice.content ?? '');
      if (calls) {
        this.hash.update(calls);
      }
    }
  }

  get sha256(): string {
    return this.hash.copy().digest('hex');
  }

  /**
   * The usage to record and report: what the device said, bounded by what was asked and sent, with
   * the total computed here. `clamped` says whether the device claimed more.
   */
  bound(usage: Usage | null): { usage: Usage | null; clamped: boolean } {
    if (!usage) {
      return { usage: null, clamped: false };
    }
    const prompt = Math.min(usage.prompt_tokens, this.maxPromptTokens);
    const completion = Math.min(usage.completion_tokens, this.maxCompletionTokens);
    const clamped = prompt !== usage.prompt_tokens || completion !== usage.completion_tokens;
    return {
      usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion },
      clamped,
    };
  }
}
