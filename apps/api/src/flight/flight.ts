import { DISCONNECTED_MID_ANSWER } from '@app/common';
import type { EndGuard, Ending, ErrorCode, StreamEntry, TaskEvent } from '@app/common';

export type FlightState = 'queued' | 'assigned' | 'streaming' | 'ended';

/** The task a flight follows. */
export interface FlightTask {
  taskId: string;
  address: string;
  mode: 'direct' | 'network';
  model: string;
  line: string;
  api: 'openai' | 'ollama';
  /** Whether a dispatcher may resume it on another device after output (see FLIGHT_RESUME_GRACE_MS). */
  resume: boolean;
}

/**
 * A resumable task's device is dropped by its dispatcher after TASK_IDLE_TIMEOUT_MS of silence, and the
 * task resumed on another device; the api, which would end the task after the same silence, waits this
 * much longer, so that the dispatcher's resume comes first (its check runs every 500 ms).
 */
export const FLIGHT_RESUME_GRACE_MS = 3_000;

export interface FlightTimeouts {
  queueMs: number;
  idleMs: number;
  streamMs: number;
}

/** What a flight needs from its owner (FlightsService): the side effects, so the machine stays testable. */
export interface FlightHooks {
  /** Ends the task if `guard` allows; whether this call ended it. Never rejects. */
  endTask(flight: Flight, ending: Ending, guard: EndGuard): Promise<boolean>;
  /** Takes the task back from the queue (the job, if it still waits) or from its device. */
  withdraw(flight: Flight, waiting: boolean): Promise<void>;
  /** The flight moved to another state, or ended with this outcome: limits, metrics, subscriptions. */
  changed(flight: Flight, from: FlightState, outcome: string | null): void;
  /** Stop (false) or resume (true) reading the task's stream: its client is slower than its device. */
  flow(flight: Flight, reading: boolean): void;
}

/**
 * The most a flight holds of events its client has not taken yet. Past it, the task's stream is not
 * read until the client catches up: the rest waits in Redis (bounded by the request's output bound,
 * which the dispatcher enforces), not in the api's memory.
 */
export const FLIGHT_BUFFER_BYTES = 256 * 1024;

/** About what an event holds in memory: its text, with a fixed allowance for the rest. */
function eventSize(event: TaskEvent): number {
  if (event.type === 'embedding') {
    return event.data.reduce((n, v) => n + 16 + v.embedding.length, 64);
  }
  if (event.type !== 'delta') {
    return 64;
  }
  let size = 64;
  for (const c of event.choices) {
    size += (c.content?.length ?? 0) + (c.reasoning?.length ?? 0);
    size += (c.tool_calls?.length ?? 0) * 256 + (c.logprobs?.length ?? 0) * 256;
  }
  return size;
}

const RELAY_INTERRUPTED =
  'Part of the answer was lost between the device and this server (Redis was unavailable); the request was stopped. Retry it.';

/**
 * One request's task as the api follows it: an explicit state machine, queued → assigned →
 * streaming → ended, with the timers of each state (the queue timeout while queued, the device's
 * silence once assigned, the longest a request may last throughout). It reads the task's stream
 * entries in order (dropping repeats, ending on a gap) and hands the client's handler an ordered
 * buffer of events with one consumer; a client slower than its device holds the stream's reading
 * (FLIGHT_BUFFER_BYTES).
 */
export class Flight {
  state: FlightState = 'queued';
  readonly created = Math.floor(Date.now() / 1000);
  readonly startedAt = performance.now();
  /** When the task was (last) queued, and when its first output came. */
  queuedAt = performance.now();
  firstOutputAt: number | null = null;
  /** The client went away. */
  abandoned = false;
  /** The completion tokens the device reported at the end, if it did. */
  completionTokens: number | null = null;

  private readonly buffer: TaskEvent[] = [];
  private buffered = 0;
  /** The stream is not read: the client is behind (see FLIGHT_BUFFER_BYTES). */
  private held = false;
  private waiter: (() => void) | null = null;
  private attempt = 0;
  private nextSeq = 0;
  /** A `resumed` event came after output: the next attempt's output continues the answer. */
  private continuing = false;
  private failing = false;
  private queueTimer: NodeJS.Timeout | null = null;
  private idleTimer: NodeJS.Timeout | null = null;
  private lastEventAt = 0;
  private readonly streamTimer: NodeJS.Timeout;

  constructor(
    readonly task: FlightTask,
    private readonly timeouts: FlightTimeouts,
    private readonly hooks: FlightHooks,
  ) {
    this.streamTimer = setTimeout(
      () => void this.fail('timed_out', 'stream_timeout', `The request did not finish within ${timeouts.streamMs} ms.`),
      timeouts.streamMs,
    );
    this.armQueueTimer();
  }

  get ended(): boolean {
    return this.state === 'ended';
  }

  /**
   * An entry of the task's stream. Entries of an earlier assignment and events already seen are
   * dropped (a write retried after a Redis failure); a gap means events were lost with Redis, and the
   * client gets an explicit error instead of an answer with a hole in it.
   */
  onEntry(entry: StreamEntry): void {
    if (this.ended) {
      return;
    }
    let events = entry.events;
    if (entry.attempt !== null) {
      if (entry.attempt < this.attempt) {
        return;
      }
      if (entry.attempt > this.attempt) {
        if (this.firstOutputAt !== null && !this.continuing) {
          // Output of an earlier attempt reached the client, and the task was not resumed: another
          // device's answer would start again.
          void this.fail('failed', 'device_disconnected', DISCONNECTED_MID_ANSWER);
          return;
        }
        this.continuing = false;
        this.attempt = entry.attempt;
        this.nextSeq = 0;
      }
      if (entry.seq > this.nextSeq) {
        void this.fail('failed', 'relay_interrupted', RELAY_INTERRUPTED);
        return;
      }
      events = events.slice(this.nextSeq - entry.seq);
      this.nextSeq += events.length;
    }
    for (const event of events) {
      this.onEvent(event, entry.heldMs ?? 0);
    }
  }

  /** `heldMs`: how long the entry's first output waited in the dispatcher (StreamEntry.heldMs). */
  private onEvent(event: TaskEvent, heldMs = 0): void {
    if (this.ended) {
      return;
    }
    const from = this.state;
    switch (event.type) {
      case 'assigned':
        this.state = 'assigned';
        this.clearQueueTimer();
        this.armIdleTimer();
        break;
      case 'resumed':
        // Its device was lost mid-answer: the next device continues the answer (same stream for the client).
        this.continuing = true;
        this.state = 'queued';
        this.queuedAt = performance.now();
        this.clearIdleTimer();
        this.armQueueTimer();
        break;
      case 'requeued':
        this.state = 'queued';
        this.queuedAt = performance.now();
        this.clearIdleTimer();
        this.armQueueTimer();
        break;
      case 'delta':
      case 'embedding':
        this.state = 'streaming';
        this.firstOutputAt ??= performance.now() - heldMs;
        this.armIdleTimer();
        break;
      case 'done':
        this.completionTokens = event.usage?.completion_tokens ?? null;
        this.end('completed');
        break;
      case 'error':
        this.end(event.code);
        break;
    }
    this.push(event);
    if (this.state !== from && !this.ended) {
      this.hooks.changed(this, from, null);
    }
  }

  /**
   * Ends the task with an error the api decided, and tells the client. With guard 'queued' nothing
   * happens unless the task still waits. A task whose state is already terminal (it ended, but its
   * last events never arrived) ends here too: the client gets `relay_interrupted` instead of waiting.
   */
  async fail(
    status: 'failed' | 'cancelled' | 'timed_out',
    code: ErrorCode,
    message: string,
    guard: 'any' | 'queued' = 'any',
  ): Promise<void> {
    if (this.ended || this.failing) {
      return;
    }
    this.failing = true;
    const waiting = this.state === 'queued';
    const ended = await this.hooks.endTask(this, { status, errorCode: code }, guard);
    if (this.ended) {
      return;
    }
    if (!ended && guard === 'queued') {
      // A device took it meanwhile: the flight goes on.
      this.failing = false;
      return;
    }
    await this.hooks.withdraw(this, ended && waiting);
    if (this.ended) {
      return;
    }
    this.onEvent(
      ended
        ? { type: 'error', code, message }
        : { type: 'error', code: 'relay_interrupted', message: RELAY_INTERRUPTED },
    );
  }

  /** The client went away: the task is cancelled (the job withdrawn, or the device stopped). */
  async abandon(): Promise<void> {
    if (this.ended || this.abandoned) {
      return;
    }
    this.abandoned = true;
    const waiting = this.state === 'queued';
    this.end('cancelled');
    this.waiter?.();
    const ended =
      waiting && (await this.hooks.endTask(this, { status: 'cancelled', errorCode: 'client_disconnected' }, 'queued'));
    // A device has it: the dispatcher stops the device and records the cancellation.
    await this.hooks.withdraw(this, ended);
  }

  private end(outcome: string): void {
    if (this.ended) {
      return;
    }
    const from = this.state;
    this.state = 'ended';
    this.stopTimers();
    this.hooks.changed(this, from, outcome);
  }

  /** Clears every timer (the process is going, or the flight ended). */
  stopTimers(): void {
    this.clearQueueTimer();
    this.clearIdleTimer();
    clearTimeout(this.streamTimer);
  }

  private armQueueTimer(): void {
    this.clearQueueTimer();
    this.queueTimer = setTimeout(() => {
      if (this.state === 'queued') {
        void this.fail(
          'timed_out',
          'queue_timeout',
          `No device took the request within ${this.timeouts.queueMs} ms: every device serving '${this.task.model}' is busy. Try again later.`,
          'queued',
        );
      }
    }, this.timeouts.queueMs);
  }

  private clearQueueTimer(): void {
    if (this.queueTimer) {
      clearTimeout(this.queueTimer);
      this.queueTimer = null;
    }
  }

  /** Once a device has the task, any event resets the silence deadline (TASK_IDLE_TIMEOUT_MS). */
  private armIdleTimer(): void {
    // Called for every event: it only notes the time. The one timer, when it fires, looks at how long
    // the device has really been silent and waits out the rest if an event came meanwhile, so that a
    // streamed token costs no timer of its own. While the stream is held for a slow client, the
    // device's silence is not measured: it is not read.
    this.lastEventAt = performance.now();
    if (this.idleTimer || this.held) {
      return;
    }
    const wait = (ms: number) => {
      this.idleTimer = setTimeout(() => {
        if (this.held) {
          this.idleTimer = null;
          return;
        }
        const silent = performance.now() - this.lastEventAt;
        if (silent < this.timeouts.idleMs) {
          wait(this.timeouts.idleMs - silent);
          return;
        }
        this.idleTimer = null;
        void this.fail('timed_out', 'device_timeout', `The device sent nothing for ${this.timeouts.idleMs} ms.`);
      }, ms);
    };
    wait(this.timeouts.idleMs);
  }

  private clearIdleTimer(): void {
    if (this.idleTimer) {
      clearTimeout(this.idleTimer);
      this.idleTimer = null;
    }
  }

  private push(event: TaskEvent): void {
    this.buffer.push(event);
    this.buffered += eventSize(event);
    if (!this.held && !this.ended && this.buffered > FLIGHT_BUFFER_BYTES) {
      this.held = true;
      this.clearIdleTimer();
      this.hooks.flow(this, false);
    }
    this.waiter?.();
  }

  /** The client took an event: once it has caught up with half the buffer, the stream is read again. */
  private taken(event: TaskEvent): void {
    this.buffered -= eventSize(event);
    if (this.held && this.buffered <= FLIGHT_BUFFER_BYTES / 2) {
      this.held = false;
      this.hooks.flow(this, true);
      if (this.state === 'assigned' || this.state === 'streaming') {
        this.armIdleTimer();
      }
    }
  }

  /** The events for the client's handler, in order, until the ending (or until the client left). */
  async *events(): AsyncGenerator<TaskEvent> {
    for (;;) {
      while (this.buffer.length > 0) {
        const event = this.buffer.shift()!;
        this.taken(event);
        yield event;
        if (event.type === 'done' || event.type === 'error') {
          return;
        }
      }
      if (this.abandoned) {
        return;
      }
      await new Promise<void>((resolve) => (this.waiter = resolve));
      this.waiter = null;
    }
  }
}
