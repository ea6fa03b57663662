/**
 * The max_tokens sent to the device when a chat request sets none (OpenAI's max_completion_tokens or
 * max_tokens, Ollama's num_predict): one value for both APIs (docs/api.md, "Max tokens").
 */
export const DEFAULT_MAX_TOKENS = 512;
