/**
 * The bench's embeddings, deterministic: the fake upstream's vector for a text, the inputs the
 * embeddings scenario sends, and the check of an answer against them. The same functions run in the
 * upstream's process and in the bench's, so that every vector of a relayed answer can be compared,
 * bit for bit, with the one the runtime made for that input.
 */

/** Words of the inputs: about 30 tokens an input, as a passage of a retrieval corpus. */
const WORDS = ['relay', 'signal', 'harbor', 'copper', 'steady', 'bright', 'north', 'station', 'quiet', 'river'];
/** Characters an input has at least: about 30 tokens at OpenAI's rule of thumb of 4 characters a token. */
const INPUT_CHARS = 120;

/** FNV-1a over the UTF-16 code units; never 0, which would stop xorshift. */
function seedOf(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0 || 1;
}

/**
 * The vector of a text: `dimensions` float32 values from xorshift32 seeded by the text, scaled to unit
 * length as embedding models' outputs are (nomic-embed-text's included), so that the values have the
 * magnitudes, and the decimal lengths, of a real model's.
 */
export function embeddingOf(text: string, dimensions: number): Float32Array {
  const out = new Float32Array(dimensions);
  let x = seedOf(text) | 0;
  let norm = 0;
  for (let i = 0; i < dimensions; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = ((x >>> 0) / 2 ** 32) * 2 - 1;
    norm += out[i] * out[i];
  }
  const scale = 1 / Math.sqrt(norm);
  for (let i = 0; i < dimensions; i++) {
    out[i] *= scale;
  }
  return out;
}

/** The tokens the fake counts for a text: OpenAI's rule of thumb, 4 characters a token. */
export function tokensOf(text: string): number {
  return Math.max(1, Math.ceil(text.length / 4));
}

/** `count` distinct inputs of about 30 tokens; `tag` makes each run's inputs its own (nothing can be served from a cache). */
export function inputTexts(count: number, tag: string): string[] {
  return Array.from({ length: count }, (_, i) => {
    let text = `${tag} passage ${i}:`;
    for (let w = i; text.length < INPUT_CHARS; w += 7) {
      text += ` ${WORDS[w % WORDS.length]}`;
    }
    return text;
  });
}

/** What an answer to an embeddings request held, and whether each vector is the one for its input. */
export interface AnswerCheck {
  /** Every input has its vector, at its index, in order, equal to the runtime's bit for bit. */
  ok: boolean;
  /** The first thing wrong, when not ok. */
  problem?: string;
  promptTokens: number | null;
  /** Switchyard's task addresses, one per batch (none from the upstream). */
  taskAddresses: string[];
}

interface EmbeddingAnswer {
  object?: unknown;
  data?: { object?: unknown; index?: unknown; embedding?: unknown }[];
  usage?: { prompt_tokens?: unknown } | null;
  task_addresses?: unknown;
}

/** The float32 values of an answer's vector, in either encoding; null when it is neither. */
function valuesOf(embedding: unknown): Float32Array | null {
  if (typeof embedding === 'string') {
    const bytes = Buffer.from(embedding, 'base64');
    if (bytes.byteLength % 4 !== 0) {
      return null;
    }
    // Copied: a pooled Buffer may start at an offset that is not a multiple of 4.
    return new Float32Array(new Uint8Array(bytes).buffer);
  }
  if (Array.isArray(embedding) && embedding.every((v) => typeof v === 'number')) {
    // Each decimal read back as float32: what a client that keeps float32 vectors holds.
    return Float32Array.from(embedding);
  }
  return null;
}

/** Checks an answer (OpenAI's list, float or base64) against the inputs: order, count, and every value. */
export function checkAnswer(body: string, inputs: string[], dimensions: number): AnswerCheck {
  let answer: EmbeddingAnswer;
  try {
    answer = JSON.parse(body) as EmbeddingAnswer;
  } catch {
    return { ok: false, problem: `not JSON: ${body.slice(0, 200)}`, promptTokens: null, taskAddresses: [] };
  }
  const taskAddresses = Array.isArray(answer.task_addresses)
    ? answer.task_addresses.filter((a): a is string => typeof a === 'string')
    : [];
  const tokens = answer.usage?.prompt_tokens;
  const promptTokens = typeof tokens === 'number' ? tokens : null;
  const fail = (problem: string): AnswerCheck => ({ ok: false, problem, promptTokens, taskAddresses });
  if (answer.object !== 'list' || !Array.isArray(answer.data)) {
    return fail(`not a list: ${body.slice(0, 200)}`);
  }
  if (answer.data.length !== inputs.length) {
    return fail(`${answer.data.length} vectors for ${inputs.length} inputs`);
  }
  for (let i = 0; i < inputs.length; i++) {
    const item = answer.data[i];
    if (item.index !== i) {
      return fail(`entry ${i} has the index ${JSON.stringify(item.index)}`);
    }
    const values = valuesOf(item.embedding);
    const expected = embeddingOf(inputs[i], dimensions);
    if (!values || values.length !== dimensions) {
      return fail(`vector ${i} is not ${dimensions} float32 values`);
    }
    for (let j = 0; j < dimensions; j++) {
      if (values[j] !== expected[j]) {
        return fail(`vector ${i} differs from its input's at ${j}: ${values[j]} instead of ${expected[j]}`);
      }
    }
  }
  return { ok: true, promptTokens, taskAddresses };
}
