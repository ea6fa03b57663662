/**
 * Which error shape a URL answers with: Ollama's routes under /api/ (and their OpenGPU alias under
 * /v2/ollama/), OpenAI's everywhere else.
 */
export type RouteFamily = 'openai' | 'ollama';

export function routeFamily(url: string | undefined): RouteFamily {
  return url?.startsWith('/api/') || url?.startsWith('/v2/ollama/') ? 'ollama' : 'openai';
}
