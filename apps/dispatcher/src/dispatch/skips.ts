import type { DeviceSession } from '../devices/device-session';

/** Queues a device looks past for a while (it drew a job it cannot serve, refused one, or did not answer). */
export class Skips {
  private readonly until = new WeakMap<DeviceSession, Map<string, number>>();

  skipping(session: DeviceSession, queue: string): boolean {
    const until = this.until.get(session)?.get(queue);
    return until !== undefined && until > Date.now();
  }

  skip(session: DeviceSession, queue: string, ms: number): void {
    let map = this.until.get(session);
    if (!map) {
      map = new Map();
      this.until.set(session, map);
    }
    map.set(queue, Date.now() + ms);
  }
}
