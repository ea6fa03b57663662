import type { Logger } from '@app/common/logging/logger';
import type { Backend } from './backend';
import { OllamaBackend } from './ollama.backend';
import { OpenAIBackend } from './openai.backend';
import type { SimOptions } from './sim.backend';
import { SimBackend } from './sim.backend';
import type { UpstreamOptions } from './upstream/upstream-options';

export * from './backend';
export { SimBackend, SIM_DEFAULTS, simDigest } from './sim.backend';
export type { SimOptions } from './sim.backend';
export { OllamaBackend, OLLAMA_FEATURES } from './ollama.backend';
export { OpenAIBackend, OPENAI_FEATURES } from './openai.backend';
export { UPSTREAM_DEFAULTS } from './upstream/upstream-options';
export type { UpstreamOptions } from './upstream/upstream-options';
export type { ModelMapping } from './upstream/upstream-monitor';

/** Backends selectable with --backend. A new runtime adds its name here and a case below. */
export const BACKEND_NAMES = ['sim', 'ollama', 'openai'] as const;
export type BackendName = (typeof BACKEND_NAMES)[number];

/** Everything needed to build a backend, one variant per backend so each carries only its own options. */
export type BackendConfig =
  | { name: 'sim'; options: SimOptions }
  | { name: 'ollama'; options: UpstreamOptions }
  | { name: 'openai'; options: UpstreamOptions };

export function createBackend(config: BackendConfig, logger: Logger): Backend {
  switch (config.name) {
    case 'sim':
      return new SimBackend(config.options);
    case 'ollama':
      return new OllamaBackend(config.options, logger);
    case 'openai':
      return new OpenAIBackend(config.options, logger);
  }
}
