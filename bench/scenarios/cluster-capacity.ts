/**
 * The capacity model of the cluster scenario (docs/benchmarks.md): per-unit costs from the phases it
 * measured, and from them the masters, apis and dispatchers a load needs.
 */

/**
 * The capacity model keeps every process at half of one core: headroom for bursts, for a failover
 * (a promoted replica takes its master's load at once) and for a busy neighbour.
 */
export const UTILIZATION = 0.5;
/** Devices one dispatcher holds: issue 14's fan-in target, which the fan-in scenario measures. */
export const DEVICES_PER_DISPATCHER = 10_000;
/** The loads the capacity model sizes a deployment for (issue 34). */
export const LOADS = { completionsPerS: 10_000, tokensPerS: 1_000_000, devices: 100_000 };

/** What one phase cost: each master's commands and CPU, and the api's and the dispatcher's CPU. */
export interface PhaseCost {
  name: string;
  elapsedMs: number;
  masters: { port: number; commands: number; cpuMs: number }[];
  apiCpuMs: number;
  dispatcherCpuMs: number;
}

/** The per-unit costs the capacity model is built from (CPU ms). */
export interface UnitCosts {
  perCompletion: { redis: number; api: number; dispatcher: number; commands: number };
  per1000Tokens: { redis: number; api: number; dispatcher: number; commands: number };
  /**
   * What a connected, idle device adds, over the processes' own background: Redis commands (its CPU
   * estimated at the completions phase's CPU per command: the phase is too light to time), and the
   * dispatcher's CPU.
   */
  perDeviceSecond: { redis: number; dispatcher: number; commands: number };
  /** The busiest master's share of the Redis CPU while one queue carried the non-streamed load. */
  hotShare: number;
}

const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);
export const redisCpu = (phase: PhaseCost) => sum(phase.masters.map((m) => m.cpuMs));
export const redisCommands = (phase: PhaseCost) => sum(phase.masters.map((m) => m.commands));

/** The per-unit costs from the phases: completions (a), streams (b), no devices, idle devices (c). */
export function unitCosts(
  a: PhaseCost,
  completions: number,
  b: PhaseCost,
  tokens: number,
  none: PhaseCost,
  c: PhaseCost,
  devices: number,
): UnitCosts {
  const perCompletion = (ms: number) => ms / Math.max(1, completions);
  const per1000 = (ms: number) => (ms * 1000) / Math.max(1, tokens);
  const perS = (x: number, phase: PhaseCost) => (x * 1000) / phase.elapsedMs;
  const commandsPerDeviceS = Math.max(0, perS(redisCommands(c), c) - perS(redisCommands(none), none)) / devices;
  const dispatcherPerDeviceS = Math.max(0, perS(c.dispatcherCpuMs, c) - perS(none.dispatcherCpuMs, none)) / devices;
  const cpuPerCommand = redisCpu(a) / Math.max(1, redisCommands(a));
  return {
    perCompletion: {
      redis: perCompletion(redisCpu(a)),
      api: perCompletion(a.apiCpuMs),
      dispatcher: perCompletion(a.dispatcherCpuMs),
      commands: perCompletion(redisCommands(a)),
    },
    per1000Tokens: {
      redis: per1000(redisCpu(b)),
      api: per1000(b.apiCpuMs),
      dispatcher: per1000(b.dispatcherCpuMs),
      commands: per1000(redisCommands(b)),
    },
    perDeviceSecond: {
      redis: commandsPerDeviceS * cpuPerCommand,
      dispatcher: dispatcherPerDeviceS,
      commands: commandsPerDeviceS,
    },
    hotShare: Math.max(...a.masters.map((m) => m.cpuMs)) / Math.max(1e-9, redisCpu(a)),
  };
}

/** Processes of one core each, at UTILIZATION, for `msPerS` CPU milliseconds a second. */
const cores = (msPerS: number) => Math.max(1, Math.ceil(msPerS / (1000 * UTILIZATION)));

/** The capacity model: masters, apis and dispatchers for each load, from the per-unit costs. */
export function capacity(costs: UnitCosts) {
  const completions = LOADS.completionsPerS;
  const thousands = LOADS.tokensPerS / 1000;
  return {
    completions: {
      masters: cores(completions * costs.perCompletion.redis),
      apis: cores(completions * costs.perCompletion.api),
      dispatchers: cores(completions * costs.perCompletion.dispatcher),
    },
    tokens: {
      masters: cores(thousands * costs.per1000Tokens.redis),
      apis: cores(thousands * costs.per1000Tokens.api),
      dispatchers: cores(thousands * costs.per1000Tokens.dispatcher),
    },
    devices: {
      masters: cores(LOADS.devices * costs.perDeviceSecond.redis),
      apis: 0,
      dispatchers: Math.max(
        Math.ceil(LOADS.devices / DEVICES_PER_DISPATCHER),
        cores(LOADS.devices * costs.perDeviceSecond.dispatcher),
      ),
    },
    /** Completions/s one (model, pool) queue can take before its master is at UTILIZATION. */
    queueCeiling: (1000 * UTILIZATION) / Math.max(1e-9, costs.perCompletion.redis * costs.hotShare),
  };
}
