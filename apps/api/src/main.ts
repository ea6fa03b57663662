import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { PinoNestLogger, createLogger, loadConfigOrExit, onShutdownSignal } from '@app/common';
import { AppModule } from './app.module';
import { API_APP_OPTIONS, configureApiApp, createApiAdapter, listenAdmin } from './bootstrap';
import { FlightsService } from './flight/flights.service';

async function bootstrap(): Promise<void> {
  const config = loadConfigOrExit();
  const logger = createLogger('api', config.LOG_LEVEL);
  const app = await NestFactory.create<NestFastifyApplication>(
    AppModule.forRoot(config, logger),
    createApiAdapter(config),
    { ...API_APP_OPTIONS, logger: new PinoNestLogger(logger) },
  );
  configureApiApp(app, config);
  await app.listen(config.API_PORT, config.HOST);
  logger.info({ port: config.API_PORT }, 'api listening');
  const admin = await listenAdmin(app, config);
  if (admin) {
    logger.info({ port: config.ADMIN_PORT, host: config.ADMIN_HOST }, 'admin api listening');
  }

  // SIGTERM/SIGINT: stop taking connections, let requests in flight finish (SHUTDOWN_GRACE_MS), end
  // the rest with an explicit error, then close everything.
  const fastify = app.getHttpAdapter().getInstance();
  onShutdownSignal(logger, async () => {
    fastify.server.close();
    fastify.server.closeIdleConnections();
    admin?.close();
    admin?.closeIdleConnections();
    await app.get(FlightsService).drain();
    await app.close();
  });
}

bootstrap().catch((error: unknown) => {
  process.stderr.write(`api failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
