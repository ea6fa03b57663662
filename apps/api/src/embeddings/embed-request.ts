import type { EmbedInput } from '@app/common';

/** An embeddings request as both wire formats (OpenAI's, Ollama's) hand it over, validated. */
export interface EmbedRequest {
  model: string;
  mode: 'auto' | 'direct' | 'network';
  input: EmbedInput;
  /** The vectors' length, where the model can shorten them. */
  dimensions?: number;
  /** Ollama's `truncate` (false: an input longer than the context is refused, not cut). */
  truncate?: boolean;
  api: 'openai' | 'ollama';
  requestId: string;
}

/** An embeddings request's answer: every input's vector, in input order. */
export interface EmbedResult {
  /** The catalog's id of the model that embedded them. */
  model: string;
  /** The pool its batches ran in (of the first batch: every batch of a request routes alike). */
  mode: 'direct' | 'network';
  /** Each input's vector, float32 little-endian in base64 (as OpenAI's `encoding_format: "base64"`). */
  vectors: string[];
  /** Prompt tokens of all inputs, as the devices reported them; null when any batch's device gave none. */
  promptTokens: number | null;
  /** The task of each batch, in input order. */
  taskAddresses: string[];
}
