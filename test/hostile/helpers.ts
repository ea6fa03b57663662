import { spawn } from 'node:child_process';
import { io } from 'socket.io-client';
import type { Socket } from 'socket.io-client';
import { PROTOCOL_VERSION } from '@app/common';
import { Proc, sleep } from '../support/stack';

/** A socket.io client on any namespace of the dispatcher, as a hand-written (hostile) device. */
export function rawSocket(server: string, namespace: string, auth: unknown): Socket {
  return io(`${server}${namespace}`, {
    transports: ['websocket'],
    auth: auth as Record<string, unknown>,
    reconnection: false,
    forceNew: true,
  });
}

/** The message of the handshake's connect_error, or 'connected' (then disconnects). */
export function handshake(server: string, namespace: string, auth: unknown, timeoutMs = 10_000): Promise<string> {
  const socket = rawSocket(server, namespace, auth);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      socket.disconnect();
      resolve('no answer');
    }, timeoutMs);
    socket.on('connect', () => {
      clearTimeout(timer);
      socket.disconnect();
      resolve('connected');
    });
    socket.on('connect_error', (err) => {
      clearTimeout(timer);
      socket.disconnect();
      resolve(err.message);
    });
  });
}

/** Connects a device socket and waits for the handshake; throws with the refusal. */
export async function connectDevice(server: string, token: string): Promise<Socket> {
  const socket = rawSocket(server, '/devices', { token, protocol: PROTOCOL_VERSION });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('connect_error', (err) => {
      socket.disconnect();
      reject(err);
    });
  });
  return socket;
}

/** An announce as the agent sends it, with the given models. */
export const announcePayload = (models: string[]) => ({
  agent_version: 'hostile-1',
  backend: 'sim',
  models,
  features: [],
  available: true,
  running_task: null,
  identities: [],
});

/** What the flooding devices did, as the flood process reports it when stopped. */
export interface FloodStats {
  connects: number;
  refused: number;
  disconnects: number;
  events: number;
  bytes: number;
  /** Task addresses the dispatcher assigned to a flooding device (none must be). */
  assigned: string[];
}

/**
 * The flooding devices, in a process of their own: their sending must not run on the test's event
 * loop. Each device floods as fast as its socket takes it, and reconnects at once whenever the
 * dispatcher drops it:
 * - `announce`: valid announces of 64 made-up model names, about 1,000 a second;
 * - `big`: events just under DEVICE_MAX_EVENT_BYTES for a task it does not hold, about 25 MB a second;
 * - `junk`: invalid events (wrong shapes, unknown names), about 5,000 a second.
 * It runs at a lower CPU priority (nice 10): the attacker's own CPU is on its machine, not ours. What
 * its traffic costs another organization's latency is measured by the bench's `hostile` scenario,
 * whose protocol storm (bench/flood-worker.ts) floods the same way.
 */
const FLOOD_SCRIPT = String.raw`
const { io } = require('socket.io-client');
const cfg = JSON.parse(process.env.FLOOD_CONFIG);
const stats = { connects: 0, refused: 0, disconnects: 0, events: 0, bytes: 0, assigned: [] };
let stopping = false;
const big = 'x'.repeat(cfg.bigBytes);
const foreign = 'network:00000000-0000-4000-8000-' + '0'.repeat(12);
let n = 0;
const junkNames = () => Array.from({ length: 64 }, () => cfg.marker + '-' + (n++));
const announce = (models) => ({ agent_version: 'flood', backend: 'sim', models, features: [], available: true, running_task: null, identities: [] });
function burst(socket, mode) {
  const engine = socket.io.engine;
  if (!socket.connected || (engine && engine.writeBuffer.length > 8)) return;
  if (mode === 'announce') {
    for (let i = 0; i < 10; i++) { socket.emit('announce', announce(junkNames())); stats.events++; }
  } else if (mode === 'big') {
    socket.emit('task:delta', { task_address: foreign, seq: 0, choices: [{ index: 0, content: big }] });
    stats.events++; stats.bytes += big.length;
  } else {
    for (let i = 0; i < 50; i++) {
      socket.emit(i % 2 ? 'task:delta' : 'no:such:event', i % 3 ? { seq: 'x' } : 'junk');
      stats.events++;
    }
  }
}
function run(token, mode) {
  if (stopping) return;
  const socket = io(cfg.url + '/devices', { transports: ['websocket'], auth: { token, protocol: cfg.protocol }, reconnection: false, forceNew: true });
  let timer = null;
  socket.on('connect', () => {
    stats.connects++;
    socket.emit('announce', announce(junkNames()));
    timer = setInterval(() => burst(socket, mode), 10);
  });
  socket.on('task:assign', (payload, ack) => {
    stats.assigned.push(payload && payload.task_address);
    if (typeof ack === 'function') ack({ accepted: false, reason: 'busy' });
  });
  socket.on('connect_error', () => { stats.refused++; socket.close(); setTimeout(() => run(token, mode), 50); });
  socket.on('disconnect', () => {
    stats.disconnects++;
    clearInterval(timer);
    setTimeout(() => run(token, mode), 10);
  });
  sockets.push(socket);
}
const sockets = [];
cfg.devices.forEach(({ token, mode }) => run(token, mode));
process.on('SIGTERM', () => {
  stopping = true;
  sockets.forEach((s) => s.close());
  process.stdout.write(JSON.stringify(stats) + '\n', () => process.exit(0));
});
process.stdout.write('flooding\n');
`;

export class Flood {
  private constructor(readonly proc: Proc) {}

  static async start(
    server: string,
    devices: { token: string; mode: 'announce' | 'big' | 'junk' }[],
    opts: { marker: string; bigBytes: number },
  ): Promise<Flood> {
    const env = {
      PATH: process.env.PATH,
      FLOOD_CONFIG: JSON.stringify({ url: server, protocol: PROTOCOL_VERSION, devices, ...opts }),
    };
    const child = spawn('nice', ['-n', '10', process.execPath, '-e', FLOOD_SCRIPT], {
      env,
      cwd: process.cwd(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const flood = new Flood(new Proc(child));
    await flood.proc.waitFor(/flooding/);
    return flood;
  }

  /** Stops the flood and returns what it did. */
  async stop(): Promise<FloodStats> {
    await this.proc.stop('SIGTERM', 10_000);
    const line = this.proc.stdout.trim().split('\n').pop() ?? '';
    try {
      return JSON.parse(line) as FloodStats;
    } catch {
      throw new Error(`the flood process said:\n${this.proc.output.slice(-2000)}`);
    }
  }
}

/** Polls until `fn` is truthy, or fails with `what` at the deadline. */
export async function until<T>(fn: () => Promise<T>, what: string, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await fn();
    if (value) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await sleep(50);
  }
}
