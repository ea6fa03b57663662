import type { Ctx } from '../../lib/context';
import type { CpuGroup } from '../../lib/procfs';
import type { Upstream } from './direct';
import type { LegTarget } from './legs';
import { startWorker } from './worker';

/**
 * The floor chain (bench/floor-worker.ts): an api, a dispatcher and devices with the relay's processes
 * and hops and nothing else, in front of the same upstream. What it adds to the direct leg is the floor
 * of the design on this machine.
 */
export class FloorChain {
  private constructor(
    private readonly url: URL,
    private readonly pids: { api: number; dispatcher: number; devices: number },
  ) {}

  static async start(ctx: Ctx, upstream: Upstream, devices: number): Promise<FloorChain> {
    const script = 'bench/floor-worker.js';
    const api = await startWorker(ctx, 'floor-api', script, ['api', ctx.target.redisUrl]);
    const dispatcher = await startWorker(ctx, 'floor-dispatcher', script, ['dispatcher', ctx.target.redisUrl]);
    const fleet = await startWorker(ctx, 'floor-devices', script, [
      'devices',
      ctx.target.redisUrl,
      `http://127.0.0.1:${dispatcher.port}`,
      `${upstream.baseUrl}/chat/completions`,
      String(devices),
    ]);
    return new FloorChain(new URL(`http://127.0.0.1:${api.port}/v1/chat/completions`), {
      api: api.proc.pid,
      dispatcher: dispatcher.proc.pid,
      devices: fleet.proc.pid,
    });
  }

  /** The floor chain's leg: its api, without authentication. */
  leg(): LegTarget {
    return { url: this.url, headers: {} };
  }

  /**
   * The relay's CPU groups with the floor chain's processes under the same names, so that each level's
   * CPU has its floor beside it; Postgres is not part of the chain.
   */
  cpuGroups(relayGroups: CpuGroup[]): CpuGroup[] {
    const own: Record<string, number> = {
      api: this.pids.api,
      dispatcher: this.pids.dispatcher,
      agents: this.pids.devices,
    };
    return relayGroups.map((g) => {
      const pid = own[g.name];
      return pid ? { name: g.name, pids: () => [pid] } : g.name === 'postgres' ? { name: g.name, pids: () => [] } : g;
    });
  }
}
