/** Which error shape a URL answers with: Ollama's routes under /api/, OpenAI's everywhere else. */
export type RouteFamily = 'openai' | 'ollama';

export function routeFamily(url: string | undefined): RouteFamily {
  return url?.startsWith('/api/') ? 'ollama' : 'openai';
}
