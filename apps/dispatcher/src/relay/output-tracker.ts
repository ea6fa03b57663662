import { createHash } from 'node:crypto';
import type { Hash } from 'node:crypto';
import { isTokenInput } from '@app/common';
import type { ChatParams, ChoiceDelta, EmbedParams, TokenLogprob, Usage } from '@app/common';

/** Per message, what a prompt may cost beyond its text's bytes (role and template tokens). */
const PROMPT_OVERHEAD_PER_MESSAGE = 16;

/**
 * How far past `max_tokens × n` a device's output may go before it is stopped. An honest runtime
 * stops at max_tokens (the agent passes it on); the margin is for pieces that are not one token each
 * (a held-back stop-string prefix released as its own piece, a role or tool-call piece).
 */
const TOKEN_TOLERANCE = 0.05;
const TOKEN_SLACK = 16;
/**
 * What one allowed token may cost on the wire: a delta event's JSON envelope (task address, sequence,
 * choice index) is about 130 bytes, and a token's text a few bytes (the longest tokens of common
 * vocabularies, runs of spaces or symbols, are under 128). 256 leaves room for both twice over.
 */
const WIRE_BYTES_PER_TOKEN = 256;
/** With logprobs, per token and per alternative: the token, its logprob and its bytes as JSON. */
const WIRE_BYTES_PER_LOGPROB = 160;
/** Room beyond the per-token bound: a tool call travels whole, in one piece whatever its length. */
const WIRE_BYTES_SLACK = 16 * 1024;
/** What a delta event costs beyond its choices' text: its envelope, as counted against the bound. */
const EVENT_ENVELOPE_BYTES = 128;

/** The most output a request allows: tokens (pieces of output) and bytes on the wire. */
export interface OutputBound {
  tokens: number;
  bytes: number;
}

/**
 * The output bound of a request: `max_tokens × n` tokens with TOKEN_TOLERANCE, and the bytes that many
 * tokens can take on the wire (more with logprobs, which carry each token's alternatives).
 */
export function outputBound(params: Pick<ChatParams, 'max_tokens' | 'n' | 'logprobs' | 'top_logprobs'>): OutputBound {
  const tokens = Math.ceil(params.max_tokens * (params.n ?? 1) * (1 + TOKEN_TOLERANCE)) + TOKEN_SLACK;
  const perLogprobToken = params.logprobs ? (1 + (params.top_logprobs ?? 0)) * WIRE_BYTES_PER_LOGPROB : 0;
  return { tokens, bytes: tokens * (WIRE_BYTES_PER_TOKEN + perLogprobToken) + WIRE_BYTES_SLACK };
}

/** The wire bytes of logprob entries, estimated from their parts (no JSON is built for it). */
function logprobBytes(entries: TokenLogprob[]): number {
  let bytes = 0;
  for (const entry of entries) {
    bytes += 48 + entry.token.length + (entry.bytes?.length ?? 0) * 4;
    for (const top of entry.top_logprobs) {
      bytes += 48 + top.token.length + (top.bytes?.length ?? 0) * 4;
    }
  }
  return bytes;
}

/**
 * What a device relayed for one assignment: the order of its events (sequence numbers), the SHA-256 of
 * its output (the task record keeps it, never the text), what it may claim to have used, and whether
 * its output stays within what the request allows (a device's own count of tokens is not trusted: a
 * piece of output counts as at least one token, a piece with logprobs as one per entry).
 */
export class OutputTracker {
  private nextSeq = 0;
  private readonly hash: Hash = createHash('sha256');
  /** A resumed task's: the hash of this assignment's output alone (`hash` covers the whole answer). */
  private segmentHash: Hash | null = null;
  /** Output events relayed, and the UTF-8 bytes of their text (content, reasoning, tool calls). */
  deltas = 0;
  bytes = 0;
  /** Tokens counted as relayed (at least one per piece of a choice), and the events' bytes on the wire. */
  tokens = 0;
  wireBytes = 0;
  firstOutputAt: number | null = null;
  lastOutputAt: number | null = null;
  /** Tokens counted as relayed per choice (by index). */
  readonly choiceTokens: number[] = [];
  /** Only choice 0's text was relayed (no tool call, no reasoning): another device could continue it. */
  textOnly = true;

  constructor(
    /** The most completion tokens the request allows: max_tokens per choice. */
    private readonly maxCompletionTokens: number,
    /** The most prompt tokens the input can be: its UTF-8 bytes plus an overhead per message. */
    private readonly maxPromptTokens: number,
    /** The most output the relay passes on before it stops the device. */
    readonly limit: OutputBound,
  ) {}

  /**
   * The tracker of an assignment of `params`. A resumed task's (`assistant_prefix`) counts the prefix
   * in its prompt (the runtime reads it as one) and in the answer's hash, which covers the whole answer.
   */
  static forRequest(params: ChatParams): OutputTracker {
    const prefix = params.assistant_prefix ?? '';
    const bytes =
      params.messages.reduce((n, m) => n + Buffer.byteLength(m.content ?? ''), 0) + Buffer.byteLength(prefix);
    const tracker = new OutputTracker(
      params.max_tokens * (params.n ?? 1),
      bytes + PROMPT_OVERHEAD_PER_MESSAGE * (params.messages.length + (prefix ? 2 : 1)),
      outputBound(params),
    );
    if (prefix) {
      tracker.hash.update(prefix);
      tracker.segmentHash = createHash('sha256');
    }
    return tracker;
  }

  /**
   * The tracker of an embedding assignment: its events' order and the prompt tokens its device may
   * claim. Inputs given as token ids are exactly their count; text at most its UTF-8 bytes plus a
   * per-input overhead (the model's own start and end tokens). It carries no chat output (its vectors
   * are checked by the EmbedCollector).
   */
  static forEmbedding(params: EmbedParams): OutputTracker {
    const input = params.input;
    const prompt = isTokenInput(input)
      ? input.reduce((n, tokens) => n + tokens.length, 0)
      : input.reduce((n, text) => n + Buffer.byteLength(text) + PROMPT_OVERHEAD_PER_MESSAGE, 0);
    return new OutputTracker(0, prompt, { tokens: 0, bytes: 0 });
  }

  /** Whether `seq` is the next one; if so, it is taken. */
  takeSeq(seq: number): boolean {
    if (seq !== this.nextSeq) {
      return false;
    }
    this.nextSeq++;
    return true;
  }

  /**
   * Counts an output event. Returns false, and counts nothing, when it would take the output past the
   * request's bound: the event must not be relayed.
   */
  output(choices: ChoiceDelta[]): boolean {
    let text = 0;
    let tokens = 0;
    let extra = 0;
    const calls: string[] = [];
    const perChoice: number[] = [];
    for (const choice of choices) {
      // Bytes: everything relayed (content, reasoning, tool calls); the hash: the answer (content, tool calls).
      const call = choice.tool_calls ? JSON.stringify(choice.tool_calls) : '';
      calls.push(call);
      const size =
        Buffer.byteLength(choice.content ?? '') + Buffer.byteLength(choice.reasoning ?? '') + Buffer.byteLength(call);
      text += size;
      const pieces = choice.logprobs?.length ? choice.logprobs.length : size > 0 ? 1 : 0;
      if (choice.logprobs?.length) {
        extra += logprobBytes(choice.logprobs);
      }
      tokens += pieces;
      perChoice.push(pieces);
    }
    const wire = EVENT_ENVELOPE_BYTES + text + extra;
    if (this.tokens + tokens > this.limit.tokens || this.wireBytes + wire > this.limit.bytes) {
      return false;
    }
    const now = Date.now();
    this.firstOutputAt ??= now;
    this.lastOutputAt = now;
    this.deltas++;
    this.bytes += text;
    this.tokens += tokens;
    this.wireBytes += wire;
    choices.forEach((choice, i) => {
      this.choiceTokens[choice.index] = (this.choiceTokens[choice.index] ?? 0) + perChoice[i];
      this.hash.update(choice.content ?? '');
      this.segmentHash?.update(choice.content ?? '');
      if (calls[i]) {
        this.hash.update(calls[i]);
        this.segmentHash?.update(calls[i]);
      }
      this.textOnly &&= choice.index === 0 && !choice.tool_calls?.length && !choice.reasoning;
    });
    return true;
  }

  get sha256(): string {
    return this.hash.copy().digest('hex');
  }

  /** The SHA-256 of this assignment's output alone (for a resumed task's segment). */
  get segmentSha256(): string {
    return (this.segmentHash ?? this.hash).copy().digest('hex');
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
