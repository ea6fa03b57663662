import type { ChatParams, ChoiceDelta, FinishReason, ToolDefinition } from '@app/common/protocol/chat';
import {
  Prng,
  choiceSeed,
  derive,
  isRecord,
  sampleSchema,
  tokenLogprob,
  tokenizeText,
  toolCall,
  truncateAtStop,
  wordTokens,
} from './sim-generation';

/**
 * What one choice of the sim will say, decided before its first token so that pacing is the only work
 * left: reasoning, then a tool call or the content, cut by stop strings and max_tokens. SimBackend
 * paces and counts it; a continuation (sim-continuation.ts) replays it.
 */

/** One emission of one choice, and what it costs in completion tokens. */
export interface Step {
  delta: Omit<ChoiceDelta, 'index'>;
  tokens: number;
}

export interface ChoicePlan {
  steps: Step[];
  finish: FinishReason;
  /** Tokens of the assistant prefix this plan continues (0 for a fresh reply); they count as prompt. */
  prefixTokens: number;
}

/** How many reasoning words precede the content for each effort: enough to show the deltas, cheap to emit. */
const REASONING_WORDS = { low: 4, medium: 8, high: 16 } as const;

/**
 * The tool the reply calls (the first one), or undefined when the reply is words: with no tools, with
 * tool_choice none, and after a tool result, so that a client's tool loop comes to an end.
 */
export function toolToCall(params: ChatParams): ToolDefinition | undefined {
  const lastRole = params.messages.at(-1)?.role;
  return params.tool_choice !== 'none' && lastRole !== 'tool' ? params.tools?.[0] : undefined;
}

/** The content of the natural reply, before max_tokens: words, or a JSON object in token-sized pieces, cut at a stop string. */
export function contentPieces(params: ChatParams, index: number, replyTokens: number): string[] {
  const rng = new Prng(derive(choiceSeed(params.messages, index), 'content'));
  const format = params.response_format;
  let pieces: string[];
  if (format?.type === 'json_object' || format?.type === 'json_schema') {
    const schema = format.type === 'json_schema' ? format.json_schema.schema : undefined;
    const value =
      isRecord(schema) && isRecord(schema.properties)
        ? sampleSchema(schema, rng, 0)
        : { reply: wordTokens(rng, replyTokens).join('') };
    pieces = tokenizeText(JSON.stringify(value));
  } else {
    pieces = wordTokens(rng, replyTokens);
  }
  return truncateAtStop(pieces, params.stop ?? [], params.include_stop_str_in_output ?? false);
}

/**
 * Appends content pieces, one token each, until `budget` steps in all: finish `length` when the pieces
 * go on past it (the stop string, if any, lies beyond it too), `stop` when they all fit.
 */
export function appendContent(
  steps: Step[],
  pieces: string[],
  budget: number,
  logprobRng: Prng | null,
  topLogprobs: number,
): FinishReason {
  for (const piece of pieces) {
    if (steps.length >= budget) {
      return 'length';
    }
    const delta: Step['delta'] = { content: piece };
    if (logprobRng) {
      delta.logprobs = [tokenLogprob(piece, logprobRng, topLogprobs)];
    }
    steps.push({ delta, tokens: 1 });
  }
  return 'stop';
}

/** Everything one choice says for a request, `replyTokens` being the natural reply's length in words. */
export function planReply(params: ChatParams, index: number, replyTokens: number): ChoicePlan {
  const seed = choiceSeed(params.messages, index);
  const budget = params.max_tokens;
  const steps: Step[] = [];

  if (params.reasoning_effort) {
    const rng = new Prng(derive(seed, 'reasoning'));
    for (const word of wordTokens(rng, REASONING_WORDS[params.reasoning_effort])) {
      steps.push({ delta: { reasoning: word }, tokens: 1 });
    }
    // Reasoning tokens count against max_tokens, as a runtime counts them.
    if (steps.length >= budget) {
      return { steps: steps.slice(0, budget), finish: 'length', prefixTokens: 0 };
    }
  }

  const tool = toolToCall(params);
  if (tool) {
    // A tool call travels whole (the protocol has no partial tool calls), so max_tokens does not cut it.
    const call = toolCall(tool, seed);
    steps.push({
      delta: { tool_calls: [call] },
      tokens: tokenizeText(call.function.name + call.function.arguments).length,
    });
    return { steps, finish: 'tool_calls', prefixTokens: 0 };
  }

  const logprobRng = params.logprobs ? new Prng(derive(seed, 'logprobs')) : null;
  const pieces = contentPieces(params, index, replyTokens);
  const finish = appendContent(steps, pieces, budget, logprobRng, params.top_logprobs ?? 0);
  return { steps, finish, prefixTokens: 0 };
}
