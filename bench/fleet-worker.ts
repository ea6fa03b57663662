import { performance } from 'node:perf_hooks';
import { createLogger } from '@app/common/logging/logger';
import type { AnnouncePayload } from '@app/common/protocol/device-protocol';
import { DeviceAgent } from '../apps/device/src/agent';
import { createBackend } from '../apps/device/src/backends';
import { parseArgs } from '../apps/device/src/options';
import { WireProbe } from './lib/wire-probe';

/**
 * Many devices in one process, driven by the bench over IPC. One agent process per device would
 * cost a Node runtime (tens of MB, a second of CPU to start) per device; the product's DeviceAgent is
 * a class, so this process runs N of them, each with its own socket.io connection and token:
 *
 * - `agents`: the product's agent exactly as `switchyard-device <args>` builds it (its own argument
 *   parser, backend factory and DeviceAgent), once per token, without the per-process signal handling;
 * - `probe`: a minimal device speaking the protocol on a bare socket (bench/lib/wire-probe.ts:
 *   announce, ack, one delta, done), which timestamps each task:assign as it arrives, for assignment
 *   latency; and the time each connection took to be announced.
 */
export type FleetCommand =
  | {
      type: 'start';
      mode: 'agents';
      server: string;
      tokens: string[];
      /** switchyard-device arguments after --server and --token, e.g. --backend sim --model x. */
      args: string[];
    }
  | {
      type: 'start';
      mode: 'probe';
      server: string;
      tokens: string[];
      models: string[];
      /** The models of each token's device, instead of `models` for all. */
      modelsOf?: string[][];
      /** Handshakes under way at most at once (default: all). */
      window?: number;
    }
  | { type: 'collect' }
  | { type: 'stop' };

export type FleetReport =
  | { type: 'started' }
  | {
      type: 'connected';
      connectMs: number[];
      failed: number;
      connectErrors: Record<string, number>;
      disconnects: Record<string, number>;
    }
  | { type: 'progress'; announced: number; connectErrors: Record<string, number>; disconnects: Record<string, number> }
  | { type: 'assigns'; items: [string, number][] }
  | { type: 'error'; message: string };

const send = (report: FleetReport) => process.send?.(report);
/** A storm of connections takes a while on a small machine; a probe that is not announced by then counts as failed. */
const CONNECT_TIMEOUT_MS = 120_000;
const PROGRESS_EVERY_MS = 5_000;

const agents: DeviceAgent[] = [];
const probes: WireProbe[] = [];
let assigns: [string, number][] = [];

function startAgents(command: Extract<FleetCommand, { mode: 'agents' }>): void {
  for (const token of command.tokens) {
    const parsed = parseArgs([
      'node',
      'switchyard-device',
      '--server',
      command.server,
      '--token',
      token,
      ...command.args,
    ]);
    if (!parsed.ok) {
      throw new Error(`switchyard-device refused the arguments ${command.args.join(' ')}`);
    }
    const { options } = parsed;
    // As apps/device/src/main.ts builds it.
    const logger = createLogger('device', options.logLevel);
    const agent = new DeviceAgent({
      servers: options.servers,
      token: options.token,
      backend: createBackend(options.backend, logger),
      logger,
      logContent: options.logContent,
      onExit: () => undefined,
    });
    agents.push(agent);
    agent.start();
  }
  send({ type: 'started' });
}

function startProbes(command: Extract<FleetCommand, { mode: 'probe' }>): void {
  const connectMs: number[] = [];
  const connectErrors: Record<string, number> = {};
  const disconnects: Record<string, number> = {};
  let failed = 0;
  let settled = 0;
  const progress = setInterval(
    () => send({ type: 'progress', announced: connectMs.length, connectErrors, disconnects }),
    PROGRESS_EVERY_MS,
  );
  const timer = setTimeout(() => {
    clearInterval(progress);
    send({
      type: 'connected',
      connectMs,
      failed: failed + command.tokens.length - settled,
      connectErrors,
      disconnects,
    });
  }, CONNECT_TIMEOUT_MS);
  const announce: AnnouncePayload = {
    agent_version: 'bench-probe',
    backend: 'bench-probe',
    models: command.models,
    features: [],
    available: true,
    running_task: null,
    identities: [],
  };
  const server = new URL(command.server);
  const window = command.window ?? command.tokens.length;
  let next = 0;
  // At most `window` handshakes under way at a time (see FleetGroup): each settled one starts the next.
  const launch = () => {
    while (next < command.tokens.length && next - settled < window) {
      const started = performance.now();
      const models = command.modelsOf?.[next];
      const probe = new WireProbe(server, command.tokens[next++], models ? { ...announce, models } : announce, {
        announced: (ok) => {
          if (ok) {
            connectMs.push(performance.now() - started);
          } else {
            failed++;
          }
          settle();
        },
        assigned: (address, at) => assigns.push([address, at]),
        connectError: (reason) => (connectErrors[reason] = (connectErrors[reason] ?? 0) + 1),
        disconnected: (reason) => (disconnects[reason] = (disconnects[reason] ?? 0) + 1),
      });
      probes.push(probe);
      probe.start();
    }
  };
  const settle = () => {
    settled++;
    if (settled === command.tokens.length) {
      clearTimeout(timer);
      clearInterval(progress);
      send({ type: 'connected', connectMs, failed, connectErrors, disconnects });
    } else {
      launch();
    }
  };
  launch();
}

function stop(): void {
  for (const agent of agents) {
    agent.shutdown('SIGTERM');
  }
  for (const probe of probes) {
    probe.stop();
  }
  // Give the disconnects a moment to reach the dispatcher, then go.
  setTimeout(() => process.exit(0), 500).unref();
}

process.on('message', (command: FleetCommand) => {
  try {
    switch (command.type) {
      case 'start':
        if (command.mode === 'agents') {
          startAgents(command);
        } else {
          startProbes(command);
        }
        break;
      case 'collect':
        send({ type: 'assigns', items: assigns });
        assigns = [];
        break;
      case 'stop':
        stop();
        break;
    }
  } catch (error) {
    send({ type: 'error', message: error instanceof Error ? (error.stack ?? error.message) : String(error) });
  }
});
process.on('disconnect', () => process.exit(0));
