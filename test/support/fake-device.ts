import { io } from 'socket.io-client';
import type { Socket } from 'socket.io-client';
import { PROTOCOL_VERSION } from '@app/common';

/**
 * A device written by hand on socket.io-client (a real device token), for what the agent never
 * does on its own: disconnect at a chosen moment, or send arbitrary events.
 */
export class FakeDevice {
  readonly assignments: { payload: any }[] = [];
  /** The dispatcher's answer to the announce: the models accepted and those refused, with reasons. */
  announceAck: any = null;
  /** Waiting nextAssignment() calls, woken by the next task:assign. */
  private readonly waiters: (() => void)[] = [];

  private constructor(
    readonly socket: Socket,
    /** What it announced when it connected (see sync). */
    private readonly announce: object,
  ) {}

  static async connect(
    server: string,
    token: string,
    models: string[],
    opts: { features?: string[]; ack?: boolean; protocol?: number; identities?: object[] } = {},
  ): Promise<FakeDevice> {
    const protocol = opts.protocol ?? PROTOCOL_VERSION;
    const socket = io(`${server}/devices`, {
      transports: ['websocket'],
      // Another version than the current one: an agent not yet upgraded, in a rolling upgrade.
      auth: { token, protocol },
      reconnection: false,
      forceNew: true,
    });
    const announce = {
      agent_version: 'fake-1',
      backend: 'sim',
      models,
      features: opts.features ?? [],
      available: true,
      running_task: null,
      // What the runtime says each model is: since protocol 3 (version 2 has no such field).
      ...(protocol >= 3 ? { identities: opts.identities ?? [] } : {}),
    };
    const device = new FakeDevice(socket, announce);
    socket.on('task:cancel', (payload: { task_address: string }) => device.cancels.push(payload.task_address));
    socket.on('task:assign', (payload: any, ack: (answer: unknown) => void) => {
      if (opts.ack !== false) {
        ack({ accepted: true });
      }
      device.assignments.push({ payload });
      device.waiters.splice(0).forEach((wake) => wake());
    });
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('connect_error', reject);
    });
    const answer = await socket.timeout(5_000).emitWithAck('announce', announce);
    expect(answer).toMatchObject({ ok: true });
    device.announceAck = answer;
    return device;
  }

  /**
   * Resolves once the dispatcher has handled every event this device sent before, and this device has
   * received whatever the dispatcher sent it before that: socket.io delivers one socket's packets in
   * order both ways, and the dispatcher acknowledges a re-announce (of the same models) after the
   * events that came before it. What a test waits for, instead of a sleep, before asserting what
   * those events did not do (or that nothing was assigned).
   */
  async sync(): Promise<void> {
    const answer = await this.socket.timeout(5_000).emitWithAck('announce', this.announce);
    expect(answer).toMatchObject({ ok: true });
  }

  /** The next task:assign this device receives (or one it already has). */
  async nextAssignment(timeoutMs = 15_000): Promise<any> {
    const deadline = Date.now() + timeoutMs;
    while (this.assignments.length === 0) {
      const left = deadline - Date.now();
      if (left <= 0 || !this.socket.connected) {
        throw new Error('no assignment for the fake device');
      }
      await new Promise<void>((resolve) => {
        // Unref'd: a wait nobody needs any more (a race lost) does not keep the test run alive.
        const timer = setTimeout(resolve, left);
        timer.unref();
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return this.assignments.shift()!.payload;
  }

  /** Whichever of the devices is assigned a task first, and that task. */
  static async firstAssigned(devices: FakeDevice[], timeoutMs = 15_000): Promise<[FakeDevice, any]> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const holder = devices.find((d) => d.assignments.length > 0);
      if (holder) {
        return [holder, holder.assignments.shift()!.payload];
      }
      if (Date.now() > deadline) {
        throw new Error('none of the fake devices was assigned a task');
      }
      await new Promise((resolve) => setTimeout(resolve, 10).unref());
    }
  }

  /** Output for choice 0 of a task, as the agent sends it. */
  delta(address: string, seq: number, content: string): void {
    this.socket.emit('task:delta', { task_address: address, seq, choices: [{ index: 0, content }] });
  }

  done(address: string, seq: number, usage: object | null = null, reason = 'stop'): void {
    this.socket.emit('task:done', { task_address: address, seq, finish_reasons: [reason], usage });
  }

  error(address: string, seq: number, code: string, message: string): void {
    this.socket.emit('task:error', { task_address: address, seq, code, message });
  }

  /** Answers an assignment with the given tokens, then done with usage. */
  answer(address: string, tokens: string[], promptTokens = 1): void {
    tokens.forEach((t, seq) => this.delta(address, seq, t));
    this.done(address, tokens.length, {
      prompt_tokens: promptTokens,
      completion_tokens: tokens.length,
      total_tokens: promptTokens + tokens.length,
    });
  }

  /** The cancels the dispatcher sent, by task address. */
  readonly cancels: string[] = [];

  close(): void {
    this.socket.disconnect();
    this.waiters.splice(0).forEach((wake) => wake());
  }
}
