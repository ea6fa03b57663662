import type { Type } from '@nestjs/common';
import type { Registry } from 'prom-client';
import type { Logger } from '../logging/logger';
import type { InstanceKind } from '../redis/keys';
import type { RedisConnectionSpec } from './redis-connections';

/** The HTTP routes the core module serves in every process. */
export type CoreRoute = 'healthz' | 'readyz' | 'metrics';

/** A process's metrics: a class with its Prometheus registry, whose metrics `GET /metrics` serves. */
export interface MetricsSource {
  readonly registry: Registry;
}

/** How this instance keeps its presence (`sy:inst:<kind>:<id>`), where the api and the dispatcher differ. */
export interface LivenessOptions {
  /**
   * Whether start waits for the first renewal, so that the process fails to start while Redis is
   * unreachable. The dispatcher does: it claims tasks under its id, and a dispatcher that dies with
   * tasks held must be one the others know of. The api does not: it starts (and answers /healthz)
   * while Redis is down, says so in /readyz, and renews as soon as the connection opens.
   */
  awaitFirstRenewal: boolean;
  /**
   * On a clean shutdown: `withdraw` deletes the presence at once (the dispatcher: it has handed its
   * tasks back, so the survivors have nothing to take over and need not wait for it to lapse);
   * `lapse` lets it expire (the api: its lapse is what tells the dispatchers to stop the tasks whose
   * clients left with it, and an instance that withdrew would count as one never seen, alive).
   */
  onShutdown: 'withdraw' | 'lapse';
}

/** What differs per process in the core module: everything else is the same in the api and the dispatcher. */
export interface CoreOptions {
  /** Which process this is: names its presence, its record writer's consumer, its log lines. */
  kind: InstanceKind;
  logger: Logger;
  /** The Redis connections the process opens; REDIS and RECORDS_REDIS are required (the core uses them). */
  redis: readonly RedisConnectionSpec[];
  liveness: LivenessOptions;
  /** The process's metrics class: provided (and exported) by the core, its registry served at /metrics. */
  metrics: Type<MetricsSource>;
  /**
   * Decorators the process adds to each of the core's routes. The api gives its `@Public()` (its auth
   * hook reads every route's access from the controllers' metadata) and its route descriptions.
   */
  decorateRoute?: (route: CoreRoute) => MethodDecorator[];
}

/** The CoreOptions, for the core's own providers. */
export const CORE_OPTIONS = Symbol('CORE_OPTIONS');
