import { KeySpace } from './key-space';
import type { RedisClient } from './redis';

/** What a subscriber hears (each handler optional: an api hears presence, a dispatcher jobs and cancels). */
export interface AnnouncementHandlers {
  /** A line has a new job (or one back from a requeue). */
  jobWaiting?(line: string): void;
  /** A client went away: stop its task if a device here has it. */
  cancel?(taskId: string): void;
  /** The devices of a (pool, model) changed. */
  presenceChanged?(pool: string, model: string): void;
}

/**
 * The messages the processes announce to each other over Pub/Sub, and how they are heard. On a single
 * server, classic channels. On a cluster, sharded channels (SPUBLISH, Redis 7), one per partition: a
 * message goes to the master of its partition and that master's subscribers, instead of over every
 * node of the cluster; a subscriber listens to every partition's channel.
 */
export class Announcements {
  static jobWaiting(redis: RedisClient, line: string): Promise<unknown> {
    return Announcements.publish(redis, KeySpace.of(redis).jobsChannel(line), line);
  }

  static cancel(redis: RedisClient, taskId: string): Promise<unknown> {
    return Announcements.publish(redis, KeySpace.of(redis).cancelChannel(taskId), taskId);
  }

  /**
   * The message of a presence change, for the dispatcher, which publishes it in its batch of background
   * writes (RedisBatch) on KeySpace.presenceChannel. A pool holds no space; a model id may.
   */
  static presenceMessage(pool: string, model: string): string {
    return `${pool} ${model}`;
  }

  private static publish(redis: RedisClient, channel: string, message: string): Promise<unknown> {
    return redis.isCluster ? redis.spublish(channel, message) : redis.publish(channel, message);
  }

  /** Subscribes `sub` (a connection in subscriber mode) to what the handlers hear, and routes the messages. */
  static async listen(sub: RedisClient, handlers: AnnouncementHandlers): Promise<void> {
    const keys = KeySpace.of(sub);
    const kinds = new Map<string, 'jobs' | 'cancel' | 'presence'>();
    const add = (kind: 'jobs' | 'cancel' | 'presence') => keys.allChannels(kind).forEach((c) => kinds.set(c, kind));
    if (handlers.jobWaiting) {
      add('jobs');
    }
    if (handlers.cancel) {
      add('cancel');
    }
    if (handlers.presenceChanged) {
      add('presence');
    }
    sub.on(sub.isCluster ? 'smessage' : 'message', (channel: string, message: string) => {
      const kind = kinds.get(channel);
      if (kind === 'jobs') {
        handlers.jobWaiting?.(message);
      } else if (kind === 'cancel') {
        handlers.cancel?.(message);
      } else if (kind === 'presence') {
        const [pool, ...model] = message.split(' ');
        handlers.presenceChanged?.(pool, model.join(' '));
      }
    });
    const channels = [...kinds.keys()];
    if (sub.isCluster) {
      // One SSUBSCRIBE per channel: a sharded subscription names channels of one slot.
      await Promise.all(channels.map((channel) => sub.ssubscribe(channel)));
    } else {
      await sub.subscribe(...channels);
    }
  }
}
