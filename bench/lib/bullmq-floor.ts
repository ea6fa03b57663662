import { randomUUID } from 'node:crypto';
import { Job } from 'bullmq';
import { CHAT_JOB, LineQueue, NETWORK_POOL, chatJobOptions, createRedis, lineName, queueName } from '@app/common';
import type { ChatJobData } from '@app/common';
import { cpuMs } from './procfs';
import { callsDelta, redisCommandCalls, redisPid } from './services';

/** Jobs in flight at once, as under load: Redis answers them in fewer wake-ups than one at a time. */
const CONCURRENCY = 16;

/** What BullMQ's own scripts cost Redis per job, when nothing else is done with it. */
export interface BullmqFloor {
  /** Commands per job (server-wide INFO commandstats), the calls inside BullMQ's scripts included. */
  total: number;
  calls: [string, number][];
  /** redis-server CPU ms per job, CONCURRENCY jobs at a time (null when its process is not this machine's). */
  redisCpuMs: number | null;
}

/**
 * The Redis commands of a job's life in BullMQ alone, the way Switchyard's api and dispatcher drive
 * it (the same job options and the same three scripts: add, moveToActive as Worker.getNextJob runs it,
 * moveToFinished with removeOnComplete), CONCURRENCY at a time on one line. Switchyard keeps its queues in
 * BullMQ, so no completion costs Redis fewer commands than this: the floor of the design for the
 * per-completion count, measured in the same run as the relay's.
 */
export async function measureBullmqFloor(redisUrl: string, jobs: number): Promise<BullmqFloor> {
  const redis = createRedis(redisUrl);
  const queue = new LineQueue(lineName(queueName('bench-bullmq-floor', NETWORK_POOL), 'bench'), redis, 60_000);
  const token = randomUUID();
  const data: ChatJobData = {
    v: 2,
    taskId: '',
    taskAddress: '',
    orgId: 'bench',
    model: 'bench-bullmq-floor',
    pool: NETWORK_POOL,
    params: { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 },
    requires: [],
    apiInstance: 'bench',
    requestId: 'bench',
  };
  const once = async () => {
    const id = randomUUID();
    const client = await queue.client;
    await new Job<ChatJobData>(queue, CHAT_JOB, { ...data, taskId: id }, chatJobOptions(id), id).addJob(client);
    const job = await queue.take(token);
    if (!job) {
      throw new Error('bench: the BullMQ floor found no job in its line');
    }
    await job.moveToCompleted('done', token, false);
  };
  try {
    await once();
    const pid = await redisPid(redisUrl);
    const before = await redisCommandCalls(redisUrl);
    const cpuBefore = pid === null ? null : cpuMs(pid);
    let left = jobs;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (left > 0) {
          left--;
          await once();
        }
      }),
    );
    const cpuAfter = pid === null ? null : cpuMs(pid);
    const calls = callsDelta(before, await redisCommandCalls(redisUrl)).map(([cmd, n]): [string, number] => [
      cmd,
      n / jobs,
    ]);
    return {
      total: calls.reduce((a, [, n]) => a + n, 0),
      calls,
      redisCpuMs: cpuBefore === null || cpuAfter === null ? null : (cpuAfter - cpuBefore) / jobs,
    };
  } finally {
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    redis.disconnect();
  }
}
