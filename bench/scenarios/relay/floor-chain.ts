import type { Ctx } from '../../lib/context';
import type { CpuGroup } from '../../lib/procfs';
import type { Proc } from '../../lib/stack';
import type { LegTarget } from './legs';
import { startWorker } from './worker';

/**
 * The floor chain (bench/floor-worker.ts): an api, a dispatcher and devices with the relay's processes
 * and hops and nothing else, in front of the same upstream. What it adds to the direct leg is the floor
 * of the design on this machine. Its devices' upstream is a URL, or `sim:<n>` for an answer of n chunks
 * at once (what the throughput scenario's sim devices do).
 */
export class FloorChain {
  private constructor(
    private readonly url: URL,
    private readonly procs: { api: Proc; dispatcher: Proc; devices: Proc },
  ) {}

  /** With `held`, an answer reaches the api in one stream entry at its end (a client that did not ask to stream). */
  static async start(ctx: Ctx, upstream: string, devices: number, opts: { held?: boolean } = {}): Promise<FloorChain> {
    const script = 'bench/floor-worker.js';
    const api = await startWorker(ctx, 'floor-api', script, ['api', ctx.target.redisUrl]);
    const dispatcher = await startWorker(ctx, 'floor-dispatcher', script, [
      'dispatcher',
      ctx.target.redisUrl,
      ...(opts.held ? ['held'] : []),
    ]);
    const fleet = await startWorker(ctx, 'floor-devices', script, [
      'devices',
      ctx.target.redisUrl,
      `http://127.0.0.1:${dispatcher.port}`,
      upstream,
      String(devices),
    ]);
    return new FloorChain(new URL(`http://127.0.0.1:${api.port}/v1/chat/completions`), {
      api: api.proc,
      dispatcher: dispatcher.proc,
      devices: fleet.proc,
    });
  }

  async stop(): Promise<void> {
    await Promise.all([this.procs.devices.stop(), this.procs.dispatcher.stop(), this.procs.api.stop()]);
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
      api: this.procs.api.pid,
      dispatcher: this.procs.dispatcher.pid,
      agents: this.procs.devices.pid,
    };
    return relayGroups.map((g) => {
      const pid = own[g.name];
      return pid ? { name: g.name, pids: () => [pid] } : g.name === 'postgres' ? { name: g.name, pids: () => [] } : g;
    });
  }
}
