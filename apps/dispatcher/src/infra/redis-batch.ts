import { Inject, Injectable } from '@nestjs/common';
import type { ChainableCommander } from 'ioredis';
import { KeySpace, REDIS } from '@app/common';
import type { RedisClient } from '@app/common';

/** A turn's commands: a pipeline, or on a cluster the calls recorded to be sent one by one. */
interface Batch {
  commander: ChainableCommander;
  send(): Promise<unknown>;
}

/**
 * Background writes of many devices, sent together: every command added during one turn of the event
 * loop goes out in one pipeline, in the order added, after that turn's other commands (setImmediate
 * runs after the I/O callbacks of the turn). When ten thousand devices connect at once, each turn
 * handles hundreds of handshakes; one pipeline (one socket write) per device each time it connects,
 * announces or leaves cost more than the handshakes themselves (bench profile). A message published
 * more than once in a batch goes out once, after the batch's other commands.
 *
 * On a cluster a pipeline may only hold keys of one node: the batch's commands are recorded and sent
 * each to its key's master (those of one master leave in one write there too: the connection's writes
 * are coalesced), and the messages once they all ran.
 */
@Injectable()
export class RedisBatch {
  private batch: Batch | null = null;
  private readonly messages = new Map<string, Set<string>>();
  private done: Promise<void> | null = null;

  /** The names of the keys the batch writes. */
  readonly keys: KeySpace;

  constructor(@Inject(REDIS) private readonly redis: RedisClient) {
    this.keys = KeySpace.of(redis);
  }

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
    if (!this.batch) {
      const batch = this.redis.isCluster ? this.recorded() : this.pipelined();
      this.batch = batch;
      this.done = new Promise<void>((resolve, reject) =>
        setImmediate(() => {
          this.batch = null;
          const messages = [...this.messages].flatMap(([channel, set]) => [...set].map((m) => [channel, m] as const));
          this.messages.clear();
          if (this.redis.isCluster) {
            // Sharded channels, as Announcements publishes on a cluster.
            const publish = () => Promise.all(messages.map(([channel, m]) => this.redis.spublish(channel, m)));
            batch
              .send()
              .then(publish)
              .then(() => resolve(), reject);
          } else {
            messages.forEach(([channel, m]) => batch.commander.publish(channel, m));
            batch.send().then(() => resolve(), reject);
          }
        }),
      );
      // Callers that do not wait for the batch must not leave a rejection unhandled.
      this.done.catch(() => undefined);
    }
    return this.batch.commander;
  }

  private pipelined(): Batch {
    const pipeline = this.redis.pipeline();
    return { commander: pipeline, send: () => pipeline.exec() };
  }

  private recorded(): Batch {
    const calls: [string, unknown[]][] = [];
    const commander: ChainableCommander = new Proxy({} as ChainableCommander, {
      get: (_target, name) => {
        return (...args: unknown[]) => {
          calls.push([String(name), args]);
          return commander;
        };
      },
    });
    const client = this.redis as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
    // As a pipeline's: a command that fails does not fail the batch (exec answers its error in place).
    const send = () => Promise.all(calls.map(([name, args]) => client[name](...args).catch((err: unknown) => err)));
    return { commander, send };
  }
}
