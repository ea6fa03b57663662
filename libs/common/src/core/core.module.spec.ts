import { SetMetadata } from '@nestjs/common';
import type { DynamicModule } from '@nestjs/common';
import { Registry } from 'prom-client';
import { createLogger } from '../logging/logger';
import { CoreModule } from './core.module';
import type { CoreOptions } from './core-options';
import { HealthReport } from './health-report';
import { LINES_REDIS, RECORDS_REDIS, REDIS, SUB_REDIS } from './redis-connections';

class Metrics {
  readonly registry = new Registry();
}

const options = (extra: Partial<CoreOptions> = {}): CoreOptions => ({
  kind: 'dispatcher',
  logger: createLogger('spec', 'silent'),
  redis: [
    { token: REDIS, name: 'spec', use: 'commands' },
    { token: RECORDS_REDIS, name: 'spec-records', use: 'blocking' },
  ],
  liveness: { awaitFirstRenewal: false, onShutdown: 'lapse' },
  metrics: Metrics,
  ...extra,
});

/** The handler functions of a module's controllers, by route path. */
function handlers(module: DynamicModule): Map<string, () => unknown> {
  const found = new Map<string, () => unknown>();
  for (const controller of module.controllers ?? []) {
    const prototype = controller.prototype as Record<string, () => unknown>;
    for (const name of Object.getOwnPropertyNames(prototype).filter((n) => n !== 'constructor')) {
      const path = Reflect.getMetadata('path', prototype[name]) as string | undefined;
      if (path !== undefined) {
        found.set(path, prototype[name]);
      }
    }
  }
  return found;
}

void describe('CoreModule', () => {
  void it('serves /healthz, /readyz and /metrics, with the decorators of each process on its own routes only', () => {
    const api = CoreModule.forRoot(
      options({ kind: 'api', decorateRoute: () => [SetMetadata('spec:access', 'public')] }),
    );
    const dispatcher = CoreModule.forRoot(options());
    const apiRoutes = handlers(api);
    expect([...apiRoutes.keys()].sort()).toStrictEqual(['healthz', 'metrics', 'readyz']);
    for (const handler of apiRoutes.values()) {
      expect(Reflect.getMetadata('spec:access', handler)).toBe('public');
    }
    for (const handler of handlers(dispatcher).values()) {
      expect(Reflect.getMetadata('spec:access', handler)).toBeUndefined();
    }
  });

  void it('refuses a process without the connections the core itself uses', () => {
    expect(() => CoreModule.forRoot(options({ redis: [{ token: REDIS, name: 'spec', use: 'commands' }] }))).toThrow(
      /must include RECORDS_REDIS/,
    );
    expect(() =>
      CoreModule.forRoot(options({ redis: [{ token: RECORDS_REDIS, name: 'r', use: 'blocking' }] })),
    ).toThrow(/must include REDIS/);
  });

  void it('exports every connection the process lists, and no other', () => {
    const module = CoreModule.forRoot(
      options({
        redis: [
          { token: REDIS, name: 'a', use: 'commands' },
          { token: LINES_REDIS, name: 'b', use: 'commands' },
          { token: RECORDS_REDIS, name: 'c', use: 'blocking' },
        ],
      }),
    );
    expect(module.exports?.includes(LINES_REDIS)).toBeTruthy();
    expect(module.exports?.includes(SUB_REDIS)).toBeFalsy();
  });
});

void describe('HealthReport', () => {
  void it('answers status ok first, then each reading as it is when asked', () => {
    const report = new HealthReport();
    expect(report.body()).toStrictEqual({ status: 'ok' });
    let devices = 1;
    report.add('devices', () => devices);
    devices = 3;
    expect(JSON.stringify(report.body())).toStrictEqual(JSON.stringify({ status: 'ok', devices: 3 }));
  });
});
