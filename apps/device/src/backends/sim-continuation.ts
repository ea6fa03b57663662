import type { ChatParams } from '@app/common/protocol/chat';
import { Prng, choiceSeed, derive, tokenizeText, truncateAtStop, wordTokens } from './sim-generation';
import type { ChoicePlan, Step } from './sim-plan';
import { appendContent, contentPieces, planReply, toolToCall } from './sim-plan';

/**
 * A resumed task on the sim (`params.assistant_prefix`, the `continue` feature): what follows the
 * prefix, such that the prefix and this continuation are the reply the sim gives uninterrupted.
 *
 * The dispatcher reduces max_tokens by the prefix's tokens as relayed, one per content delta, and the
 * sim emits one piece per delta: a prefix of k pieces of the natural reply was asked for with
 * max_tokens + k. The sim plans that request again and emits the steps after its k-th piece, with its
 * finish reason. A prefix that is not the start of the sim's own reply (another runtime's text)
 * gets words seeded from the conversation and the prefix, as deterministic as any reply.
 */
export function planContinuation(params: ChatParams, index: number, replyTokens: number, prefix: string): ChoicePlan {
  const k = toolToCall(params) ? -1 : piecesIn(contentPieces(params, index, replyTokens), prefix);
  if (k < 0) {
    return foreignContinuation(params, index, replyTokens, prefix);
  }
  const whole = planReply({ ...params, max_tokens: params.max_tokens + k }, index, replyTokens);
  // Any reasoning came before the prefix; skip to just after its k-th piece.
  let at = 0;
  for (let skipped = 0; at < whole.steps.length && skipped < k; at++) {
    if (whole.steps[at].delta.content !== undefined) {
      skipped++;
    }
  }
  return { steps: whole.steps.slice(at), finish: whole.finish, prefixTokens: k };
}

/** How many of `pieces` join to exactly `prefix` (it ends at a piece boundary), or -1. */
function piecesIn(pieces: string[], prefix: string): number {
  let length = 0;
  for (let k = 0; k < pieces.length; k++) {
    if (!prefix.startsWith(pieces[k], length)) {
      return -1;
    }
    length += pieces[k].length;
    if (length === prefix.length) {
      return k + 1;
    }
  }
  return -1;
}

/**
 * Words after someone else's text: seeded from the conversation with the prefix as its last message,
 * as long as the natural reply less the prefix's pieces (at least one word), and separated from the
 * prefix by a space unless it ends in one.
 */
function foreignContinuation(params: ChatParams, index: number, replyTokens: number, prefix: string): ChoicePlan {
  const prefixTokens = tokenizeText(prefix).length;
  const seed = derive(choiceSeed([...params.messages, { role: 'assistant', content: prefix }], index), 'continue');
  const words = wordTokens(new Prng(derive(seed, 'content')), Math.max(1, replyTokens - prefixTokens));
  if (!/\s$/.test(prefix)) {
    words[0] = ` ${words[0]}`;
  }
  const pieces = truncateAtStop(words, params.stop ?? [], params.include_stop_str_in_output ?? false);
  const logprobRng = params.logprobs ? new Prng(derive(seed, 'logprobs')) : null;
  const steps: Step[] = [];
  const finish = appendContent(steps, pieces, params.max_tokens, logprobRng, params.top_logprobs ?? 0);
  return { steps, finish, prefixTokens };
}
