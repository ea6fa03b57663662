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
  /** The queue of each model, in the order of `models` (the names are computed once, on announce). */
  private queueList: string[] = [];
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

  /** Sets the models the device serves; returns the queues it takes jobs from. */
  serve(models: readonly string[]): string[] {
    this.models = new Set(models);
    this.queueList = [...this.models].map((m) => queueName(m, this.pool));
    return this.queueList;
  }

  /** Whether the device looks past a queue for now (it drew a job there it could not serve). */
  skips(queue: string): boolean {
    const until = this.skipped.get(queue);
    if (until === undefined) {
      return false;
    }
    if (until <= Date.now()) {
      this.skipped.delete(queue);
      return false;
    }
    return true;
  }

  /** The queues this device takes jobs from, starting at a rotating position. */
  queues(): string[] {
    const all = this.skipped.size === 0 ? this.queueList : this.queueList.filter((q) => !this.skips(q));
    if (all.length === 0) {
      return all;
    }
    const start = this.rotation++ % all.length;
    return [...all.slice(start), ...all.slice(0, start)];
  }
}
