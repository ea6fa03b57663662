import type { Logger } from 'pino';

/**
 * Runs `stop` once on the first SIGTERM or SIGINT, then exits 0 (1 if stopping failed). Both
 * servers use it so that a signal means the same everywhere: finish what is in flight, then leave.
 */
export function onShutdownSignal(logger: Logger, stop: (signal: string) => Promise<void>): void {
  let stopping = false;
  const handle = (signal: string) => {
    if (stopping) {
      return;
    }
    stopping = true;
    logger.info({ signal }, 'shutting down');
    stop(signal).then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', () => handle('SIGTERM'));
  process.once('SIGINT', () => handle('SIGINT'));
}
