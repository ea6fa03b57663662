import type { Hash } from 'node:crypto';
import type { Job } from 'bullmq';
import type { Socket } from 'socket.io';
import { NETWORK_POOL, queueName } from '@app/common';
import type { TaskWriter } from '../relay/task-stream.service';
import type { ChatJobData, DeviceSocketData, DeviceToServerEvents, Feature, ServerToDeviceEvents } from '@app/common';

export type DeviceSocket = Socket<DeviceToServerEvents, ServerToDeviceEvents, Record<string, never>, DeviceSocketData>;

/** A task a device is working on, as this dispatcher tracks it. */
export interface ActiveTask {
  taskId: string;
  address: string;
  job: Job<ChatJobData>;
  /** The BullMQ lock token of this assignment. */
  token: string;
  queue: string;
  attempt: number;
  /** Whether the device acknowledged the assignment. */
  accepted: boolean;
  /** Whether output was relayed to the api (the task can no longer move to another device). */
  firstTokenAt: Date | null;
  nextSeq: number;
  output: Hash;
  lockTimer: NodeJS.Timeout | null;
  ended: boolean;
  /** Its events to the api, in order. */
  writer: TaskWriter;
}

/** A connected, authenticated device. */
export class DeviceSession {
  models = new Set<string>();
  features = new Set<Feature>();
  /** The device says its runtime can take tasks. */
  available = false;
  /** It has announced itself at least once. */
  announced = false;
  task: ActiveTask | null = null;
  /** A fetch for this device is under way (at most one at a time). */
  fetching = false;
  /** Queues this device looks past until the given time (it drew a job there it cannot serve). */
  private readonly skipped = new Map<string, number>();

  skipQueue(queue: string, ms: number): void {
    this.skipped.set(queue, Date.now() + ms);
  }

  /** Rotates which of its queues a device asks first, so one busy model cannot starve the others. */
  private rotation = 0;

  constructor(readonly socket: DeviceSocket) {}

  get id(): string {
    return this.socket.data.deviceId;
  }

  /** `network`, or the id of the organization that owns the device. */
  get pool(): string {
    return this.socket.data.orgId ?? NETWORK_POOL;
  }

  get idle(): boolean {
    return this.announced && this.available && this.task === null && this.socket.connected;
  }

  supports(required: readonly Feature[]): boolean {
    return required.every((f) => this.features.has(f));
  }

  /** The queues this device takes jobs from, starting at a rotating position. */
  queues(): string[] {
    const now = Date.now();
    const all = [...this.models].map((m) => queueName(m, this.pool)).filter((q) => (this.skipped.get(q) ?? 0) <= now);
    if (all.length === 0) {
      return all;
    }
    const start = this.rotation++ % all.length;
    return [...all.slice(start), ...all.slice(0, start)];
  }
}
