import type { Backend } from './backend';
import type { SimOptions } from './sim.backend';
import { SimBackend } from './sim.backend';

export * from './backend';
export { SimBackend, SIM_DEFAULTS } from './sim.backend';
export type { SimOptions } from './sim.backend';

/** Backends selectable with --backend. A new runtime adds its name here and a case below. */
export const BACKEND_NAMES = ['sim'] as const;
export type BackendName = (typeof BACKEND_NAMES)[number];

/** Everything needed to build a backend, one variant per backend so each carries only its own options. */
export type BackendConfig = { name: 'sim'; options: SimOptions };

export function createBackend(config: BackendConfig): Backend {
  switch (config.name) {
    case 'sim':
      return new SimBackend(config.options);
  }
}
