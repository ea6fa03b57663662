import { connect } from 'node:net';
import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { randomBytes } from 'node:crypto';
import type { AnnounceAck, AnnouncePayload } from '@app/common/protocol/device-protocol';
import { DEVICE_EVENTS, DEVICE_NAMESPACE, PROTOCOL_VERSION } from '@app/common/protocol/device-protocol';
import { backoffDelay } from '../../apps/device/src/link/backoff';

/**
 * A minimal device on a bare TCP socket: the WebSocket handshake and framing, Engine.IO v4 and the
 * Socket.IO v5 packets of the `/devices` namespace written by hand, the bytes on the wire the same as
 * socket.io-client's. socket.io-client costs a Manager, an Engine.IO socket, a `ws` client with its
 * HTTP request, and their timers per connection: ten thousand of them took more CPU than the
 * dispatcher they connect to (bench: 20 s against its 18 s for one connect storm, and a tenth of a
 * core at rest), on the same two cores. This one costs a socket and a small parser.
 *
 * It connects, announces, acknowledges each task:assign (timestamped as the frame arrives) and
 * answers with one delta and done at once. Like socket.io-client it gives up on a connection that is
 * not open within CONNECT_TIMEOUT_MS ("timeout") and reconnects, with the agent's backoff, after a
 * refusal or a lost connection.
 */
export interface ProbeHooks {
  /** The first answer to the announce. */
  announced(ok: boolean): void;
  /** A task:assign arrived at `at` (epoch ms). */
  assigned(address: string, at: number): void;
  connectError(reason: string): void;
  disconnected(reason: string): void;
}

/** socket.io-client's default: an Engine.IO connection not open by then is abandoned and retried. */
const CONNECT_TIMEOUT_MS = 20_000;
const ANNOUNCE_ACK_ID = 0;
/** Epoch milliseconds with sub-millisecond precision, comparable across processes of this machine. */
const epochMs = () => performance.timeOrigin + performance.now();

export class WireProbe {
  private socket: Socket | null = null;
  private buffer: Buffer = Buffer.alloc(0);
  private upgraded = false;
  private open = false;
  private announcedOnce = false;
  private attempts = 0;
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(
    private readonly url: URL,
    private readonly token: string,
    private readonly announce: AnnouncePayload,
    private readonly hooks: ProbeHooks,
  ) {}

  start(): void {
    this.stopped = false;
    const socket = connect({ host: this.url.hostname, port: Number(this.url.port) });
    this.socket = socket;
    this.buffer = Buffer.alloc(0);
    this.upgraded = false;
    this.open = false;
    socket.setNoDelay(true);
    this.timer = setTimeout(() => this.fail('timeout'), CONNECT_TIMEOUT_MS);
    socket.on('connect', () => {
      socket.write(
        `GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\n` +
          `Host: ${this.url.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
      );
    });
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (err: NodeJS.ErrnoException) => {
      if (!this.open) {
        this.fail(err.code ?? 'websocket error');
      }
    });
    socket.on('close', () => {
      if (this.socket !== socket) {
        return;
      }
      this.socket = null;
      if (this.open) {
        this.hooks.disconnected('transport close');
      } else {
        this.hooks.connectError('websocket error');
      }
      this.retry();
    });
  }

  stop(): void {
    this.stopped = true;
    this.clearTimer();
    if (this.socket) {
      // A namespace disconnect, then a WebSocket close frame, then the socket.
      this.send(`41${DEVICE_NAMESPACE},`);
      this.frame(0x8, Buffer.alloc(0));
      this.socket.end();
      this.socket = null;
    }
  }

  private clearTimer(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }

  /** The connection failed before it was open: counted, dropped, retried. */
  private fail(reason: string): void {
    this.hooks.connectError(reason);
    const socket = this.socket;
    this.socket = null;
    socket?.destroy();
    this.retry();
  }

  private retry(): void {
    this.clearTimer();
    if (!this.stopped) {
      this.timer = setTimeout(() => this.start(), backoffDelay(this.attempts++));
    }
  }

  private onData(chunk: Buffer): void {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    if (!this.upgraded) {
      const end = this.buffer.indexOf('\r\n\r\n');
      if (end < 0) {
        return;
      }
      if (!this.buffer.subarray(0, 12).toString('latin1').startsWith('HTTP/1.1 101')) {
        this.fail('websocket error');
        return;
      }
      this.upgraded = true;
      this.buffer = this.buffer.subarray(end + 4);
    }
    // Server frames: unmasked, whole (the server does not fragment); at most 2^53 bytes.
    while (this.buffer.length >= 2) {
      const b = this.buffer;
      const opcode = b[0] & 0x0f;
      let length = b[1] & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (b.length < 4) {
          return;
        }
        length = b.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (b.length < 10) {
          return;
        }
        length = Number(b.readBigUInt64BE(2));
        offset = 10;
      }
      if (b.length < offset + length) {
        return;
      }
      const payload = b.subarray(offset, offset + length);
      this.buffer = b.subarray(offset + length);
      if (opcode === 0x1) {
        this.onMessage(payload.toString('utf8'));
      } else if (opcode === 0x9) {
        this.frame(0xa, payload);
      } else if (opcode === 0x8) {
        this.socket?.destroy(); // 'close' tells the rest
        return;
      }
    }
  }

  /** One Engine.IO packet (a WebSocket message each). */
  private onMessage(message: string): void {
    const at = epochMs();
    switch (message[0]) {
      case '0': // open: join the namespace with the device's credentials
        this.clearTimer();
        this.open = true;
        this.send(`40${DEVICE_NAMESPACE},${JSON.stringify({ token: this.token, protocol: PROTOCOL_VERSION })}`);
        return;
      case '2': // ping
        this.send('3');
        return;
      case '4':
        this.onPacket(message, at);
        return;
      default: // close, noop
        return;
    }
  }

  /** A Socket.IO packet: `4<type>/devices,<ack id><json>`. */
  private onPacket(message: string, at: number): void {
    const type = message[1];
    const body = message.slice(2 + DEVICE_NAMESPACE.length + 1);
    const json = body.search(/[[{]/);
    const id = json > 0 ? Number(body.slice(0, json)) : null;
    const data = json >= 0 ? body.slice(json) : '';
    switch (type) {
      case '0': // namespace joined
        this.attempts = 0;
        this.send(`42${DEVICE_NAMESPACE},${ANNOUNCE_ACK_ID}${JSON.stringify([DEVICE_EVENTS.announce, this.announce])}`);
        return;
      case '4': {
        // refused at the handshake
        const reason = (JSON.parse(data) as { message?: string }).message ?? 'connect_error';
        this.open = false;
        this.fail(reason);
        return;
      }
      case '3': // an ack: only the announce asks for one
        if (id === ANNOUNCE_ACK_ID && !this.announcedOnce) {
          this.announcedOnce = true;
          this.hooks.announced((JSON.parse(data) as [AnnounceAck])[0].ok);
        }
        return;
      case '2': {
        const [event, payload] = JSON.parse(data) as [string, { task_address: string }];
        if (event !== DEVICE_EVENTS.assign || id === null) {
          return;
        }
        const address = payload.task_address;
        this.hooks.assigned(address, at);
        this.send(`43${DEVICE_NAMESPACE},${id}[{"accepted":true}]`);
        this.send(
          `42${DEVICE_NAMESPACE},${JSON.stringify([
            DEVICE_EVENTS.delta,
            { task_address: address, seq: 0, choices: [{ index: 0, content: 'ok' }] },
          ])}`,
        );
        this.send(
          `42${DEVICE_NAMESPACE},${JSON.stringify([
            DEVICE_EVENTS.done,
            {
              task_address: address,
              seq: 1,
              finish_reasons: ['stop'],
              usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
            },
          ])}`,
        );
        return;
      }
      case '1': {
        // Sent away by the server: like socket.io-client, it does not come back on its own.
        this.hooks.disconnected('io server disconnect');
        const socket = this.socket;
        this.socket = null;
        this.stopped = true;
        this.clearTimer();
        socket?.destroy();
        return;
      }
      default:
        return;
    }
  }

  private send(text: string): void {
    this.frame(0x1, Buffer.from(text, 'utf8'));
  }

  /** A client frame: final, masked (with a zero key: framing as the RFC wants it, no XOR to do). */
  private frame(opcode: number, payload: Buffer): void {
    if (!this.socket) {
      return;
    }
    const n = payload.length;
    const head = n < 126 ? 2 : n < 65_536 ? 4 : 10;
    const out = Buffer.alloc(head + 4 + n);
    out[0] = 0x80 | opcode;
    if (head === 2) {
      out[1] = 0x80 | n;
    } else if (head === 4) {
      out[1] = 0x80 | 126;
      out.writeUInt16BE(n, 2);
    } else {
      out[1] = 0x80 | 127;
      out.writeBigUInt64BE(BigInt(n), 2);
    }
    payload.copy(out, head + 4);
    this.socket.write(out);
  }
}
