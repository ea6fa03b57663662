import { keepAliveAgent, postJson } from '../lib/client';
import type { Ctx, ScenarioResult, Stack, TargetCheck } from '../lib/context';
import { Fleet } from '../lib/fleet';
import { mdTable, num } from '../lib/format';
import { recordsWritten, sleep, waitOnline } from '../lib/stack';
import { percentile } from '../lib/stats';

const MODEL = 'bench-fairness';
const DEVICES = 2;
/** Each answer holds its device this long: 20 ms to the first token, then 4 tokens at once. */
const SIM_ARGS = ['--sim-ttft-ms', '20', '--sim-tokens-per-second', '0', '--sim-tokens', '4'];
const BURST = 200;
const LATE = 10;
/** The tolerance on each org's share of assignments while both have a backlog. */
const SHARE_TOLERANCE = 0.1;

interface Row {
  org: string;
  queuedAt: Date;
  assignedAt: Date | null;
}

/**
 * Issue 18: a mixed burst on one model served by two network devices. Org `light` (weight 1) sends
 * 200 requests at once, org `heavy` (weight 3) 200 right after, and 1 s later org `late` (weight 1)
 * sends 10. Reports each org's share of assignments while both bursts had a backlog, each org's wait
 * (queued → assigned) percentiles, and, for a short queue, the wait of lone requests on idle devices
 * (the path to the first token pays for the fair share only inside the enqueue pipeline and the take).
 */
export async function fairnessScenario(ctx: Ctx, stack: Stack): Promise<ScenarioResult> {
  const orgs = {
    light: await ctx.fixtures.org('light', 1, MODEL),
    heavy: await ctx.fixtures.org('heavy', 3, MODEL),
    late: await ctx.fixtures.org('late', 1, MODEL),
  };
  const tokens = await ctx.fixtures.devices(DEVICES, 'fairness');
  const fleet = Fleet.spawn('fairness-fleet');
  ctx.track(fleet.proc);
  try {
    const started = fleet.next('started');
    fleet.send({
      type: 'start',
      mode: 'agents',
      server: stack.dispatcher.url,
      tokens,
      args: ['--backend', 'sim', '--model', MODEL, '--log-level', 'warn', ...SIM_ARGS],
    });
    await started;
    await waitOnline(ctx.target.redisUrl, MODEL, DEVICES, { procs: [fleet.proc] });

    const agent = keepAliveAgent(1024);
    const url = new URL(`${stack.api.url}/v1/chat/completions`);
    const body = (content: string) =>
      JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 4 });
    const send = (key: string, content: string) =>
      postJson(url, { authorization: `Bearer ${key}` }, body(content), agent);

    // A short queue first: lone requests on idle devices, one after another.
    ctx.log('fairness: 50 lone requests on idle devices');
    for (let i = 0; i < 50; i++) {
      await send(orgs.light.key, `lone ${i}`);
    }
    await recordsWritten(ctx.target.redisUrl);
    const lone = await waits(ctx, orgs.light.orgId);

    ctx.log(`fairness: ${BURST} requests of light (weight 1), ${BURST} of heavy (weight 3), then ${LATE} of late`);
    const since = new Date();
    const pending = [
      ...Array.from({ length: BURST }, (_, i) => send(orgs.light.key, `light ${i}`)),
      ...Array.from({ length: BURST }, (_, i) => send(orgs.heavy.key, `heavy ${i}`)),
    ];
    await sleep(1_000);
    pending.push(...Array.from({ length: LATE }, (_, i) => send(orgs.late.key, `late ${i}`)));
    const answers = await Promise.all(pending);
    const failed = answers.filter((a) => a.status !== 200).length;
    await recordsWritten(ctx.target.redisUrl);

    const rows: Row[] = (
      await ctx.fixtures.db.task.findMany({
        where: { modelId: MODEL, queuedAt: { gte: since } },
        select: { orgId: true, queuedAt: true, assignedAt: true },
      })
    ).map((r) => ({
      org: Object.entries(orgs).find(([, o]) => o.orgId === r.orgId)?.[0] ?? '?',
      queuedAt: r.queuedAt,
      assignedAt: r.assignedAt,
    }));
    // Contested assignments: those made while both bursts had a request waiting (queued before, not
    // yet assigned). Requests reach the api over a few hundred ms, so the first ones face no contest.
    const assigned = rows.filter((r) => r.assignedAt).sort((a, b) => a.assignedAt!.getTime() - b.assignedAt!.getTime());
    const waitingAt = (org: string, t: number) =>
      rows.some((r) => r.org === org && r.queuedAt.getTime() <= t && (r.assignedAt?.getTime() ?? Infinity) > t);
    const contested = assigned
      .filter((r) => r.org !== 'late')
      .filter((r) => {
        const t = r.assignedAt!.getTime() - 1;
        return waitingAt('light', t) && waitingAt('heavy', t);
      })
      .map((r) => r.org);
    const share = (org: string) => contested.filter((o) => o === org).length / Math.max(1, contested.length);
    const waitOf = (org: string) =>
      rows.filter((r) => r.org === org && r.assignedAt).map((r) => r.assignedAt!.getTime() - r.queuedAt.getTime());
    const serviceMs = percentile(lone.service, 50);

    const table = mdTable(
      ['org', 'weight', 'requests', 'share while both bursts waited', 'expected', 'wait p50/p95/p99 (ms)'],
      (['light', 'heavy', 'late'] as const).map((org) => {
        const w = waitOf(org);
        const weight = org === 'heavy' ? 3 : 1;
        return [
          org,
          String(weight),
          String(org === 'late' ? LATE : BURST),
          org === 'late' ? '–' : num(share(org), 3),
          org === 'late' ? '–' : num(weight / 4, 3),
          `${num(percentile(w, 50), 0)} / ${num(percentile(w, 95), 0)} / ${num(percentile(w, 99), 0)}`,
        ];
      }),
      ['l', 'r', 'r', 'r', 'r', 'r'],
    );
    const lightShare = share('light');
    const lateFirst = Math.min(...waitOf('late'));
    const targets: TargetCheck[] = [
      {
        target: 'Fairness: light share of assignments (weights 1:3, both backlogged)',
        goal: `0.25 ± ${SHARE_TOLERANCE * 100} %`,
        measured: num(lightShare, 3),
        pass: Math.abs(lightShare - 0.25) <= 0.25 * SHARE_TOLERANCE,
      },
      {
        target: "Fairness: the late org's first request waits a few service times, not the burst",
        goal: `≤ 5 × service time (${num(serviceMs, 0)} ms)`,
        measured: `${num(lateFirst, 0)} ms`,
        pass: lateFirst <= 5 * Math.max(serviceMs, 1),
      },
    ];
    return {
      name: 'fairness',
      title: 'Fair share across organizations (one model, two network devices)',
      table: [
        table,
        '',
        `Lone requests on idle devices (a short queue): queued → assigned p50 ${num(percentile(lone.wait, 50), 1)} ms, p99 ${num(percentile(lone.wait, 99), 1)} ms; service time p50 ${num(serviceMs, 0)} ms.`,
      ].join('\n'),
      notes: [
        `Sim devices: ${SIM_ARGS.join(' ')}; ${failed} of ${answers.length} burst requests failed.`,
        `Share = the org's assignments / light's and heavy's, counted over the ${contested.length} assignments made while both had requests waiting; waits are assigned_at − queued_at from the task records. The late org's later requests wait for its turns: with weights 1+3+1, it gets a fifth of the devices' rate.`,
      ],
      targets,
      data: {
        shares: { light: lightShare, heavy: share('heavy'), contested: contested.length },
        lateFirstWaitMs: lateFirst,
        waits: Object.fromEntries(
          ['light', 'heavy', 'late'].map((org) => {
            const w = waitOf(org);
            return [org, { p50: percentile(w, 50), p95: percentile(w, 95), p99: percentile(w, 99) }];
          }),
        ),
        lone: { waitP50: percentile(lone.wait, 50), waitP99: percentile(lone.wait, 99), serviceP50: serviceMs },
        failed,
      },
    };
  } finally {
    await fleet.stop();
  }
}

/** The waits (queued → assigned) and device times (assigned → finished) of an org's tasks so far, in ms. */
async function waits(ctx: Ctx, orgId: string): Promise<{ wait: number[]; service: number[] }> {
  const rows = await ctx.fixtures.db.task.findMany({
    where: { orgId, modelId: MODEL, assignedAt: { not: null }, finishedAt: { not: null } },
    select: { queuedAt: true, assignedAt: true, finishedAt: true },
  });
  return {
    wait: rows.map((r) => r.assignedAt!.getTime() - r.queuedAt.getTime()),
    service: rows.map((r) => r.finishedAt!.getTime() - r.assignedAt!.getTime()),
  };
}
