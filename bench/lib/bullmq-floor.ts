import { randomUUID } from 'node:crypto';
import { Job } from 'bullmq';
import { CHAT_JOB, LineQueue, NETWORK_POOL, chatJobOptions, createRedis, lineName, queueName } from '@app/common';
import type { ChatJobData } from '@app/common';
import { callsDelta, redisCommandCalls } from './services';

/** What BullMQ's own scripts cost Redis per job, when nothing else is done with it. */
export interface BullmqFloor {
  /** Commands per job (server-wide INFO commandstats), the calls inside BullMQ's scripts included. */
  total: number;
  calls: [string, number][];
}

/**
 * The Redis commands of a job's life in BullMQ alone, the way Switchyard's api and dispatcher drive
 * it (the same job options and the same three scripts: add, moveToActive as Worker.getNextJob runs it,
 * moveToFinished with removeOnComplete), one job at a time on one line. Switchyard keeps its queues in
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
    const before = await redisCommandCalls(redisUrl);
    for (let i = 0; i < jobs; i++) {
      await once();
    }
    const calls = callsDelta(before, await redisCommandCalls(redisUrl)).map(([cmd, n]): [string, number] => [
      cmd,
      n / jobs,
    ]);
    return { total: calls.reduce((a, [, n]) => a + n, 0), calls };
  } finally {
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close();
    redis.disconnect();
  }
}
