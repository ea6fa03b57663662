import { Test } from '@nestjs/testing';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { createLogger, loadConfig } from '@app/common';
import type { AppConfig } from '@app/common';
import { AppModule } from '../../../apps/api/src/app.module';
import { API_APP_OPTIONS, configureApiApp, createApiAdapter } from '../../../apps/api/src/bootstrap';
import { DispatcherModule } from '../../../apps/dispatcher/src/app.module';
import { DeviceGateway } from '../../../apps/dispatcher/src/devices/device.gateway';
import type { FakeDevice } from '../../support/fake-device';
import { ADMIN_TOKEN, DATABASE_URL, REDIS_URL, closeDb } from '../../support/stack';

/**
 * The api and the dispatcher as Nest applications in this process, built with @nestjs/testing from
 * their real modules, on this run's Postgres and Redis, listening on free loopback ports. What a
 * medium suite asserts goes over real HTTP and real socket.io, so that it holds whatever the
 * services inside are called.
 */
export interface InProcessApp {
  app: NestFastifyApplication;
  config: AppConfig;
  url: string;
  close(): Promise<void>;
}

/** Test settings: short deadlines so that the timeouts a test provokes come quickly. */
export function testConfig(env: Record<string, string> = {}): AppConfig {
  return loadConfig({
    DATABASE_URL,
    REDIS_URL,
    ADMIN_TOKEN,
    HOST: '127.0.0.1',
    LOG_LEVEL: 'silent',
    // Suites share one database: no retention pass unless a suite asks for one (see baseEnv).
    TASK_RETENTION_DAYS: '0',
    ...env,
  });
}

export async function startApiApp(env: Record<string, string> = {}): Promise<InProcessApp> {
  const config = testConfig(env);
  const logger = createLogger('api', config.LOG_LEVEL);
  const moduleRef = await Test.createTestingModule({ imports: [AppModule.forRoot(config, logger)] }).compile();
  const app = moduleRef.createNestApplication<NestFastifyApplication>(createApiAdapter(config), {
    ...API_APP_OPTIONS,
    logger: false,
  });
  configureApiApp(app, config);
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return { app, config, url, close: () => closeApp(app) };
}

/**
 * Closes an app at the end of a suite. A test's client may hold a connection open after it is done
 * with it (undici keeps an aborted request's socket for a few seconds): such connections are closed
 * rather than waited for.
 */
async function closeApp(app: NestFastifyApplication): Promise<void> {
  app.getHttpAdapter().getInstance().server.closeAllConnections();
  await app.close();
}

export async function startDispatcherApp(env: Record<string, string> = {}): Promise<InProcessApp> {
  const config = testConfig(env);
  const logger = createLogger('dispatcher', config.LOG_LEVEL);
  const moduleRef = await Test.createTestingModule({ imports: [DispatcherModule.forRoot(config, logger)] }).compile();
  const app = moduleRef.createNestApplication<NestFastifyApplication>(new FastifyAdapter(), { logger: false });
  await app.init();
  app.get(DeviceGateway).start();
  await app.listen(0, '127.0.0.1');
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  return { app, config, url, close: () => closeApp(app) };
}

/** An api and a dispatcher of a suite, with the fake devices its tests connect. */
export interface RelayApps {
  readonly api: InProcessApp;
  readonly dispatcher: InProcessApp;
  /** Fake devices a test connected: closed with the apps. */
  readonly devices: FakeDevice[];
}

/**
 * Starts an api and a dispatcher with `settings` before the suite's tests, and closes them after,
 * with the suite's fake devices and its database client. Called in a `describe` body.
 */
export function relayApps(settings: Record<string, string> = {}): RelayApps {
  let api: InProcessApp | undefined;
  let dispatcher: InProcessApp | undefined;
  const devices: FakeDevice[] = [];
  beforeAll(async () => {
    [api, dispatcher] = await Promise.all([startApiApp(settings), startDispatcherApp(settings)]);
  });
  afterAll(async () => {
    devices.forEach((d) => d.close());
    await Promise.all([api?.close(), dispatcher?.close()]);
    await closeDb();
  });
  const started = (app: InProcessApp | undefined): InProcessApp => {
    if (!app) {
      throw new Error('relayApps: the apps start in beforeAll; use them in a test or a hook after it');
    }
    return app;
  };
  return {
    get api() {
      return started(api);
    },
    get dispatcher() {
      return started(dispatcher);
    },
    devices,
  };
}
