import { createHash } from 'node:crypto';
import type { ChatMessage, TokenLogprob, ToolCall, ToolDefinition } from '@app/common/protocol/chat';

/**
 * What the sim says, deterministically: words from a fixed vocabulary picked by a PRNG seeded from the
 * conversation, JSON that fits a schema, tool calls and logprobs. Pure functions of their seed; the
 * pacing and the plan of a reply are SimBackend's.
 */

/** Plain lowercase words: nothing that needs JSON escaping, so every reply is valid inside a JSON string. */
const VOCABULARY: readonly string[] = [
  'switchyard relay signal track route queue device token stream model answer request network direct',
  'dispatch lantern harbor river meadow engine station copper silver quiet steady bright north south',
  'morning evening carries follows returns reaches listens waits moves holds turns opens the a every',
  'each one many some this that its and then while because before after under over through beside',
  'slowly quickly always again',
]
  .join(' ')
  .split(' ');
/** Schemas nest; the sampler stops here so a recursive schema cannot loop. */
const MAX_SCHEMA_DEPTH = 4;
const MAX_SCHEMA_PROPERTIES = 16;

/** sfc32: small, fast and good enough to pick words; seeded from a SHA-256 digest for determinism. */
export class Prng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: Buffer) {
    this.a = seed.readUInt32LE(0);
    this.b = seed.readUInt32LE(4);
    this.c = seed.readUInt32LE(8);
    this.d = seed.readUInt32LE(12);
    // Discard the first outputs, which still mirror the seed words.
    for (let i = 0; i < 12; i++) {
      this.next();
    }
  }

  /** Uniform in [0, 1). */
  next(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return (t >>> 0) / 4294967296;
  }

  int(below: number): number {
    return Math.floor(this.next() * below);
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)];
  }
}

/** The seed of one choice: the conversation's contents (NUL-separated, so ["ab","c"] ≠ ["a","bc"]) and the index. */
export function choiceSeed(messages: ChatMessage[], index: number): Buffer {
  const hash = createHash('sha256');
  for (const message of messages) {
    hash.update(message.content ?? '');
    hash.update('\0');
  }
  hash.update(`choice:${index}`);
  return hash.digest();
}

/** Independent streams per purpose, so that asking for logprobs or reasoning never changes the reply itself. */
export function derive(seed: Buffer, purpose: string): Buffer {
  return createHash('sha256').update(seed).update(purpose).digest();
}

/** Word tokens of a sentence-like reply: leading space except the first, capitals after a period. */
export function wordTokens(rng: Prng, count: number): string[] {
  const out: string[] = [];
  let capitalize = true;
  for (let i = 0; i < count; i++) {
    let word = rng.pick(VOCABULARY);
    if (capitalize) {
      word = word[0].toUpperCase() + word.slice(1);
    }
    // About one sentence per ten words, and the reply always ends one.
    capitalize = i === count - 1 || rng.next() < 0.1;
    if (capitalize) {
      word += '.';
    }
    out.push(i === 0 ? word : ` ${word}`);
  }
  return out;
}

/** Splits text into token-like pieces (words and runs of punctuation, each with its leading space); they join back to the text. */
export function tokenizeText(text: string): string[] {
  return text.match(/\s*[A-Za-z0-9_]+|\s*[^A-Za-z0-9_\s]+|\s+$/g) ?? [];
}

export function countWords(text: string | null): number {
  return text ? text.split(/\s+/).filter((w) => w.length > 0).length : 0;
}

type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A value that fits a JSON schema's common keywords (type, properties, items, enum, const, anyOf); $ref is not followed. */
export function sampleSchema(schema: unknown, rng: Prng, depth: number): JsonValue {
  const words = (count: number) => wordTokens(rng, count).join('').replace(/\.$/, '');
  if (!isRecord(schema)) {
    return words(3);
  }
  if ('const' in schema) {
    return schema.const as JsonValue;
  }
  if (Array.isArray(schema.enum) && schema.enum.length > 0) {
    return rng.pick(schema.enum) as JsonValue;
  }
  const variants = (
    Array.isArray(schema.anyOf) ? schema.anyOf : Array.isArray(schema.oneOf) ? schema.oneOf : []
  ) as unknown[];
  if (variants.length > 0) {
    const concrete = variants.find((v) => !(isRecord(v) && v.type === 'null'));
    return sampleSchema(concrete ?? variants[0], rng, depth + 1);
  }
  const types = Array.isArray(schema.type) ? (schema.type as unknown[]) : [schema.type];
  const type = types.find((t) => t !== 'null') ?? (isRecord(schema.properties) ? 'object' : types[0]);
  const bound = (key: string, fallback: number) => {
    const value = schema[key];
    return typeof value === 'number' ? value : fallback;
  };
  switch (type) {
    case 'object': {
      const out: Record<string, JsonValue> = {};
      if (depth < MAX_SCHEMA_DEPTH && isRecord(schema.properties)) {
        for (const key of Object.keys(schema.properties).slice(0, MAX_SCHEMA_PROPERTIES)) {
          out[key] = sampleSchema(schema.properties[key], rng, depth + 1);
        }
      }
      return out;
    }
    case 'array': {
      if (depth >= MAX_SCHEMA_DEPTH) {
        return [];
      }
      const count = Math.max(bound('minItems', 1), Math.min(bound('maxItems', 3), 1 + rng.int(3)));
      return Array.from({ length: Math.min(count, 8) }, () => sampleSchema(schema.items, rng, depth + 1));
    }
    case 'integer': {
      const min = Math.ceil(bound('minimum', 0));
      const max = Math.floor(bound('maximum', min + 100));
      return max >= min ? min + rng.int(max - min + 1) : min;
    }
    case 'number': {
      const min = bound('minimum', 0);
      const max = bound('maximum', min + 100);
      return Math.round((min + rng.next() * Math.max(0, max - min)) * 100) / 100;
    }
    case 'boolean':
      return rng.next() < 0.5;
    case 'null':
      return null;
    default:
      return words(2 + rng.int(3));
  }
}

/**
 * Cuts the reply at the earliest occurrence of any stop string: before it, as OpenAI does, or after
 * it with `includeStop` (vLLM's include_stop_str_in_output).
 */
export function truncateAtStop(pieces: string[], stops: string[], includeStop: boolean): string[] {
  const text = pieces.join('');
  let cut = -1;
  let at = -1;
  for (const stop of stops) {
    const found = stop.length > 0 ? text.indexOf(stop) : -1;
    if (found >= 0 && (at < 0 || found < at)) {
      at = found;
      cut = includeStop ? found + stop.length : found;
    }
  }
  if (cut < 0) {
    return pieces;
  }
  const out: string[] = [];
  let position = 0;
  for (const piece of pieces) {
    if (position >= cut) {
      break;
    }
    out.push(position + piece.length <= cut ? piece : piece.slice(0, cut - position));
    position += piece.length;
  }
  return out;
}

/** One call to the first tool, its id and arguments derived from the choice's seed. */
export function toolCall(tool: ToolDefinition, seed: Buffer): ToolCall {
  const id = `call_${derive(seed, 'tool_call_id').toString('hex').slice(0, 24)}`;
  const parameters = tool.function.parameters;
  const args =
    isRecord(parameters) && isRecord(parameters.properties)
      ? sampleSchema(parameters, new Prng(derive(seed, 'tool_arguments')), 0)
      : {};
  return { id, type: 'function', function: { name: tool.function.name, arguments: JSON.stringify(args) } };
}

const bytesOf = (token: string) => [...Buffer.from(token, 'utf8')];

/**
 * A plausible logprob for an emitted piece (≤ 0, mostly near 0) and `top` alternatives in descending
 * order, the emitted piece first, as OpenAI lists them when the sampled token is the most likely one.
 */
export function tokenLogprob(token: string, rng: Prng, top: number): TokenLogprob {
  const round = (x: number) => Math.round(x * 10_000) / 10_000;
  const logprob = round(-(rng.next() ** 3) * 4);
  const topLogprobs: TokenLogprob['top_logprobs'] = [];
  if (top > 0) {
    topLogprobs.push({ token, logprob, bytes: bytesOf(token) });
  }
  const leading = token.startsWith(' ') ? ' ' : '';
  const used = new Set([token]);
  let previous = logprob;
  while (topLogprobs.length < top) {
    const alternative = leading + rng.pick(VOCABULARY);
    if (used.has(alternative)) {
      continue;
    }
    used.add(alternative);
    previous = round(previous - 0.25 - rng.next() * 1.5);
    topLogprobs.push({ token: alternative, logprob: previous, bytes: bytesOf(alternative) });
  }
  return { token, logprob, bytes: bytesOf(token), top_logprobs: topLogprobs };
}
