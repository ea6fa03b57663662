import { encodeStreamEntry, retrying } from '@app/common';
import type { RedisClient } from '@app/common';
import type { Ending, TaskEvent, TaskRepository, TransitionResult } from '@app/common';

/** Most events in one stream entry (a burst of tokens from a fast device). */
const MAX_BATCH = 256;
/** The first wait before writing again while Redis is unreachable (then doubling, see retrying). */
const RETRY_FIRST_MS = 50;
/**
 * For a client that does not stream: output is held and written with the ending, or once this long has
 * passed since the last write (the claim's `assigned` event counts as one), so that the api, which gives
 * up on a task silent for TASK_IDLE_TIMEOUT_MS, still sees it working; or when MAX_BATCH events are held.
 */
const HOLD_MAX_MS = 1_000;

/** How a writer's assignment ends: a transition, written with its event after every pending one. */
export type Closing =
  /**
   * `event` (if any) is what the client gets: none when the client is gone (then nothing is written).
   * `output`: held output that goes with it (an embedding's vectors, written whole with its ending).
   */
  | { kind: 'end'; ending: Ending; event?: TaskEvent; output?: TaskEvent[] }
  | { kind: 'requeue'; event: TaskEvent }
  /** Output reached the client and the device is lost: the task waits for a device to continue it. */
  | { kind: 'resume'; event: TaskEvent }
  /** The assignment is over without a transition of its own (the task was ended elsewhere). */
  | { kind: 'abandon' };

export interface WriterHooks {
  /** The first output could not be recorded: the task had ended elsewhere (a timeout, a cancel). */
  onRefused(): void;
  /** Events could not be written for longer than the api waits for them. */
  onLost(): void;
  /**
   * Once lost, the ending could not be recorded either (Redis and the Postgres fallback both failed):
   * the reaper ends the task at its deadline.
   */
  onEndFailed(err: unknown): void;
}

/**
 * The events of one assignment, dispatcher → api, in order. The claim wrote the `assigned` event
 * (sequence 0); each later event gets the next number, so that the api can drop a repeat and notice a
 * gap. One entry is in flight at a time; what piles up meanwhile goes out together. The entry with the
 * first output is written by the `first` transition, and the closing event by its transition (with any
 * output still pending), so that a client sees an ending exactly when the task ended that way.
 *
 * A client that does not stream gets its answer whole: each entry written for it before the ending
 * would cost Redis a write and the api a read for nothing, so its output is held (see HOLD_MAX_MS),
 * the first included, and usually goes out in the closing entry: an answer shorter than HOLD_MAX_MS
 * takes one entry and one transition (the ending, which records when its first output came) instead
 * of one per token and a `first` transition besides. A requeue or a resume writes held first output
 * by the `first` transition before it, as if it had not been held.
 */
export class TaskWriter {
  private pending: TaskEvent[] = [];
  private seq = 1;
  private firstRecorded = false;
  private closing: Closing | null = null;
  private writing = false;
  private stopped = false;
  /** Events could not be written for longer than the api waits: only the ending is still recorded. */
  private lost = false;
  /** Whether the stream's expiry has been set by this writer (the transitions set it too). */
  private expirySet = false;
  private settled: Promise<TransitionResult | null> | null = null;
  private settle: ((result: TransitionResult | null) => void) | null = null;
  /** When an entry was last written (performance.now()), for held output; the claim wrote the first. */
  private writtenAt = performance.now();
  /** When this attempt's first output arrived (epoch ms): its record's time, even when written later. */
  private firstAt: number | null = null;
  /** The same moment by performance.now(), for how long it was held (StreamEntry.heldMs). */
  private firstSeen = 0;

  constructor(
    private readonly redis: RedisClient,
    private readonly tasks: TaskRepository,
    readonly taskId: string,
    private readonly streamKey: string,
    private readonly streamTtlS: number,
    readonly attempt: number,
    private readonly giveUpMs: number,
    private readonly hooks: WriterHooks,
    /** The client does not stream: output after the first may wait for the ending. */
    private readonly holdOutput = false,
  ) {}

  /** Queues an output event. */
  push(event: TaskEvent): void {
    if (this.closing || this.stopped) {
      return;
    }
    if (this.firstAt === null) {
      this.firstAt = Date.now();
      this.firstSeen = performance.now();
    }
    this.pending.push(event);
    if (!this.holds()) {
      this.kick();
    }
  }

  /** Whether the pending output may wait for the ending (or for the next event past HOLD_MAX_MS). */
  private holds(): boolean {
    return (
      this.holdOutput &&
      this.pending.length < MAX_BATCH &&
      performance.now() - this.writtenAt < Math.min(HOLD_MAX_MS, this.giveUpMs / 4)
    );
  }

  /**
   * Closes the assignment after what is pending; resolves with the transition's result (null when it
   * could not be written, or for `abandon`).
   */
  close(closing: Closing): Promise<TransitionResult | null> {
    if (this.lost && !this.closing && closing.kind === 'end') {
      // No event can reach the client any more (it was told by the api); the record still ends.
      this.closing = closing;
      this.settled = this.tasks.end(this.taskId, closing.ending, { attempt: this.attempt }).catch((err: unknown) => {
        this.hooks.onEndFailed(err);
        return null;
      });
      return this.settled;
    }
    if (!this.closing && !this.stopped) {
      this.closing = closing;
      this.settled = new Promise((resolve) => (this.settle = resolve));
      this.kick();
    }
    return this.settled ?? Promise.resolve(null);
  }

  private kick(): void {
    if (!this.writing) {
      this.writing = true;
      // Started on the next microtask, so that the events of one tick go out as one entry.
      queueMicrotask(() => void this.drain());
    }
  }

  private async drain(): Promise<void> {
    try {
      while (!this.stopped && ((this.pending.length > 0 && !this.holds()) || this.closing)) {
        if (this.closing) {
          await this.writeClosing(this.closing);
          return;
        }
        await this.writeOutput();
      }
    } catch {
      // Redis stayed unreachable for longer than the api waits for the task's events.
      this.stopped = true;
      this.lost = true;
      this.pending = [];
      this.settle?.(null);
      this.hooks.onLost();
    } finally {
      this.writing = false;
    }
  }

  private async writeOutput(): Promise<void> {
    const batch = this.pending.slice(0, MAX_BATCH);
    const fields = encodeStreamEntry(this.attempt, this.seq, batch, this.heldFor());
    if (!this.firstRecorded) {
      const at = this.firstAt ?? Date.now();
      const result = await this.retry(() => this.tasks.firstOutput(this.taskId, this.attempt, fields, at));
      if (!result.ok) {
        this.stopped = true;
        this.pending = [];
        this.hooks.onRefused();
        return;
      }
      this.firstRecorded = true;
    } else {
      await this.retry(async () => {
        // Issued in the same turn, the two leave in one socket write (see coalesceWrites).
        // NOMKSTREAM: the claim made the stream; once the api deleted it (its request ended), output
        // still on the wire must not bring it back, without an expiry.
        await Promise.all([
          this.redis.xadd(this.streamKey, 'NOMKSTREAM', '*', ...fields),
          this.expirySet ? null : this.redis.expire(this.streamKey, this.streamTtlS),
        ]);
        this.expirySet = true;
      });
    }
    this.pending.splice(0, batch.length);
    this.seq += batch.length;
    this.writtenAt = performance.now();
  }

  /** The closing transition, carrying whatever output is still pending in the same entry. */
  private async writeClosing(closing: Closing): Promise<void> {
    if (closing.kind !== 'end' && closing.kind !== 'abandon' && closing.event && !this.firstRecorded) {
      // Held first output before a requeue or a resume is written as any first output is (the task
      // becomes `streaming`), so that what the device gave is recorded as relayed before the task moves.
      if (this.pending.length > 0) {
        await this.writeOutput();
      }
      if (this.stopped) {
        this.settle?.(null);
        return;
      }
    }
    this.stopped = true;
    if (closing.kind === 'abandon') {
      this.settle?.(null);
      return;
    }
    // No closing event means no client (it went away): its pending output would only be written into
    // a stream nobody reads, and bring back the stream the api deleted.
    const output = closing.kind === 'end' ? (closing.output ?? []) : [];
    const events = closing.event ? [...this.pending, ...output, closing.event] : [];
    this.pending = [];
    const fields = events.length > 0 ? encodeStreamEntry(this.attempt, this.seq, events, this.heldFor()) : [];
    const result =
      closing.kind === 'end'
        ? await this.retry(() =>
            this.tasks.end(
              this.taskId,
              this.withFirstOutput(closing.ending, events),
              { attempt: this.attempt },
              fields,
            ),
          )
        : closing.kind === 'resume'
          ? await this.retry(() => this.tasks.resume(this.taskId, this.attempt, fields))
          : await this.retry(() => this.tasks.requeue(this.taskId, this.attempt, fields));
    if (result.ok && result.recovered && fields.length > 0) {
      // Redis lost the task's state (a restart): the ending went to Postgres; the client still gets it.
      await this.retry(async () => {
        await Promise.all([
          this.redis.xadd(this.streamKey, '*', ...fields),
          this.redis.expire(this.streamKey, this.streamTtlS),
        ]);
      });
    }
    this.settle?.(result);
  }

  /** How long the first output has waited, while it is not written yet (0 after). */
  private heldFor(): number {
    return this.firstRecorded || this.firstAt === null ? 0 : performance.now() - this.firstSeen;
  }

  /**
   * An ending whose output was never written before (held, or all of it came at once) carries the time
   * of its first output itself: one transition instead of two.
   */
  private withFirstOutput(ending: Ending, events: TaskEvent[]): Ending {
    return !this.firstRecorded && events.some((e) => e.type === 'delta' || e.type === 'embedding')
      ? { ...ending, firstTokenAt: this.firstAt ?? Date.now() }
      : ending;
  }

  private retry<T>(fn: () => Promise<T>): Promise<T> {
    return retrying(fn, this.giveUpMs, RETRY_FIRST_MS);
  }
}
