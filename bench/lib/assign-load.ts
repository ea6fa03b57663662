import type http from 'node:http';
import { performance } from 'node:perf_hooks';
import type { PrismaClient } from '@app/common';
import { postJson } from './client';
import { openLoop } from './load';
import { recordsWritten } from './stack';
import type { OpenLoopResult } from './load';

/** Epoch milliseconds with sub-millisecond precision, comparable across processes of this machine. */
const epochMs = () => performance.timeOrigin + performance.now();

/** The n-th request of a load: whose key, which model. */
export type ChatRequestOf = (n: number) => { headers: Record<string, string>; body: string };

/**
 * Open-loop chat requests whose assignments to probe devices are timed (fan-in, queues): each answered
 * request's task address and the moment it was sent, each whole answer's latency from the moment it
 * was due, the failures.
 */
export class AssignLoad {
  /** Task address → when its request was sent (epoch ms), for the recorded runs. */
  readonly sent = new Map<string, number>();
  /** Whole answers, ms from the moment each request was due; unfinished ones added by close(). */
  readonly latencies: number[] = [];
  errors = 0;
  firstError?: string;
  private closed = false;
  private n = 0;

  constructor(
    private readonly url: URL,
    private readonly agent: http.Agent,
    private readonly request: ChatRequestOf,
  ) {}

  /** `record` false: a warm-up, nothing kept. */
  run(rate: number, durationMs: number, record: boolean): Promise<OpenLoopResult> {
    return openLoop({
      rate,
      durationMs,
      maxInFlight: 5_000,
      fire: async (dueAt) => {
        const { headers, body } = this.request(this.n++);
        const sentAt = epochMs();
        const r = await postJson(this.url, headers, body, this.agent);
        if (!record || this.closed) {
          return;
        }
        if (r.status === 200) {
          this.latencies.push(r.endAt - dueAt);
          const address = (JSON.parse(r.body) as { task_address?: string }).task_address;
          if (address) {
            this.sent.set(address, sentAt);
          }
        } else {
          this.errors++;
          this.firstError ??= r.error ?? `HTTP ${r.status}: ${r.body.slice(0, 200)}`;
        }
      },
    });
  }

  /** The end of the measured run: answers after this are not counted; the unfinished count as waiting until now. */
  close(run: OpenLoopResult): number {
    this.closed = true;
    const completed = this.latencies.length;
    const now = performance.now();
    this.latencies.push(...run.unfinished.map((due) => now - due));
    return completed;
  }

  /**
   * Enqueue → task:assign (the task row's queued_at, written just before the job is enqueued, to the
   * device's clock, on the same machine) and request sent → task:assign, per answered task the
   * devices saw assigned. Waits for the task records to be in Postgres first.
   */
  async assignTimes(
    db: PrismaClient,
    redisUrl: string,
    assigns: Map<string, number>,
  ): Promise<{ enqueueToAssign: number[]; requestToAssign: number[] }> {
    await recordsWritten(redisUrl);
    const addresses = [...this.sent.keys()];
    const rows = addresses.length
      ? await db.$queryRaw<{ address: string; queued: number }[]>`
          SELECT address, (extract(epoch from queued_at) * 1000)::float8 AS queued FROM tasks WHERE address = ANY(${addresses})`
      : [];
    const enqueueToAssign: number[] = [];
    const requestToAssign: number[] = [];
    for (const row of rows) {
      const at = assigns.get(row.address);
      if (at !== undefined) {
        enqueueToAssign.push(at - row.queued);
        requestToAssign.push(at - (this.sent.get(row.address) ?? at));
      }
    }
    return { enqueueToAssign, requestToAssign };
  }
}
