import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import {
  PinoNestLogger,
  createLogger,
  loadConfigOrExit,
  onShutdownSignal,
  startTracing,
  stopTracing,
} from '@app/common';
import { AppModule } from './app.module';
import { API_APP_OPTIONS, configureApiApp, createApiAdapter, listenApi } from './bootstrap';
import { FlightsService } from './flight/flights.service';

async function bootstrap(): Promise<void> {
  const config = loadConfigOrExit();
  const logger = createLogger('api', config.LOG_LEVEL);
  if (await startTracing('switchyard-api')) {
    logger.info('exporting traces');
  }
  const app = await NestFactory.create<NestFastifyApplication>(
    AppModule.forRoot(config, logger),
    createApiAdapter(config),
    { ...API_APP_OPTIONS, logger: new PinoNestLogger(logger) },
  );
  configureApiApp(app, config);
  const adminServer = await listenApi(app, config);
  logger.info({ port: config.API_PORT }, 'api listening');
  if (adminServer) {
    logger.info({ port: config.ADMIN_PORT, host: config.ADMIN_HOST }, 'admin API and dashboard listening');
  }

  // SIGTERM/SIGINT: stop taking connections, let requests in flight finish (SHUTDOWN_GRACE_MS), end
  // the rest with an explicit error, then close everything.
  const fastify = app.getHttpAdapter().getInstance();
  onShutdownSignal(logger, async () => {
    fastify.server.close();
    fastify.server.closeIdleConnections();
    adminServer?.close();
    adminServer?.closeAllConnections();
    await app.get(FlightsService).drain();
    await app.close();
    await stopTracing();
  });
}

bootstrap().catch((error: unknown) => {
  process.stderr.write(`api failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
