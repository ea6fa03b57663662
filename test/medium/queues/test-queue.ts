import { randomUUID } from 'node:crypto';
import type { Job } from 'bullmq';
import { CHAT_JOB, LineQueue, chatJobOptions } from '@app/common';
import type { JobData, FairShare, RedisClient } from '@app/common';
import { uniq } from '../../support/stack';

/**
 * One queue of a test's own (a fresh model name) with its organizations' lines, driven as the api and
 * the dispatchers drive them: a job is added to its line and the line enqueued (the api); a device takes
 * from the line whose turn it is (pick, then take), or from a line it was told of (take, then charge);
 * a job that goes back to the head of its line is refunded. Organizations are short names without dots;
 * lines with equal passes are picked in the order of their names (Redis orders equal scores so).
 */
export class TestQueue {
  readonly queue = `chat.network.${uniq('fair')}`;
  private readonly lines = new Map<string, LineQueue>();
  private tokens = 0;

  constructor(
    private readonly redis: RedisClient,
    readonly fair: FairShare,
  ) {}

  line(org: string): string {
    return `${this.queue}.${org}`;
  }

  private lineQueue(org: string): LineQueue {
    let line = this.lines.get(org);
    if (!line) {
      line = new LineQueue(this.line(org), this.redis, 60_000);
      this.lines.set(org, line);
    }
    return line;
  }

  /** Adds `n` jobs to the organization's line at this weight; their ids, oldest first. */
  async add(org: string, weight: number, n = 1): Promise<string[]> {
    const ids = Array.from({ length: n }, () => randomUUID());
    for (const id of ids) {
      const data = { v: 2, taskId: id, taskAddress: `network:${id}`, orgId: org } as unknown as JobData;
      await this.lineQueue(org).add(CHAT_JOB, data, chatJobOptions(id));
      await this.fair.enqueue(this.line(org), weight);
    }
    return ids;
  }

  /**
   * Adds `n` jobs to the organization's line in one write and enqueues the line once: a backlog that
   * stands before the first pick (enqueueing a line that already has its turn changes nothing but
   * its weight).
   */
  async backlog(org: string, weight: number, n: number): Promise<void> {
    const ids = Array.from({ length: n }, () => randomUUID());
    await this.lineQueue(org).addBulk(
      ids.map((id) => ({
        name: CHAT_JOB,
        data: { v: 2, taskId: id, taskAddress: `network:${id}`, orgId: org } as unknown as JobData,
        opts: chatJobOptions(id),
      })),
    );
    await this.fair.enqueue(this.line(org), weight);
  }

  /**
   * A device asks for the queue's next job: the organization it came from, or null when the pick found
   * none. `fair` is the picking dispatcher's (each remembers the lines its last pick of a queue saw).
   */
  async next(fair = this.fair): Promise<{ org: string; job: Job<JobData>; token: string } | null> {
    const line = await fair.pick(this.queue);
    if (line === null) {
      return null;
    }
    const org = line.slice(this.queue.length + 1);
    const token = `t:${++this.tokens}`;
    const job = await this.lineQueue(org).take(token);
    if (!job) {
      throw new Error(`the pick chose ${org}, whose line had no job`);
    }
    return { org, job, token };
  }

  /**
   * The organizations of the next `n` takes (null for a pick that found nothing), each picked by
   * `fair(i)` (default: this queue's FairShare).
   */
  async serve(n: number, fair: (i: number) => FairShare = () => this.fair): Promise<(string | null)[]> {
    const orgs: (string | null)[] = [];
    for (let i = 0; i < n; i++) {
      orgs.push((await this.next(fair(i)))?.org ?? null);
    }
    return orgs;
  }

  /** A waiting job goes away without a take (its client left). */
  async remove(org: string, id: string): Promise<void> {
    const job = await this.lineQueue(org).getJob(id);
    if (!job) {
      throw new Error(`no job ${id} in ${org}'s line`);
    }
    await job.remove();
  }

  /** Takes the oldest job of the organization's line, with neither a pick nor a charge. */
  async take(org: string): Promise<Job<JobData> | undefined> {
    return this.lineQueue(org).take(`t:${++this.tokens}`);
  }

  /**
   * A device that was idle when the job came takes it without a pick; the line's turn is charged (by
   * `fair`, the taking dispatcher's).
   */
  async takeFrom(org: string, fair = this.fair): Promise<{ job: Job<JobData>; token: string; backlog: boolean }> {
    const token = `t:${++this.tokens}`;
    const job = await this.lineQueue(org).take(token);
    if (!job) {
      throw new Error(`${org}'s line had no job`);
    }
    return { job, token, backlog: await fair.charge(this.line(org)) };
  }

  /** A taken job goes back to the head of its line (no output reached its client). */
  async putBack(taken: { job: Job<JobData>; token: string }): Promise<void> {
    await taken.job.moveToWait(taken.token);
    await this.fair.refund(taken.job.queueName);
  }

  /** Whether the dispatchers' safety sweep would look at this queue. */
  async backlogged(): Promise<boolean> {
    return (await this.fair.backlogged()).includes(this.queue);
  }

  async close(): Promise<void> {
    const lines = [...this.lines.values()];
    await Promise.all(lines.map((line) => line.obliterate({ force: true })));
    // The lines are empty: picks drop them, and the queue leaves the backlog.
    while ((await this.fair.pick(this.queue)) !== null) {
      // (nothing waits any more; each pick drops up to 32 empty lines)
    }
    await Promise.all(lines.map((line) => line.close()));
  }
}
