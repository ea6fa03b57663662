import { createLogger } from '@app/common/logging/logger';
import { startTracing, stopTracing } from '@app/common/tracing/tracing';
import { DeviceAgent } from './agent';
import { createBackend } from './backends';
import { doctor } from './doctor/doctor';
import { parseArgs } from './options';
import { serviceCommand } from './service/service-command';

/**
 * `npm run device -- --server <url> --token <syd_...> --backend ollama|openai|sim ...`: the device agent.
 * Imports only the protocol, key-shape and logging modules of @app/common (not its index), so that the
 * agent starts without loading Prisma, Nest or Redis, none of which a device needs.
 */
async function main(): Promise<void> {
  if (process.argv[2] === 'service') {
    process.exit(
      serviceCommand(process.argv, {
        writeOut: (s) => void process.stdout.write(s),
        writeErr: (s) => void process.stderr.write(s),
      }),
    );
  }
  const checking = process.argv[2] === 'doctor';
  const parsed = parseArgs(checking ? [...process.argv.slice(0, 2), ...process.argv.slice(3)] : process.argv);
  if (!parsed.ok) {
    process.exit(parsed.exitCode);
  }
  const { options } = parsed;
  if (checking) {
    // The checks print their own lines; the backends' logs would only repeat them.
    const quiet = createLogger('device', 'silent');
    void doctor(options, createBackend(options.backend, quiet), (line) => void process.stdout.write(`${line}\n`)).then(
      (code) => process.exit(code),
    );
    return;
  }
  const logger = createLogger('device', options.logLevel);
  if (await startTracing('switchyard-device')) {
    logger.info('exporting traces');
  }
  const agent = new DeviceAgent({
    servers: options.servers,
    token: options.token,
    backend: createBackend(options.backend, logger),
    logger,
    logContent: options.logContent,
    // The spans not yet exported go first (a no-op without traces).
    onExit: (code) => void stopTracing().finally(() => process.exit(code)),
  });
  // The first signal drains (the current task finishes), the second cancels it; see DeviceAgent.shutdown.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => agent.shutdown(signal));
  }
  agent.start();
}

void main();
