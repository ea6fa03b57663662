import { Inject, Injectable } from '@nestjs/common';
import type { ChainableCommander, Redis } from 'ioredis';
import { REDIS } from '@app/common';

/**
 * Background writes of many devices, sent together: every command added during one turn of the event
 * loop goes out in one pipeline, in the order added, after that turn's other commands (setImmediate
 * runs after the I/O callbacks of the turn). When ten thousand devices connect at once, each turn
 * handles hundreds of handshakes; one pipeline (one socket write) per device each time it connects,
 * announces or leaves cost more than the handshakes themselves (bench profile). A message published
 * more than once in a batch goes out once, after the batch's other commands.
 */
@Injectable()
export class RedisBatch {
  private pipeline: ChainableCommander | null = null;
  private readonly messages = new Map<string, Set<string>>();
  private done: Promise<void> | null = null;

  constructor(@Inject(REDIS) private readonly redis: Redis) {}

  /** Adds commands to this turn's batch; resolves once the batch ran (rejects when it could not be sent). */
  add(commands: (pipeline: ChainableCommander) => void): Promise<void> {
    commands(this.open());
    return this.done!;
  }

  /** PUBLISH once per batch, however many writes of the batch changed what the message announces. */
  publish(channel: string, message: string): Promise<void> {
    this.open();
    let set = this.messages.get(channel);
    if (!set) {
      set = new Set();
      this.messages.set(channel, set);
    }
    set.add(message);
    return this.done!;
  }

  private open(): ChainableCommander {
    if (!this.pipeline) {
      const pipeline = this.redis.pipeline();
      this.pipeline = pipeline;
      this.done = new Promise<void>((resolve, reject) =>
        setImmediate(() => {
          this.pipeline = null;
          for (const [channel, messages] of this.messages) {
            for (const message of messages) {
              pipeline.publish(channel, message);
            }
          }
          this.messages.clear();
          pipeline.exec().then(() => resolve(), reject);
        }),
      );
      // Callers that do not wait for the batch must not leave a rejection unhandled.
      this.done.catch(() => undefined);
    }
    return this.pipeline;
  }
}
