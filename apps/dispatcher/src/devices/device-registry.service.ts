import { Injectable } from '@nestjs/common';
import type { DeviceSession } from './device-session';

/**
 * The devices connected to this dispatcher instance, indexed by id, by the queues they take jobs
 * from, and by the task they hold: the lookups on the path of every job are not scans.
 */
@Injectable()
export class DeviceRegistry {
  private readonly byId = new Map<string, DeviceSession>();
  private readonly byQueue = new Map<string, Set<DeviceSession>>();
  private readonly queuesOf = new Map<DeviceSession, readonly string[]>();
  private readonly byTask = new Map<string, DeviceSession>();
  /** Where the next offer for a queue starts looking, so that offers go round its devices. */
  private readonly cursor = new Map<string, number>();

  get(deviceId: string): DeviceSession | undefined {
    return this.byId.get(deviceId);
  }

  /** Adds a session; returns the one it replaces (the same device connected twice). */
  add(session: DeviceSession): DeviceSession | undefined {
    const previous = this.byId.get(session.id);
    this.byId.set(session.id, session);
    return previous;
  }

  /** Records the queues a session takes jobs from (on each announce). */
  setQueues(session: DeviceSession, queues: readonly string[]): void {
    this.unindex(session);
    if (this.byId.get(session.id) !== session) {
      return;
    }
    this.queuesOf.set(session, queues);
    for (const queue of queues) {
      let set = this.byQueue.get(queue);
      if (!set) {
        set = new Set();
        this.byQueue.set(queue, set);
      }
      set.add(session);
    }
  }

  remove(session: DeviceSession): void {
    this.unindex(session);
    if (this.byId.get(session.id) === session) {
      this.byId.delete(session.id);
    }
  }

  private unindex(session: DeviceSession): void {
    for (const queue of this.queuesOf.get(session) ?? []) {
      const set = this.byQueue.get(queue);
      set?.delete(session);
      if (set?.size === 0) {
        this.byQueue.delete(queue);
        this.cursor.delete(queue);
      }
    }
    this.queuesOf.delete(session);
  }

  all(): IterableIterator<DeviceSession> {
    return this.byId.values();
  }

  get size(): number {
    return this.byId.size;
  }

  /** The queues some device here takes jobs from. */
  queues(): IterableIterator<string> {
    return this.byQueue.keys();
  }

  /** Idle devices that take jobs from a queue (and do not look past it for now). */
  idleFor(queue: string): DeviceSession[] {
    return [...(this.byQueue.get(queue) ?? [])].filter((d) => d.idle && !d.skips(queue));
  }

  /** One idle device of the queue that is not already looking for a job, taken in turn. */
  nextIdle(queue: string): DeviceSession | undefined {
    const set = this.byQueue.get(queue);
    if (!set || set.size === 0) {
      return undefined;
    }
    const devices = [...set];
    const start = (this.cursor.get(queue) ?? 0) % devices.length;
    for (let i = 0; i < devices.length; i++) {
      const device = devices[(start + i) % devices.length];
      if (device.idle && !device.fetching && !device.skips(queue)) {
        this.cursor.set(queue, start + i + 1);
        return device;
      }
    }
    return undefined;
  }

  /** Notes which device holds a task (null: none any more). */
  holdTask(taskId: string, session: DeviceSession | null): void {
    if (session) {
      this.byTask.set(taskId, session);
    } else {
      this.byTask.delete(taskId);
    }
  }

  findTask(taskId: string): DeviceSession | undefined {
    const session = this.byTask.get(taskId);
    return session?.task?.taskId === taskId ? session : undefined;
  }
}
