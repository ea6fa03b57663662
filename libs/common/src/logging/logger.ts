import type { LoggerService } from '@nestjs/common';
import pino from 'pino';
import type { Logger } from 'pino';

/** One JSON line per event, on stdout. Secrets never reach a log: callers log ids and prefixes only. */
export function createLogger(name: string, level: string): Logger {
  return pino({
    name,
    level,
    base: { service: name },
    redact: { paths: ['req.headers.authorization', 'req.headers["x-api-key"]', '*.token', '*.key'], remove: true },
  });
}

/** Adapts pino to Nest's LoggerService so Nest's own messages come out in the same format. */
export class PinoNestLogger implements LoggerService {
  constructor(private readonly logger: Logger) {}

  log(message: unknown, context?: string): void {
    this.logger.info({ context }, String(message));
  }
  error(message: unknown, trace?: string, context?: string): void {
    this.logger.error({ context, trace }, String(message));
  }
  warn(message: unknown, context?: string): void {
    this.logger.warn({ context }, String(message));
  }
  debug(message: unknown, context?: string): void {
    this.logger.debug({ context }, String(message));
  }
  verbose(message: unknown, context?: string): void {
    this.logger.trace({ context }, String(message));
  }
}

export const LOGGER = Symbol('LOGGER');
export type { Logger };
