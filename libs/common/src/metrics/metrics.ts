import { Registry, collectDefaultMetrics } from 'prom-client';

/** A Prometheus registry with the process's default metrics (CPU, memory, event-loop lag, handles). */
export function createRegistry(service: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ service });
  collectDefaultMetrics({ register: registry, prefix: 'switchyard_' });
  return registry;
}

/** Buckets for latencies from a millisecond to a minute (seconds). */
export const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
export const TOKENS_PER_SECOND_BUCKETS = [1, 2, 5, 10, 20, 35, 50, 75, 100, 150, 250, 500, 1000];
