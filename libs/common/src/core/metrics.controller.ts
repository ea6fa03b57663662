import { Controller, Get, Header, Inject, applyDecorators } from '@nestjs/common';
import type { Type } from '@nestjs/common';
import type { CoreRoute, MetricsSource } from './core-options';

/** The process's metrics class (CoreOptions.metrics), by the role the metrics route injects it as. */
export const METRICS_SOURCE = Symbol('METRICS_SOURCE');

/**
 * `GET /metrics`, the Prometheus scrape of the process's registry. Unauthenticated like the health
 * routes: keep it off the internet at the network. A class per process, as healthController's.
 */
export function metricsController(decorate: (route: CoreRoute) => MethodDecorator[]): Type {
  @Controller()
  class MetricsController {
    constructor(@Inject(METRICS_SOURCE) private readonly metrics: MetricsSource) {}

    @Get('metrics')
    @Header('content-type', 'text/plain; version=0.0.4; charset=utf-8')
    @applyDecorators(...decorate('metrics'))
    scrape(): Promise<string> {
      return this.metrics.registry.metrics();
    }
  }
  return MetricsController;
}
