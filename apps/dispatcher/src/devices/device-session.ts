import type { Socket } from 'socket.io';
import { NETWORK_POOL, queueName } from '@app/common';
import type { DeviceSocketData, DeviceToServerEvents, Feature, ServerToDeviceEvents } from '@app/common';
import { AnnounceRate } from './announce-rate';

export type DeviceSocket = Socket<DeviceToServerEvents, ServerToDeviceEvents, Record<string, never>, DeviceSocketData>;

/**
 * A connected, authenticated device: what it is and what it said it serves. Facts about the
 * connection only; what the device is working on belongs to the dispatch module.
 */
export class DeviceSession {
  /** The models the device last announced, whether or not it may serve them all. */
  announcedModels: readonly string[] = [];
  /** The models the device announced and may serve, and their queues (in the same order). */
  private served: { models: string[]; queues: string[] } = { models: [], queues: [] };
  features: ReadonlySet<Feature> = new Set();
  /** The device says its runtime can take tasks. */
  available = false;
  /** It has announced itself at least once. */
  announced = false;
  /** Invalid, foreign or over-budget events in the current window, and when the window began. */
  invalidEvents = 0;
  firstStrikeAt = 0;
  /** Disconnected for its misdeeds (DeviceStrikes): counted once, however many more arrive before the close. */
  struckOut = false;
  /** Its allowance of announces. */
  readonly announces = new AnnounceRate();

  constructor(readonly socket: DeviceSocket) {}

  get id(): string {
    return this.socket.data.deviceId;
  }

  /** `network`, or the id of the organization that owns the device. */
  get pool(): string {
    return this.socket.data.orgId ?? NETWORK_POOL;
  }

  get models(): readonly string[] {
    return this.served.models;
  }

  /** The queues the device takes jobs from. */
  get queues(): readonly string[] {
    return this.served.queues;
  }

  serve(models: readonly string[], features: readonly Feature[], available: boolean): void {
    this.served = { models: [...models], queues: models.map((m) => queueName(m, this.pool)) };
    this.features = new Set(features);
    this.available = available;
    this.announced = true;
  }

  supports(required: readonly Feature[]): boolean {
    return required.every((f) => this.features.has(f));
  }

  /** Ready to be given tasks (whether it has one is the dispatch module's business). */
  get ready(): boolean {
    return this.announced && this.available && this.socket.connected;
  }
}
