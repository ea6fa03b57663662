import { performance } from 'node:perf_hooks';
import { io } from 'socket.io-client';
import type { Socket } from 'socket.io-client';
import { createLogger } from '@app/common/logging/logger';
import type {
  AnnouncePayload,
  AssignAck,
  AssignPayload,
  DeviceToServerEvents,
  ServerToDeviceEvents,
} from '@app/common/protocol/device-protocol';
import { DEVICE_NAMESPACE, PROTOCOL_VERSION } from '@app/common/protocol/device-protocol';
import { DeviceAgent, backoffDelay } from '../apps/device/src/agent';
import { createBackend } from '../apps/device/src/backends';
import { parseArgs } from '../apps/device/src/options';

/**
 * Many devices in one process, driven by the bench over IPC. One agent process per device would
 * cost a Node runtime (tens of MB, a second of CPU to start) per device; the product's DeviceAgent is
 * a class, so this process runs N of them, each with its own socket.io connection and token:
 *
 * - `agents`: the product's agent exactly as `switchyard-device <args>` builds it (its own argument
 *   parser, backend factory and DeviceAgent), once per token, without the per-process signal handling;
 * - `probe`: a minimal device speaking the protocol directly (announce, ack, one delta, done), which
 *   timestamps each task:assign as it arrives, for assignment latency; and the time each connection
 *   took to be announced.
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
  | { type: 'start'; mode: 'probe'; server: string; tokens: string[]; models: string[] }
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
/** Epoch milliseconds with sub-millisecond precision, comparable across processes of this machine. */
const epochMs = () => performance.timeOrigin + performance.now();
/** A storm of connections takes a while on a small machine; a probe that is not announced by then counts as failed. */
const CONNECT_TIMEOUT_MS = 60_000;
const PROGRESS_EVERY_MS = 5_000;

const agents: DeviceAgent[] = [];
const probes: Socket<ServerToDeviceEvents, DeviceToServerEvents>[] = [];
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
  const settle = () => {
    settled++;
    if (settled === command.tokens.length) {
      clearTimeout(timer);
      clearInterval(progress);
      send({ type: 'connected', connectMs, failed, connectErrors, disconnects });
    }
  };
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
  };
  for (const token of command.tokens) {
    const started = performance.now();
    let announced = false;
    const socket: Socket<ServerToDeviceEvents, DeviceToServerEvents> = io(`${command.server}${DEVICE_NAMESPACE}`, {
      transports: ['websocket'],
      auth: { token, protocol: PROTOCOL_VERSION },
      forceNew: true,
      reconnection: true,
      reconnectionDelay: 500,
    });
    socket.on('connect', () => {
      socket.emit('announce', announce, (answer) => {
        if (!announced) {
          announced = true;
          if (answer.ok) {
            connectMs.push(performance.now() - started);
          } else {
            failed++;
          }
          settle();
        }
      });
    });
    let attempts = 0;
    socket.on('connect_error', (error) => {
      connectErrors[error.message] = (connectErrors[error.message] ?? 0) + 1;
      if (!socket.active) {
        // Refused by the server (not a network failure): socket.io leaves retrying to the device, and
        // the product's agent retries with this backoff, so the probe does the same.
        setTimeout(() => socket.connect(), backoffDelay(attempts++));
      }
    });
    socket.on('disconnect', (reason) => {
      disconnects[reason] = (disconnects[reason] ?? 0) + 1;
    });
    socket.on('task:assign', (payload: AssignPayload, ack: (answer: AssignAck) => void) => {
      assigns.push([payload.task_address, epochMs()]);
      ack({ accepted: true });
      socket.emit('task:delta', {
        task_address: payload.task_address,
        seq: 0,
        choices: [{ index: 0, content: 'ok' }],
      });
      socket.emit('task:done', {
        task_address: payload.task_address,
        seq: 1,
        finish_reasons: ['stop'],
        usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
      });
    });
    probes.push(socket);
  }
}

function stop(): void {
  for (const agent of agents) {
    agent.shutdown('SIGTERM');
  }
  for (const socket of probes) {
    socket.disconnect();
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
