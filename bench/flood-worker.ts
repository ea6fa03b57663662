import { performance } from 'node:perf_hooks';
import { io } from 'socket.io-client';
import type { Socket } from 'socket.io-client';
import { DEVICE_EVENTS, DEVICE_NAMESPACE, PROTOCOL_VERSION } from '@app/common/protocol/device-protocol';
import type {
  AnnounceAck,
  AnnouncePayload,
  AssignAck,
  AssignPayload,
  CancelPayload,
  DeltaPayload,
  DeviceToServerEvents,
  DonePayload,
  ServerToDeviceEvents,
} from '@app/common/protocol/device-protocol';

/**
 * A hostile network device for the bench's `hostile` scenario, in a process of its own (started under
 * `nice -n 10`: the attacker's CPU is on its own machine, not on ours; what the scenario measures is
 * what its traffic costs the relay). Written on socket.io-client, as any device may be. It accepts
 * every task:assign and answers it with `deltaChars`-character task:delta events, seq 0, 1, 2 … per
 * task, paced at the rate it is given (the bench gives it just under the device's byte budget,
 * DEVICE_MAX_BYTES_PER_SECOND) and never above it, even in bursts, so that the dispatcher drops none
 * of them as over budget: whatever stops the flood is the relay's bound on
 * the request's output, not the budget. It floods a task until the dispatcher sends task:cancel for it
 * or the bench says stop. Reconnects when dropped, after the cooling-off a refusal asks for.
 */
export type FloodCommand =
  | {
      type: 'start';
      server: string;
      token: string;
      model: string;
      /** The pace, wire bytes per second: at most the dispatcher's DEVICE_MAX_BYTES_PER_SECOND. */
      bytesPerSecond: number;
      /** Characters of content per delta. */
      deltaChars: number;
    }
  /** Stop flooding; the task in hand (if any) is ended with task:done (finish_reason `length`). */
  | { type: 'stop' };

export interface FloodStats {
  /** Handshakes that succeeded, and those refused (by the refusal's message, e.g. `cooling_off`). */
  connects: number;
  refusals: Record<string, number>;
  /** Connections lost, by socket.io's reason (`io server disconnect`: the dispatcher closed it). */
  disconnects: Record<string, number>;
  /** Tasks assigned to the device, and how its flood of each ended. */
  assigned: number;
  /** task:cancel received for the task being flooded. */
  cancelled: number;
  /** The connection was lost while flooding a task. */
  lostWithConnection: number;
  /** Still being flooded when the bench said stop (then ended with task:done). */
  endedAtStop: number;
  /** task:cancel for a task no longer in hand (it crossed a delta on the wire). */
  lateCancels: number;
  deltas: number;
  /** Bytes sent as the dispatcher counts them against the budget (the socket.io packets' text). */
  wireBytes: number;
  /** The most wire bytes sent for one task. */
  maxTaskWireBytes: number;
  /** Seconds the device held a task to flood (connected): wireBytes / taskSeconds is its sending rate. */
  taskSeconds: number;
  /** Pacer ticks that held back because socket.io had not written the previous packets yet. */
  heldBack: number;
}

export type FloodReport = { type: 'ready' } | { type: 'stats'; stats: FloodStats } | { type: 'error'; message: string };

type DeviceSocket = Socket<ServerToDeviceEvents, DeviceToServerEvents>;

/**
 * The pacer wakes this often. At about 42 deltas of 100 KB a second, 10 ms sends at most one delta
 * per tick, so the rate stays even instead of arriving in bursts.
 */
const TICK_MS = 10;
/** After a lost connection, the wait before connecting again (a refusal says its own wait). */
const RECONNECT_MS = 500;
/** A refusal that says no wait (an old dispatcher, or a refusal of another kind). */
const REFUSED_RETRY_MS = 1_000;

const send = (report: FloodReport) => process.send?.(report);

const stats: FloodStats = {
  connects: 0,
  refusals: {},
  disconnects: {},
  assigned: 0,
  cancelled: 0,
  lostWithConnection: 0,
  endedAtStop: 0,
  lateCancels: 0,
  deltas: 0,
  wireBytes: 0,
  maxTaskWireBytes: 0,
  taskSeconds: 0,
  heldBack: 0,
};
const count = (into: Record<string, number>, key: string) => (into[key] = (into[key] ?? 0) + 1);

/** The task being flooded. */
let current: { address: string; seq: number; wireBytes: number } | null = null;
let socket: DeviceSocket | null = null;
let stopping = false;
let readyOnce = false;
let pacer: NodeJS.Timeout | null = null;

function start(command: Extract<FloodCommand, { type: 'start' }>): void {
  const content = 'x'.repeat(command.deltaChars);
  const rate = command.bytesPerSecond;
  /**
   * What one delta costs on the wire: the packet socket.io-client writes, `42/devices,["task:delta",{…}]`
   * (the dispatcher counts it without the leading 4: one byte to spare). Task addresses have one
   * length, so only the sequence number's digits vary: measured once (less the template's one digit),
   * not by serializing 100 KB at every tick.
   */
  const template: DeltaPayload = {
    task_address: `network:${'0'.repeat(8)}-0000-4000-8000-${'0'.repeat(12)}`,
    seq: 0,
    choices: [{ index: 0, content }],
  };
  const base = Buffer.byteLength(`42${DEVICE_NAMESPACE},${JSON.stringify([DEVICE_EVENTS.delta, template])}`) - 1;
  const wireOf = (seq: number) => base + String(seq).length;
  const announce: AnnouncePayload = {
    agent_version: 'bench-flood',
    backend: 'flood',
    models: [command.model],
    features: [],
    available: true,
    running_task: null,
  };

  const connect = () => {
    if (stopping) {
      return;
    }
    const s: DeviceSocket = io(`${command.server}${DEVICE_NAMESPACE}`, {
      transports: ['websocket'],
      auth: { token: command.token, protocol: PROTOCOL_VERSION },
      reconnection: false,
      forceNew: true,
    });
    socket = s;
    s.on('connect', () => {
      stats.connects++;
      s.emit(DEVICE_EVENTS.announce, announce, (ack: AnnounceAck) => {
        if (!ack.ok || !ack.models.includes(command.model)) {
          send({ type: 'error', message: `announce refused: ${JSON.stringify(ack)}` });
        } else if (!readyOnce) {
          readyOnce = true;
          send({ type: 'ready' });
        }
      });
    });
    s.on('connect_error', (err: Error & { data?: { retry_after_ms?: number } }) => {
      count(stats.refusals, err.message.split(':')[0]);
      s.close();
      setTimeout(connect, err.data?.retry_after_ms ?? REFUSED_RETRY_MS);
    });
    s.on('disconnect', (reason) => {
      count(stats.disconnects, reason);
      if (current) {
        stats.lostWithConnection++;
        current = null;
      }
      setTimeout(connect, RECONNECT_MS);
    });
    s.on(DEVICE_EVENTS.assign, (payload: AssignPayload, ack: (answer: AssignAck) => void) => {
      ack({ accepted: true });
      stats.assigned++;
      current = { address: payload.task_address, seq: 0, wireBytes: 0 };
    });
    s.on(DEVICE_EVENTS.cancel, (payload: CancelPayload) => {
      if (current?.address === payload.task_address) {
        stats.cancelled++;
        current = null;
      } else {
        stats.lateCancels++;
      }
    });
  };

  // A token bucket of wire bytes refilled at `rate`, holding at most two deltas: the device never
  // sends faster than the budget over time, and its bursts are 200 KB at most against the 4 MiB the
  // dispatcher's bucket holds. Two, not one: with one, the credit a tick brings beyond the delta it
  // pays for would be lost (a 100 KB delta takes 2.4 ticks of credit at 4 MiB/s), and the device sent
  // 3.1 MiB/s instead of 3.9. A task that comes to an idle device gets its first delta at once, as from
  // a device that was waiting for it. The deltas are measured with the largest seq the protocol allows.
  const cap = 2 * wireOf(10_000_000);
  let credit = 0;
  let last = performance.now();
  pacer = setInterval(() => {
    const now = performance.now();
    const task = current;
    const s = socket;
    credit = Math.min(cap, credit + ((now - last) / 1000) * rate);
    const elapsed = now - last;
    last = now;
    if (!task || !s?.connected || stopping) {
      return;
    }
    stats.taskSeconds += elapsed / 1000;
    const wire = wireOf(task.seq);
    if (credit < wire) {
      return;
    }
    // Packets socket.io has not written yet: sending more would queue them here and let them leave
    // later in a burst, above the budget as the dispatcher sees it.
    if (s.io.engine.writeBuffer.length > 0) {
      stats.heldBack++;
      return;
    }
    credit -= wire;
    const payload: DeltaPayload = { task_address: task.address, seq: task.seq, choices: [{ index: 0, content }] };
    s.emit(DEVICE_EVENTS.delta, payload);
    task.seq++;
    task.wireBytes += wire;
    stats.deltas++;
    stats.wireBytes += wire;
    stats.maxTaskWireBytes = Math.max(stats.maxTaskWireBytes, task.wireBytes);
  }, TICK_MS);

  connect();
}

function stop(): void {
  stopping = true;
  if (pacer) {
    clearInterval(pacer);
  }
  const s = socket;
  if (current && s?.connected) {
    // Ended as an honest runtime would at its length limit, so that the old relay (which never stops a
    // flood) ends the task and its stream too, instead of waiting for MAX_STREAM_MS.
    stats.endedAtStop++;
    const done: DonePayload = {
      task_address: current.address,
      seq: current.seq,
      finish_reasons: ['length'],
      usage: null,
    };
    s.emit(DEVICE_EVENTS.done, done);
    current = null;
  }
  send({ type: 'stats', stats });
  // Give the done a moment to leave, then go (the bench stops this process in any case).
  setTimeout(() => {
    s?.close();
    process.exit(0);
  }, 1_000).unref();
}

process.on('message', (command: FloodCommand) => {
  try {
    if (command.type === 'start') {
      start(command);
    } else {
      stop();
    }
  } catch (error) {
    send({ type: 'error', message: error instanceof Error ? (error.stack ?? error.message) : String(error) });
  }
});
process.on('disconnect', () => process.exit(0));
