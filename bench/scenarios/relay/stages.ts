import { performance } from 'node:perf_hooks';
import type { StreamResult } from '../../lib/client';
import type { Ctx } from '../../lib/context';
import { summarize } from '../../lib/stats';
import type { Summary } from '../../lib/stats';
import type { UpstreamTimings } from './direct';

/** The stages of a relayed request's time to first token, in order. */
export const STAGES = ['intake', 'queue', 'dispatch', 'upstream', 'device', 'return'] as const;
/** One stage of the time to first token. */
export type Stage = (typeof STAGES)[number];
/** Each stage as the tables name it: from which mark to which. */
export const STAGE_TITLES: Record<Stage, string> = {
  intake: 'sent → queued_at',
  queue: 'queued_at → assigned_at',
  dispatch: 'assigned_at → at upstream',
  upstream: 'upstream TTFT',
  device: 'first token → dispatcher',
  return: 'dispatcher → client',
};

/**
 * Splits each relayed request's time to first token into stages, from the client's clock, the task
 * row's timestamps and the upstream's record of when the request arrived and its first token left.
 */
export async function ttftStages(
  ctx: Ctx,
  atUpstream: UpstreamTimings,
  marked: Map<string, StreamResult>,
): Promise<Record<Stage, Summary>> {
  const addresses = [...marked.values()].map((r) => r.taskAddress).filter((a): a is string => a !== undefined);
  const rows = addresses.length
    ? await ctx.fixtures.db.$queryRaw<{ address: string; q: number; a: number | null; f: number | null }[]>`
        SELECT address,
               (extract(epoch from queued_at) * 1000)::float8 AS q,
               (extract(epoch from assigned_at) * 1000)::float8 AS a,
               (extract(epoch from first_token_at) * 1000)::float8 AS f
        FROM tasks WHERE address = ANY(${addresses})`
    : [];
  const byAddress = new Map(rows.map((r) => [r.address, r]));
  const samples: Record<Stage, number[]> = {
    intake: [],
    queue: [],
    dispatch: [],
    upstream: [],
    device: [],
    return: [],
  };
  const epoch = (t: number) => performance.timeOrigin + t;
  for (const [marker, result] of marked) {
    const row = result.taskAddress ? byAddress.get(result.taskAddress) : undefined;
    const up = atUpstream.get(marker);
    if (!row || row.a === null || row.f === null || !up || result.contentAt.length === 0) {
      continue;
    }
    samples.intake.push(row.q - epoch(result.sentAt));
    samples.queue.push(row.a - row.q);
    samples.dispatch.push(up[0] - row.a);
    samples.upstream.push(up[1] - up[0]);
    samples.device.push(row.f - up[1]);
    samples.return.push(epoch(result.contentAt[0]) - row.f);
  }
  return Object.fromEntries(STAGES.map((s) => [s, summarize(samples[s])])) as Record<Stage, Summary>;
}
