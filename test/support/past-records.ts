import { randomUUID } from 'node:crypto';

const DAY = 86_400_000;

/**
 * Task records written straight to Postgres, as an old month would hold them (the retention suites): `n`
 * network chat records of `orgId` and `modelId` queued from `from` on, over `days` days, with token
 * counts that vary; `streaming` ones have not ended.
 */
export function pastRecords(
  owner: { orgId: string; modelId: string },
  n: number,
  from: number,
  status: 'completed' | 'failed' | 'streaming',
  days: number,
) {
  return Array.from({ length: n }, (_, i) => {
    const id = randomUUID();
    const queuedAt = new Date(from + (i % days) * DAY + i * 1000);
    return {
      id,
      address: `network:${id}`,
      ...owner,
      mode: 'network' as const,
      api: 'openai' as const,
      stream: false,
      status,
      promptTokens: 10 + (i % 7),
      completionTokens: 20 + (i % 5),
      queuedAt,
      firstTokenAt: status === 'completed' ? new Date(queuedAt.getTime() + 100 + i) : null,
      finishedAt: status === 'streaming' ? null : new Date(queuedAt.getTime() + 900 + i),
    };
  });
}
