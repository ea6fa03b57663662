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
 *
 * With `storm`, it is instead a storm of hostile devices at the protocol level, as the hostile e2e
 * suites run them (test/hostile/helpers.ts's Flood): each device floods in its mode as fast as its
 * socket takes it and reconnects at once whenever it is dropped or refused:
 * - `handshake`: handshakes with wrong tokens, one after the other, four at a time, from a loopback
 *   address of the storm's own (the failed-handshake limit then refuses that address, not the bench's);
 * - `announce`: valid announces of 64 made-up model names;
 * - `big`: events just under DEVICE_MAX_EVENT_BYTES for a task it does not hold;
 * - `junk`: invalid events (wrong shapes, unknown names).
 */
export type StormMode = 'handshake' | 'announce' | 'big' | 'junk';

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
  | {
      type: 'storm';
      server: string;
      /** One entry per hostile device: its token (ignored by `handshake`, which makes up its own) and mode. */
      devices: { token: string; mode: StormMode }[];
      /** Made-up model names start with it (the bench looks for it in Redis and /metrics afterwards). */
      marker: string;
      /** Content characters of a `big` event. */
      bigBytes: number;
    }
  /** Stop flooding; the task in hand (if any) is ended with task:done (finish_reason `length`). */
  | { type: 'stop' };

/** What a storm's devices did. */
export interface StormStats {
  /** Handshakes that succeeded, and those refused (by the refusal's message, e.g. `cooling_off`). */
  connects: number;
  refusals: Record<string, number>;
  /** Connections the dispatcher closed (or lost). */
  disconnects: number;
  events: number;
  /** Content bytes of `big` events handed to socket.io. */
  bytes: number;
  /** task:assign received by a storm device (none must be: it serves no real model). */
  assigned: number;
}

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

export type FloodReport =
  | { type: 'ready' }
  | { type: 'stats'; stats: FloodStats }
  | { type: 'storming' }
  | { type: 'storm-stats'; stats: StormStats }
  | { type: 'error'; message: string };

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
    identities: [],
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

/** The storm's sockets and stats, while one runs. */
let storm: { sockets: Set<Socket>; stats: StormStats } | null = null;

/** Pauses of a storm device: before reconnecting, and between bursts (as the e2e suites' Flood). */
const STORM_RECONNECT_MS = 10;
const STORM_REFUSED_MS = 50;
const STORM_BURST_MS = 10;
/** Wrong-token handshakes in flight at once per `handshake` device. */
const HANDSHAKES_AT_ONCE = 4;

function startStorm(command: Extract<FloodCommand, { type: 'storm' }>): void {
  const stats: StormStats = { connects: 0, refusals: {}, disconnects: 0, events: 0, bytes: 0, assigned: 0 };
  const sockets = new Set<Socket>();
  storm = { sockets, stats };
  const big = 'x'.repeat(command.bigBytes);
  const foreign = `network:00000000-0000-4000-8000-${'0'.repeat(12)}`;
  // Loopback addresses other than 127.0.0.1, one for the wrong tokens and one for the devices: the
  // dispatcher counts failed handshakes per address, and refuses an address over its limit whatever
  // its tokens (so the wrong tokens would otherwise shut the other devices out, and the bench too).
  const octet = () => 2 + Math.floor(Math.random() * 250);
  const loopback = () => `127.${octet()}.${octet()}.${octet()}`;
  const addresses = { wrongTokens: loopback(), devices: loopback() };
  let names = 0;
  const junkNames = () => Array.from({ length: 64 }, () => `${command.marker}-${names++}`);
  const announce = (models: string[]): AnnouncePayload => ({
    agent_version: 'bench-storm',
    backend: 'storm',
    models,
    features: [],
    available: true,
    running_task: null,
    identities: [],
  });
  const open = (token: string, address: string): Socket => {
    // Node-only: engine.io-client hands it to the WebSocket it opens (socket.io's types leave it out).
    const fromAddress = { localAddress: address };
    const socket = io(`${command.server}${DEVICE_NAMESPACE}`, {
      transports: ['websocket'],
      auth: { token, protocol: PROTOCOL_VERSION },
      reconnection: false,
      forceNew: true,
      ...fromAddress,
    });
    sockets.add(socket);
    socket.on('disconnect', () => sockets.delete(socket));
    return socket;
  };

  /** Socket.io has not written its earlier packets yet: sending more would only queue them here. */
  const backedUp = (socket: Socket) => socket.io.engine?.writeBuffer.length > 8;
  const burst = (socket: Socket, mode: StormMode) => {
    if (!socket.connected || backedUp(socket)) {
      return;
    }
    if (mode === 'announce') {
      for (let i = 0; i < 10; i++) {
        socket.emit(DEVICE_EVENTS.announce, announce(junkNames()));
        stats.events++;
      }
    } else if (mode === 'big') {
      socket.emit(DEVICE_EVENTS.delta, { task_address: foreign, seq: 0, choices: [{ index: 0, content: big }] });
      stats.events++;
      stats.bytes += big.length;
    } else {
      for (let i = 0; i < 50; i++) {
        socket.emit(i % 2 ? DEVICE_EVENTS.delta : 'no:such:event', i % 3 ? { seq: 'x' } : 'junk');
        stats.events++;
      }
    }
  };
  const refused = (socket: Socket, err: Error, again: () => void) => {
    count(stats.refusals, err.message.split(':')[0]);
    socket.close();
    sockets.delete(socket);
    if (!stopping) {
      setTimeout(again, STORM_REFUSED_MS);
    }
  };

  const device = (token: string, mode: Exclude<StormMode, 'handshake'>) => {
    if (stopping) {
      return;
    }
    const socket = open(token, addresses.devices);
    let timer: NodeJS.Timeout | null = null;
    socket.on('connect', () => {
      stats.connects++;
      socket.emit(DEVICE_EVENTS.announce, announce(junkNames()));
      timer = setInterval(() => burst(socket, mode), STORM_BURST_MS);
    });
    socket.on(DEVICE_EVENTS.assign, (_payload: AssignPayload, ack: (answer: AssignAck) => void) => {
      stats.assigned++;
      ack({ accepted: false, reason: 'busy' });
    });
    socket.on('connect_error', (err) => refused(socket, err, () => device(token, mode)));
    socket.on('disconnect', () => {
      stats.disconnects++;
      if (timer) {
        clearInterval(timer);
      }
      if (!stopping) {
        setTimeout(() => device(token, mode), STORM_RECONNECT_MS);
      }
    });
  };

  const wrongToken = () => {
    if (stopping) {
      return;
    }
    const token = `syd_${Array.from({ length: 40 }, () => 'ABCDEFGHJKLMNPQRSTUVWXYZ'[octet() % 24]).join('')}`;
    const socket = open(token, addresses.wrongTokens);
    socket.on('connect', () => {
      // Not expected: a made-up token let in.
      stats.connects++;
      socket.close();
      sockets.delete(socket);
      setImmediate(wrongToken);
    });
    socket.on('connect_error', (err) => refused(socket, err, wrongToken));
  };

  for (const { token, mode } of command.devices) {
    if (mode === 'handshake') {
      for (let i = 0; i < HANDSHAKES_AT_ONCE; i++) {
        wrongToken();
      }
    } else {
      device(token, mode);
    }
  }
  send({ type: 'storming' });
}

function stop(): void {
  if (storm) {
    stopping = true;
    const { sockets, stats } = storm;
    sockets.forEach((s) => s.close());
    send({ type: 'storm-stats', stats });
    setTimeout(() => process.exit(0), 1_000).unref();
    return;
  }
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
    } else if (command.type === 'storm') {
      startStorm(command);
    } else {
      stop();
    }
  } catch (error) {
    send({ type: 'error', message: error instanceof Error ? (error.stack ?? error.message) : String(error) });
  }
});
process.on('disconnect', () => process.exit(0));
