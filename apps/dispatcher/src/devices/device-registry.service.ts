import { Injectable } from '@nestjs/common';
import type { DeviceSession } from './device-session';

/** The devices connected to this dispatcher instance. */
@Injectable()
export class DeviceRegistry {
  private readonly byId = new Map<string, DeviceSession>();

  get(deviceId: string): DeviceSession | undefined {
    return this.byId.get(deviceId);
  }

  /** Adds a session; returns the one it replaces (the same device connected twice). */
  add(session: DeviceSession): DeviceSession | undefined {
    const previous = this.byId.get(session.id);
    this.byId.set(session.id, session);
    return previous;
  }

  remove(session: DeviceSession): void {
    if (this.byId.get(session.id) === session) {
      this.byId.delete(session.id);
    }
  }

  all(): IterableIterator<DeviceSession> {
    return this.byId.values();
  }

  get size(): number {
    return this.byId.size;
  }

  /** Idle devices that take jobs from a queue. */
  idleFor(queue: string): DeviceSession[] {
    return [...this.byId.values()].filter((d) => d.idle && d.queues().includes(queue));
  }

  findTask(taskId: string): DeviceSession | undefined {
    for (const session of this.byId.values()) {
      if (session.task?.taskId === taskId) {
        return session;
      }
    }
    return undefined;
  }
}
