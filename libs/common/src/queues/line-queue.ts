import { Job, Queue } from 'bullmq';
import type { RedisClient } from '../redis/redis';
import { KeySpace } from '../redis/key-space';
import { queueOfLine } from './queues';
import type { JobData } from './queues';

/**
 * One line (an organization's BullMQ queue within a (model, pool) queue), on a shared connection.
 *
 * A BullMQ Worker opens a blocking connection of its own, which for thousands of lines would be
 * thousands of Redis connections per dispatcher. A dispatcher never blocks on a line: it is told
 * when a line has work (Pub/Sub) and takes one job for one idle device. So the job is moved to active
 * with BullMQ's own script (the one Worker.getNextJob runs), on the connection every line shares; the
 * job's lock is the claim, and the job is finished with BullMQ's scripts as usual.
 */
export class LineQueue extends Queue<JobData> {
  constructor(name: string, connection: RedisClient, lockDurationMs: number) {
    // The queue's prefix: on a cluster it carries the queue's hash tag, so that BullMQ's keys of every
    // line of a queue share a slot with the queue's fair-share keys.
    super(name, { connection, prefix: KeySpace.of(connection).queuePrefix(queueOfLine(name)), skipVersionCheck: true });
    // moveToActive takes the lock duration from the queue's options, as it would from a worker's, and
    // the stalled check its interval and the number of times a job may stall before it is failed.
    Object.assign(this.opts, {
      lockDuration: lockDurationMs,
      stalledInterval: STALLED_INTERVAL_MS,
      maxStalledCount: 1,
    });
  }

  /** Takes the next waiting job for `token`, or undefined when the line is empty. */
  async take(token: string): Promise<Job<JobData> | undefined> {
    const [raw, id] = await this.scripts.moveToActive(await this.client, token, undefined);
    if (!raw || !id) {
      return undefined;
    }
    const job = Job.fromJSON<JobData>(this, raw, id);
    job.token = token;
    return job;
  }

  /**
   * BullMQ's stalled-job check, which a Worker would run: active jobs whose lock lapsed (taken by a
   * dispatcher that died before its claim, or whose finish failed) go back to wait, or, the second
   * time, are failed and removed with their request text. At most once per STALLED_INTERVAL_MS per
   * line, whoever calls it. Returns the ids of the jobs moved.
   */
  recoverStalled(): Promise<string[]> {
    return this.scripts.moveStalledJobsToWait();
  }
}

/** How often a line's stalled check may run (BullMQ's `stalled-check` key bounds it across processes). */
export const STALLED_INTERVAL_MS = 30_000;

/** How long a line nobody used stays open in a process. */
const IDLE_CLOSE_MS = 10 * 60_000;

/**
 * The lines a process has used, opened on demand on one shared connection and closed when idle: the
 * Redis connections of a process never grow with the number of lines.
 */
export class LineQueues {
  private readonly open = new Map<string, { queue: LineQueue; usedAt: number }>();
  private sweeper: NodeJS.Timeout | null = null;

  constructor(
    private readonly connection: RedisClient,
    private readonly lockDurationMs: number,
    private readonly onError: (err: Error) => void,
  ) {}

  get(line: string): LineQueue {
    const now = Date.now();
    let entry = this.open.get(line);
    if (!entry) {
      const queue = new LineQueue(line, this.connection, this.lockDurationMs);
      queue.on('error', this.onError);
      entry = { queue, usedAt: now };
      this.open.set(line, entry);
      this.sweeper ??= setInterval(() => this.closeIdle(), IDLE_CLOSE_MS / 2);
      this.sweeper.unref();
    }
    entry.usedAt = now;
    return entry.queue;
  }

  private closeIdle(): void {
    const before = Date.now() - IDLE_CLOSE_MS;
    for (const [line, entry] of this.open) {
      if (entry.usedAt < before) {
        this.open.delete(line);
        entry.queue.close().catch(this.onError);
      }
    }
  }

  get size(): number {
    return this.open.size;
  }

  async close(): Promise<void> {
    if (this.sweeper) {
      clearInterval(this.sweeper);
    }
    const queues = [...this.open.values()].map((e) => e.queue);
    this.open.clear();
    await Promise.all(queues.map((q) => q.close()));
  }
}
