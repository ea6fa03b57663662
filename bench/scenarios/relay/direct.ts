import type { Ctx } from '../../lib/context';
import type { Proc } from '../../lib/stack';
import { sleep } from '../../lib/stack';
import { MODEL } from './legs';
import type { LegTarget } from './legs';
import { startWorker } from './worker';

/** When a marked request reached the upstream, and when its first token left (epoch ms). */
export type UpstreamTimings = Map<string, [number, number]>;

/**
 * The fake OpenAI-compatible upstream (bench/upstream-worker.ts), in a process of its own: what every
 * leg ends at. The direct leg is the same requests sent to it straight, the baseline of the others.
 */
export class Upstream {
  private constructor(
    readonly proc: Proc,
    readonly port: number,
  ) {}

  static async start(ctx: Ctx): Promise<Upstream> {
    const options = {
      models: [MODEL],
      ttftMs: ctx.opts.ttftMs,
      tokenIntervalMs: ctx.opts.tokenIntervalMs,
      tokens: ctx.opts.relayTokens,
    };
    const { proc, port } = await startWorker(ctx, 'upstream', 'bench/upstream-worker.js', [JSON.stringify(options)]);
    return new Upstream(proc, port);
  }

  /** Its base URL, as the devices' `--upstream` takes it. */
  get baseUrl(): string {
    return `http://127.0.0.1:${this.port}/v1`;
  }

  /** The direct leg: no relay in between. */
  directLeg(): LegTarget {
    return { url: new URL(`${this.baseUrl}/chat/completions`), headers: {} };
  }

  /** The times it recorded for the marked requests since the last call (empty after 10 s without an answer). */
  timings(): Promise<UpstreamTimings> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(new Map()), 10_000);
      this.proc.child.once('message', (m: { type: string; items: [string, [number, number]][] }) => {
        clearTimeout(timer);
        resolve(new Map(m.items));
      });
      this.proc.child.send({ type: 'timings' });
    });
  }

  /** Asks it to stop, then stops it (2 s for each). */
  async stop(): Promise<void> {
    this.proc.child.send({ type: 'stop' });
    await Promise.race([this.proc.exited, sleep(2_000)]);
    await this.proc.stop(2_000);
  }
}
