import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import { PinoNestLogger, createLogger, loadConfigOrExit } from '@app/common';
import { DispatcherModule } from './app.module';
import { DeviceGateway } from './devices/device.gateway';

async function bootstrap(): Promise<void> {
  const config = loadConfigOrExit();
  const logger = createLogger('dispatcher', config.LOG_LEVEL);
  const app = await NestFactory.create<NestFastifyApplication>(
    DispatcherModule.forRoot(config, logger),
    new FastifyAdapter(),
    { logger: new PinoNestLogger(logger) },
  );
  app.enableShutdownHooks();
  app.get(DeviceGateway).start();
  await app.listen(config.DISPATCHER_PORT, config.HOST);
  logger.info({ port: config.DISPATCHER_PORT }, 'dispatcher listening');
}

bootstrap().catch((error: unknown) => {
  process.stderr.write(`dispatcher failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
