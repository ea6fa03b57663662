import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { PinoNestLogger, createLogger, loadConfigOrExit } from '@app/common';
import { DispatcherModule } from './app.module';
import { DeviceGateway } from './devices/device.gateway';
import { DispatchService } from './relay/dispatch.service';

async function bootstrap(): Promise<void> {
  const config = loadConfigOrExit();
  const logger = createLogger('dispatcher', config.LOG_LEVEL);
  const app = await NestFactory.create<NestFastifyApplication>(
    DispatcherModule.forRoot(config, logger),
    new FastifyAdapter(),
    { logger: new PinoNestLogger(logger) },
  );
  app.get(DeviceGateway).start();
  await app.listen(config.DISPATCHER_PORT, config.HOST);
  logger.info({ port: config.DISPATCHER_PORT }, 'dispatcher listening');

  // SIGTERM/SIGINT: stop fetching jobs, let tasks in progress finish (SHUTDOWN_GRACE_MS), hand the
  // rest back or fail them explicitly, then disconnect the devices (they reconnect elsewhere).
  let stopping = false;
  const shutdown = (signal: string) => {
    if (stopping) {
      return;
    }
    stopping = true;
    logger.info({ signal }, 'shutting down');
    void app
      .get(DispatchService)
      .drain()
      .then(() => app.get(DeviceGateway).close())
      .then(() => app.close())
      .then(
        () => process.exit(0),
        (err: unknown) => {
          logger.error({ err }, 'shutdown failed');
          process.exit(1);
        },
      );
  };
  process.once('SIGTERM', () => shutdown('SIGTERM'));
  process.once('SIGINT', () => shutdown('SIGINT'));
}

bootstrap().catch((error: unknown) => {
  process.stderr.write(`dispatcher failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
