import { AdminService, budgetMonth, createRedis, keys } from '@app/common';
import { keepAliveAgent } from '../lib/client';
import type { Ctx, ScenarioResult, Stack, TargetCheck } from '../lib/context';
import { Fleet } from '../lib/fleet';
import { mdTable, num, signed } from '../lib/format';
import { ZERO_TIME_SIM_ARGS, completionWindow, failedIn, legTotals, legTotalsData } from '../lib/completion-window';
import type { LegTotals, MeasuredWindow } from '../lib/completion-window';
import { cpuDelta, machineCpuMs, sampleCpu } from '../lib/procfs';
import type { CpuGroup } from '../lib/procfs';
import { callsDelta, redisCommandCalls, redisPid } from '../lib/services';
import { recordsWritten, sleep, waitOnline } from '../lib/stack';
import { median, rounded, summarize } from '../lib/stats';

/**
 * Issue 39: what monthly token budgets cost on the request path. Two organizations on the same model and
 * the same idle sim devices as the throughput scenario: A without budgets, B with an org budget and a key
 * budget far above what the run uses (nothing is refused). At one offered load, windows of A and of B
 * alternate for several rounds, so that the drift of a shared machine falls on both legs alike; the
 * difference between the legs is the budgets' cost: one MGET of both counters on admission and one script
 * (an INCRBY per budget) when a task ends (docs/architecture.md, "Budgets").
 */
const MODEL = 'bench-budgets';
/** B's budgets, org and key: far above what any run uses, so that every request is admitted. */
const BUDGET = 1_000_000_000_000;
/**
 * After a window's last answer, how long before its counters are read: the task records are written to
 * Postgres (Redis commands, api and dispatcher CPU) shortly after the answers, and belong to the window.
 */
const SETTLE_MS = 1_000;
/** The goals of issue 39. */
const RATIO_GOAL = 0.97;
const P50_GOAL_MS = 1;
const COMMANDS_GOAL = 4;
/** The CPU columns: the relay's processes, the devices, the bench's client; other = the rest of the machine. */
const GROUPS = ['api', 'dispatcher', 'redis', 'agents', 'bench'] as const;
/** The Redis commands the budgets add (INFO commandstats names them in lower case). */
const BUDGET_COMMANDS = ['mget', 'evalsha', 'incrby', 'pexpireat'] as const;

type LegName = 'A' | 'B';

/** One measured window of one leg, with the Redis calls (server-wide) over it and its settle. */
interface BudgetWindow extends MeasuredWindow {
  leg: LegName;
  round: number;
  redis: Map<string, number>;
}

/** A leg's windows taken together, and their Redis calls per completion. */
interface LegResult extends LegTotals {
  leg: LegName;
  redisTotal: number;
  redisCalls: [string, number][];
}

function legResult(leg: LegName, windows: BudgetWindow[]): LegResult {
  const own = windows.filter((w) => w.leg === leg);
  const totals = legTotals(own);
  const calls = new Map<string, number>();
  for (const w of own) {
    for (const [cmd, n] of w.redis) {
      calls.set(cmd, (calls.get(cmd) ?? 0) + n);
    }
  }
  const redisCalls = [...calls.entries()]
    .map(([cmd, n]): [string, number] => [cmd, totals.completed > 0 ? n / totals.completed : Number.NaN])
    .sort((a, b) => b[1] - a[1]);
  return { ...totals, leg, redisTotal: redisCalls.reduce((a, [, n]) => a + n, 0), redisCalls };
}

const callsOf = (leg: LegResult, cmd: string) => leg.redisCalls.find(([c]) => c === cmd)?.[1] ?? 0;

function legData(leg: LegResult) {
  return {
    ...legTotalsData(leg),
    redis_calls_per_completion: {
      total: Math.round(leg.redisTotal * 100) / 100,
      ...Object.fromEntries(leg.redisCalls.map(([cmd, n]) => [cmd, Math.round(n * 100) / 100])),
    },
  };
}

export async function budgetsScenario(ctx: Ctx, stack: Stack): Promise<ScenarioResult> {
  const { opts } = ctx;
  const devices = opts.throughputDevices;
  const rate = opts.budgetsRate;
  const windowMs = opts.budgetsWindowS * 1000;

  // Two organizations with a key each, the model enabled for both; B gets both budgets before its first request.
  const a = await ctx.fixtures.org('budgets-none', 1, MODEL);
  const b = await ctx.fixtures.org('budgets-set', 1, MODEL);
  const orgB = await ctx.fixtures.db.organization.findUniqueOrThrow({ where: { id: b.orgId } });
  const keyB = await ctx.fixtures.db.apiKey.findFirstOrThrow({ where: { orgId: b.orgId } });
  const admin = new AdminService(ctx.fixtures.db);
  await admin.setLimits(orgB.name, { monthlyTokenBudget: BUDGET });
  await admin.setKeyBudget(keyB.id, BUDGET);
  const apiKeys: Record<LegName, string> = { A: a.key, B: b.key };

  const tokens = await ctx.fixtures.devices(devices, 'budgets');
  const fleet = Fleet.spawn('budgets-fleet');
  ctx.track(fleet.proc);
  const agent = keepAliveAgent(1024);
  try {
    const started = fleet.next('started');
    fleet.send({
      type: 'start',
      mode: 'agents',
      server: stack.dispatcher.url,
      tokens,
      args: [...['--backend', 'sim', '--model', MODEL, '--log-level', 'warn'], ...ZERO_TIME_SIM_ARGS],
    });
    await started;
    ctx.log(`budgets: ${devices} sim agents in one process connecting`);
    await waitOnline(ctx.target.redisUrl, MODEL, devices, { procs: [fleet.proc] });

    const redis = await redisPid(ctx.target.redisUrl);
    const groups: CpuGroup[] = [
      { name: 'api', pids: () => [stack.api.proc.pid] },
      { name: 'dispatcher', pids: () => [stack.dispatcher.proc.pid] },
      { name: 'redis', pids: () => (redis ? [redis] : []) },
      { name: 'agents', pids: () => [fleet.proc.pid] },
      { name: 'bench', pids: () => [process.pid] },
    ];
    const url = new URL(`${stack.api.url}/v1/chat/completions`);
    const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'ping' }], max_tokens: 16 });

    // Warm-up, each way: the key lookups, B's first reconciliation (at its first request), the JIT.
    let answeredB = 0;
    for (const leg of ['A', 'B'] as const) {
      ctx.log(`budgets: warm-up ${opts.warmupS}s at ${rate}/s, ${leg}`);
      const w = await completionWindow(
        url,
        { authorization: `Bearer ${apiKeys[leg]}` },
        body,
        agent,
        rate,
        opts.warmupS * 1000,
      );
      if (leg === 'B') {
        answeredB += w.completed;
      }
      await sleep(500);
    }

    const windows: BudgetWindow[] = [];
    ctx.markLoad('start');
    for (let round = 1; round <= opts.budgetsRounds; round++) {
      // A B, then B A: a drift that runs through a round falls on both legs alike.
      const order: LegName[] = round % 2 === 1 ? ['A', 'B'] : ['B', 'A'];
      for (const leg of order) {
        const [redisBefore, cpuBefore] = await Promise.all([redisCommandCalls(ctx.target.redisUrl), sampleCpu(groups)]);
        const machineBefore = machineCpuMs();
        const w = await completionWindow(url, { authorization: `Bearer ${apiKeys[leg]}` }, body, agent, rate, windowMs);
        await sleep(SETTLE_MS);
        const [redisAfter, cpuAfter] = await Promise.all([redisCommandCalls(ctx.target.redisUrl), sampleCpu(groups)]);
        const machineAfter = machineCpuMs();
        if (leg === 'B') {
          answeredB += w.completed;
        }
        windows.push({
          leg,
          round,
          window: w,
          cpu: cpuDelta(cpuBefore, cpuAfter),
          machineBusyMs: machineAfter.busy - machineBefore.busy,
          machineTotalMs: machineAfter.total - machineBefore.total,
          redis: new Map(callsDelta(redisBefore, redisAfter)),
        });
        const last = summarize(w.latencies);
        ctx.log(
          `budgets: round ${round} ${leg} (${leg === 'A' ? 'no budgets' : 'budgets'}): ${num((w.completed * 1000) / w.elapsedMs)}/s, ` +
            `p50 ${num(last.p50)} ms, p99 ${num(last.p99)} ms, ${failedIn(w)} failed`,
        );
      }
    }
    ctx.markLoad('end');

    // B's counters against its task rows: every ending written to Postgres, every count added.
    await recordsWritten(ctx.target.redisUrl);
    await sleep(200);
    const month = budgetMonth(Date.now());
    const counters = createRedis(ctx.target.redisUrl);
    let orgCounter: number;
    let keyCounter: number;
    try {
      const [org, key] = await Promise.all([
        counters.get(keys.orgTokensSpent(b.orgId, month)),
        counters.get(keys.keyTokensSpent(b.orgId, keyB.id, month)),
      ]);
      orgCounter = Number(org ?? 0);
      keyCounter = Number(key ?? 0);
    } finally {
      counters.disconnect();
    }
    const rows = await ctx.fixtures.db.$queryRaw<{ status: string; n: bigint; tokens: bigint | null }[]>`
      SELECT status::text AS status, count(*) AS n,
             sum(coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0)) AS tokens
      FROM tasks WHERE org_id = ${b.orgId}::uuid GROUP BY status`;
    const byStatus = new Map(rows.map((r) => [r.status, { n: Number(r.n), tokens: Number(r.tokens ?? 0) }]));
    const completedB = byStatus.get('completed') ?? { n: 0, tokens: 0 };
    const otherTokens = rows.filter((r) => r.status !== 'completed').reduce((s, r) => s + Number(r.tokens ?? 0), 0);
    const otherTasks = rows.filter((r) => r.status !== 'completed').reduce((s, r) => s + Number(r.n), 0);
    const countersRight = orgCounter === completedB.tokens + otherTokens && keyCounter === orgCounter;

    const legA = legResult('A', windows);
    const legB = legResult('B', windows);
    const ratio = legB.completedPerS / legA.completedPerS;
    const p50Added = legB.latency.p50 - legA.latency.p50;
    // What the budgets add: the difference in the commands they use. The server-wide total moves by a few
    // tenths between legs in commands nothing of the budgets sends (other scripts, other users), which the
    // line shows beside it.
    const totalAdded = legB.redisTotal - legA.redisTotal;
    const commandsAdded = BUDGET_COMMANDS.reduce((sum, cmd) => sum + callsOf(legB, cmd) - callsOf(legA, cmd), 0);
    // Round by round (each round has a window of each leg), to show how much of the difference is noise.
    const rounds = Array.from({ length: opts.budgetsRounds }, (_, i) => i + 1);
    const roundP50 = (round: number, leg: LegName) =>
      summarize(windows.find((w) => w.round === round && w.leg === leg)?.window.latencies ?? []).p50;
    const p50Diffs = rounds.map((r) => roundP50(r, 'B') - roundP50(r, 'A'));

    const targets: TargetCheck[] = [
      {
        target: 'Budgets: completions/s with budgets ÷ without, same offered load',
        goal: `≥ ${RATIO_GOAL}`,
        measured:
          `${num(ratio, 3)} (${num(legB.completedPerS)} against ${num(legA.completedPerS)}/s at ${rate}/s offered, ` +
          `${opts.budgetsRounds} windows of ${opts.budgetsWindowS} s each way)`,
        pass: Number.isFinite(ratio) ? ratio >= RATIO_GOAL : null,
      },
      {
        target: 'Budgets: p50 latency added by the budget check',
        goal: `≤ +${P50_GOAL_MS} ms`,
        measured:
          `${signed(p50Added, 2)} ms (p50 ${num(legB.latency.p50, 2)} against ${num(legA.latency.p50, 2)} ms; ` +
          `round by round ${p50Diffs.map((d) => signed(d, 2)).join(' / ')} ms)`,
        pass: Number.isFinite(p50Added) ? p50Added <= P50_GOAL_MS : null,
      },
      {
        target: 'Budgets: Redis commands added per completion (MGET, EVALSHA, INCRBY, PEXPIREAT)',
        goal: `≤ ${COMMANDS_GOAL}`,
        measured:
          `${signed(commandsAdded, 2)} (` +
          BUDGET_COMMANDS.map(
            (cmd) => `${cmd.toUpperCase()} ${signed(callsOf(legB, cmd) - callsOf(legA, cmd), 2)}`,
          ).join(', ') +
          `; every command: ${signed(totalAdded, 2)}, ${num(legB.redisTotal, 1)} against ${num(legA.redisTotal, 1)}; server-wide counts)`,
        pass: Number.isFinite(commandsAdded) ? commandsAdded <= COMMANDS_GOAL : null,
      },
      {
        target: 'Budgets: org counter equals the tokens of the completed tasks',
        goal: 'exact',
        measured:
          `org counter ${orgCounter}, key counter ${keyCounter}; ${completedB.tokens} tokens in B's ${completedB.n} completed task rows` +
          (otherTasks > 0 ? ` (+ ${otherTokens} in ${otherTasks} other ended or unfinished rows)` : '') +
          `; ${answeredB} answered 200 to the bench`,
        pass: countersRight,
      },
    ];

    const legLabel: Record<LegName, string> = { A: 'A: no budgets', B: 'B: org and key budget' };
    const legRow = (leg: LegResult) => [
      legLabel[leg.leg],
      String(leg.windows),
      String(rate),
      num(leg.completedPerS),
      num(leg.latency.p50, 2),
      num(leg.latency.p90, 2),
      num(leg.latency.p99, 2),
      String(leg.failed),
      num(leg.redisTotal, 2),
      ...BUDGET_COMMANDS.map((cmd) => num(callsOf(leg, cmd), 2)),
      ...[...GROUPS, 'other'].map((g) => num(leg.cpuPerCompletion[g], 3)),
      `${Math.round(leg.machineBusy * 100)} %`,
    ];
    const diffRow = [
      'B − A',
      '',
      '',
      signed(legB.completedPerS - legA.completedPerS),
      signed(p50Added, 2),
      signed(legB.latency.p90 - legA.latency.p90, 2),
      signed(legB.latency.p99 - legA.latency.p99, 2),
      '',
      signed(commandsAdded, 2),
      ...BUDGET_COMMANDS.map((cmd) => signed(callsOf(legB, cmd) - callsOf(legA, cmd), 2)),
      ...[...GROUPS, 'other'].map((g) => signed(legB.cpuPerCompletion[g] - legA.cpuPerCompletion[g], 3)),
      '',
    ];
    const summaryTable = mdTable(
      [
        'leg',
        'windows',
        'offered/s',
        'completed/s',
        'p50 (ms)',
        'p90 (ms)',
        'p99 (ms)',
        'errors + unfinished',
        'Redis commands/completion',
        'MGET',
        'EVALSHA',
        'INCRBY',
        'PEXPIREAT',
        'CPU ms/completion: api',
        'dispatcher',
        'redis',
        'agents',
        'bench client',
        'other',
        'machine busy',
      ],
      [legRow(legA), legRow(legB), diffRow],
      ['l', ...(Array(18).fill('r') as 'r'[])],
    );
    const roundsTable = mdTable(
      [
        'round',
        'leg',
        'completed/s',
        'p50 (ms)',
        'p90 (ms)',
        'p99 (ms)',
        'errors + unfinished',
        'Redis commands/completion',
      ],
      windows.map((w) => {
        const s = summarize(w.window.latencies);
        const calls = [...w.redis.values()].reduce((x, y) => x + y, 0);
        return [
          String(w.round),
          w.leg,
          num((w.window.completed * 1000) / w.window.elapsedMs),
          num(s.p50, 2),
          num(s.p90, 2),
          num(s.p99, 2),
          String(failedIn(w.window)),
          num(w.window.completed > 0 ? calls / w.window.completed : Number.NaN, 1),
        ];
      }),
      ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r'],
    );
    const firstError = legA.firstError ?? legB.firstError;
    return {
      name: 'budgets',
      title: 'Budgets: throughput and latency with and without monthly token budgets (same run)',
      table: `${summaryTable}\n\n${roundsTable}`,
      notes: [
        `${devices} sim devices (\`${ZERO_TIME_SIM_ARGS.join(' ')}\`) in one process, one model, two organizations with a key each: ` +
          `A without budgets, B with an org budget and a key budget of ${BUDGET.toLocaleString('en-US')} tokens (nothing is refused). ` +
          `Non-streamed requests (\`max_tokens\` 16), open loop at ${rate}/s; after ${opts.warmupS} s of warm-up each way, ` +
          `${opts.budgetsRounds} rounds of a ${opts.budgetsWindowS} s window each way (A then B, then B then A, and so on), ` +
          'latency from the moment each request was due to its whole answer; a leg is its windows taken together.',
        `Redis commands (INFO commandstats, server-wide: other users of the server count too) and CPU ms (/proc, utime + stime) ` +
          `per completion over each window and the ${SETTLE_MS / 1000} s after it (the task records are written then); ` +
          'other = the rest of the machine. Expected difference: MGET +1 (both counters, on admission) and EVALSHA +1 (the ' +
          'ending’s add), with INCRBY +2 inside it (commandstats counts a script’s own commands too): 4 commands, 2 round ' +
          'trips; PEXPIREAT only at a counter’s first add of the month. (EVALSHA also counts the other scripts of the path.)',
        `Counters: B's org and key counters in Redis (\`sy:spent:{<org>}:${month}\`, \`sy:spent:{<org>}:key:<key>:${month}\`) after every record was written, ` +
          "against the prompt + completion tokens of B's task rows in Postgres (warm-up included: the counter counts every ending).",
        `p50 added round by round (B − A): ${p50Diffs.map((d) => signed(d, 2)).join(', ')} ms; their median ${signed(median(p50Diffs), 2)} ms.`,
        ...(firstError ? [`First error: ${firstError}`] : []),
      ],
      targets,
      data: {
        devices,
        offered_per_s: rate,
        rounds: opts.budgetsRounds,
        window_s: opts.budgetsWindowS,
        budget_tokens: BUDGET,
        legs: { without_budgets: legData(legA), with_budgets: legData(legB) },
        completed_ratio: Math.round(ratio * 1000) / 1000,
        p50_added_ms: Math.round(p50Added * 100) / 100,
        p50_added_by_round_ms: p50Diffs.map((d) => Math.round(d * 100) / 100),
        redis_commands_added_per_completion: Math.round(commandsAdded * 100) / 100,
        windows: windows.map((w) => ({
          round: w.round,
          leg: w.leg,
          completed: w.window.completed,
          failed: failedIn(w.window),
          completed_per_s: Math.round(((w.window.completed * 1000) / w.window.elapsedMs) * 10) / 10,
          latency_ms: rounded(summarize(w.window.latencies)),
        })),
        counters: {
          month,
          org: orgCounter,
          key: keyCounter,
          completed_tasks: completedB.n,
          completed_tokens: completedB.tokens,
          other_tasks: otherTasks,
          other_tokens: otherTokens,
          answered: answeredB,
        },
      },
    };
  } finally {
    agent.destroy();
    await fleet.stop();
  }
}
