import type { DeviceSession } from '../devices/device-session';

/**
 * The devices of this dispatcher ready for a task, per queue, in the order they became idle: the one
 * idle longest is offered the next job (devices take turns), and finding one is O(1) whatever the
 * number of devices.
 */
export class IdleDevices {
  private readonly byQueue = new Map<string, Set<DeviceSession>>();
  private readonly queuesOf = new Map<DeviceSession, readonly string[]>();

  add(session: DeviceSession): void {
    this.remove(session);
    this.queuesOf.set(session, session.queues);
    for (const queue of session.queues) {
      let set = this.byQueue.get(queue);
      if (!set) {
        set = new Set();
        this.byQueue.set(queue, set);
      }
      set.add(session);
    }
  }

  remove(session: DeviceSession): void {
    for (const queue of this.queuesOf.get(session) ?? []) {
      const set = this.byQueue.get(queue);
      set?.delete(session);
      if (set?.size === 0) {
        this.byQueue.delete(queue);
      }
    }
    this.queuesOf.delete(session);
  }

  clear(): void {
    this.byQueue.clear();
    this.queuesOf.clear();
  }

  has(session: DeviceSession): boolean {
    return this.queuesOf.has(session);
  }

  /** The device idle longest for the queue that `accept`s (all by default). */
  first(queue: string, accept: (session: DeviceSession) => boolean = () => true): DeviceSession | undefined {
    for (const session of this.byQueue.get(queue) ?? []) {
      if (accept(session)) {
        return session;
      }
    }
    return undefined;
  }

  /** Queues with at least one idle device here. */
  queues(): IterableIterator<string> {
    return this.byQueue.keys();
  }

  get size(): number {
    return this.queuesOf.size;
  }
}
