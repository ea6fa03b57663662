import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import type { NestFastifyApplication } from '@nestjs/platform-fastify';
import {
  DISPATCHER_NODE_FLAGS,
  PinoNestLogger,
  createLogger,
  loadConfigOrExit,
  missingNodeFlags,
  onShutdownSignal,
  startTracing,
  stopTracing,
} from '@app/common';
import { DispatcherModule } from './app.module';
import { DeviceGateway } from './devices/device.gateway';
import { DeviceEvents } from './dispatch/device-events.service';

/** Connections waiting to be accepted (see listen below). */
const ACCEPT_BACKLOG = 8192;

async function bootstrap(): Promise<void> {
  const config = loadConfigOrExit();
  const logger = createLogger('dispatcher', config.LOG_LEVEL);
  if (await startTracing('switchyard-dispatcher')) {
    logger.info('exporting traces');
  }
  const missing = missingNodeFlags();
  if (missing.length > 0) {
    // It runs without them, but with thousands of devices its garbage collection slows assignments.
    logger.warn(
      { missing, expected: DISPATCHER_NODE_FLAGS },
      'the dispatcher was started without its node flags (npm run start:dispatcher passes them)',
    );
  }
  const app = await NestFactory.create<NestFastifyApplication>(
    DispatcherModule.forRoot(config, logger),
    new FastifyAdapter(),
    { logger: new PinoNestLogger(logger) },
  );
  app.get(DeviceGateway).start();
  // Devices come back all at once when a dispatcher restarts: Node's default accept backlog (511)
  // overflowed, and the kernel dropped the rest (retried after 1 s, 3 s, 7 s...). The OS caps it
  // (somaxconn).
  await app.listen({ port: config.DISPATCHER_PORT, host: config.HOST, backlog: ACCEPT_BACKLOG });
  logger.info({ port: config.DISPATCHER_PORT }, 'dispatcher listening');

  // SIGTERM/SIGINT: stop fetching jobs, let tasks in progress finish (SHUTDOWN_GRACE_MS), hand the
  // rest back or fail them explicitly, then disconnect the devices (they reconnect elsewhere).
  onShutdownSignal(logger, async () => {
    await app.get(DeviceEvents).drain();
    await app.get(DeviceGateway).close();
    await app.close();
    await stopTracing();
  });
}

bootstrap().catch((error: unknown) => {
  process.stderr.write(`dispatcher failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
