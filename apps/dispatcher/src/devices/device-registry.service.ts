import { Injectable } from '@nestjs/common';
import type { DeviceListener } from './device-listener';
import type { DeviceSession } from './device-session';

/** The devices connected to this dispatcher instance, by id, and the one listener of their events. */
@Injectable()
export class DeviceRegistry {
  private readonly byId = new Map<string, DeviceSession>();
  private listener: DeviceListener | null = null;

  /** The dispatch module registers itself at start. */
  listen(listener: DeviceListener): void {
    this.listener = listener;
  }

  get events(): DeviceListener {
    if (!this.listener) {
      throw new Error('no device listener registered');
    }
    return this.listener;
  }

  get(deviceId: string): DeviceSession | undefined {
    return this.byId.get(deviceId);
  }

  /** Adds a session; returns the one it replaces (the same device connected twice). */
  add(session: DeviceSession): DeviceSession | undefined {
    const previous = this.byId.get(session.id);
    this.byId.set(session.id, session);
    return previous;
  }

  /** Removes a session; false when it was already replaced or removed. */
  remove(session: DeviceSession): boolean {
    if (this.byId.get(session.id) !== session) {
      return false;
    }
    this.byId.delete(session.id);
    return true;
  }

  all(): IterableIterator<DeviceSession> {
    return this.byId.values();
  }

  get size(): number {
    return this.byId.size;
  }
}
