import type { TaskEvent } from '@app/common';

/** The events of one task as the api sees them, plus the failures the api itself decides (timeouts). */
export type RelayEvent = TaskEvent;

/**
 * One request's view of its task: an ordered buffer of events with a single consumer, so the
 * route handler can `for await` them whatever the speed of the stream reader.
 */
export class RelayedTask {
  private readonly buffer: RelayEvent[] = [];
  private waiter: (() => void) | null = null;
  /** Set when the terminal event (done or error) has been pushed. */
  ended = false;
  /** Set when the client went away. */
  abandoned = false;
  state: 'queued' | 'assigned' = 'queued';
  readonly created = Math.floor(Date.now() / 1000);

  constructor(
    readonly taskId: string,
    readonly address: string,
    readonly mode: 'direct' | 'network',
    readonly model: string,
    readonly pool: string,
  ) {}

  push(event: RelayEvent): void {
    if (this.ended) {
      return;
    }
    if (event.type === 'done' || event.type === 'error') {
      this.ended = true;
    }
    this.buffer.push(event);
    this.waiter?.();
  }

  async *events(): AsyncGenerator<RelayEvent> {
    for (;;) {
      while (this.buffer.length > 0) {
        const event = this.buffer.shift()!;
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

  /** Wakes the consumer so it can notice the client is gone. */
  wake(): void {
    this.waiter?.();
  }
}
