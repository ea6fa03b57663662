import { createHash } from 'node:crypto';
import { Prng, countWords } from './sim-generation';

/**
 * What the sim embeds an input into, deterministically: a unit vector seeded by the input, the same on
 * every sim and every machine, so that a test or a benchmark can know a vector without a model.
 */

/**
 * The seed of an input's vector: SHA-256 of its text, or of its token ids (each kind under its own
 * prefix, so that the text "1,2" and the tokens [1, 2] are different inputs).
 */
function embeddingSeed(input: string | readonly number[]): Buffer {
  const hash = createHash('sha256');
  if (typeof input === 'string') {
    hash.update('text\0').update(input);
  } else {
    hash.update('tokens\0').update(input.join(','));
  }
  return hash.digest();
}

/**
 * The sim's vector for one input, of `dimensions` values with an L2 norm of 1 (to float32's
 * precision). Each value before normalising is the sum of four uniform draws in [-0.5, 0.5) of a PRNG
 * seeded from the input: a bell curve close to a normal one, so that the vectors point in evenly spread
 * directions and different inputs get nearly orthogonal vectors, as a model's unrelated texts do. Only
 * additions, multiplications and one square root (each exactly rounded by IEEE 754) go into it: every
 * machine computes the same bits, where a Gaussian from logarithms and cosines would depend on the
 * platform's libm.
 *
 * Shortened vectors are matryoshka-style: the draws come in the same order whatever the length, so
 * the vector of k dimensions is the first k values of the full vector, normalised again (as Ollama and
 * vLLM shorten a vector), and it is what generating k values directly gives.
 */
export function simEmbedding(input: string | readonly number[], dimensions: number): Float32Array {
  const rng = new Prng(embeddingSeed(input));
  const raw = new Float64Array(dimensions);
  let squares = 0;
  for (let i = 0; i < dimensions; i++) {
    const value = rng.next() + rng.next() + rng.next() + rng.next() - 2;
    raw[i] = value;
    squares += value * value;
  }
  const vector = new Float32Array(dimensions);
  if (squares === 0) {
    // Every draw summed to exactly 0 (a one-dimensional vector can): the unit vector along the first axis.
    vector[0] = 1;
    return vector;
  }
  const norm = Math.sqrt(squares);
  for (let i = 0; i < dimensions; i++) {
    vector[i] = raw[i] / norm;
  }
  return vector;
}

/** The tokens of an input as the sim counts them: words for text (as it counts a chat prompt), ids for tokens. */
export function simEmbeddingTokens(input: string | readonly number[]): number {
  return typeof input === 'string' ? countWords(input) : input.length;
}
