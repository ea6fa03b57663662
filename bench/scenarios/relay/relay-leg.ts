import type { StreamResult } from '../../lib/client';
import type { Ctx, Stack } from '../../lib/context';
import { Fleet } from '../../lib/fleet';
import type { Proc } from '../../lib/stack';
import { startNode, waitOnline } from '../../lib/stack';
import type { Summary } from '../../lib/stats';
import type { Upstream } from './direct';
import { MODEL } from './legs';
import type { LegTarget } from './legs';
import { ttftStages } from './stages';
import type { Stage } from './stages';

/** Agents are started this many at a time: each is a Node process that takes a moment of CPU to load. */
const AGENT_START_BATCH = 8;

/**
 * The relay leg: the same requests through Switchyard (the stack's api and dispatcher) to device agents
 * with the `openai` backend in front of the upstream. It keeps each request's result by its marker,
 * to split the time to first token into stages.
 */
export class RelayLeg {
  /** The switchyard-device arguments of every device (after its server and token). */
  readonly agentArgs: string[];
  private readonly agents: Proc[] = [];
  private fleet: Fleet | null = null;
  private readonly marked = new Map<string, StreamResult>();

  constructor(
    private readonly ctx: Ctx,
    private readonly stack: Stack,
    private readonly upstream: Upstream,
  ) {
    this.agentArgs = [
      ...['--backend', 'openai', '--upstream', upstream.baseUrl],
      ...['--model', MODEL, '--log-level', 'warn'],
    ];
  }

  /**
   * Starts a device per token and waits until all are online: each a switchyard-device process
   * (--agent-processes), or all as DeviceAgent instances in one fleet process.
   */
  async startDevices(tokens: string[]): Promise<void> {
    const { ctx, stack, agentArgs } = this;
    if (ctx.opts.agentProcesses) {
      ctx.log(`relay: starting ${tokens.length} switchyard-device processes (${agentArgs.slice(0, 4).join(' ')})`);
      for (let i = 0; i < tokens.length; i += AGENT_START_BATCH) {
        const batch = tokens
          .slice(i, i + AGENT_START_BATCH)
          .map((token, j) =>
            ctx.track(
              startNode(
                `agent-${i + j}`,
                'apps/device/src/main.js',
                ['--server', stack.dispatcher.url, '--token', token, ...agentArgs],
                { PATH: process.env.PATH },
              ),
            ),
          );
        this.agents.push(...batch);
        await waitOnline(ctx.target.redisUrl, MODEL, this.agents.length, { procs: this.agents, timeoutMs: 60_000 });
      }
    } else {
      ctx.log(`relay: starting ${tokens.length} device agents in one process (${agentArgs.slice(0, 4).join(' ')})`);
      const fleet = Fleet.spawn('relay-fleet');
      this.fleet = fleet;
      ctx.track(fleet.proc);
      const started = fleet.next('started');
      fleet.send({ type: 'start', mode: 'agents', server: stack.dispatcher.url, tokens, args: agentArgs });
      await started;
      await waitOnline(ctx.target.redisUrl, MODEL, tokens.length, { procs: [fleet.proc], timeoutMs: 120_000 });
    }
  }

  /** The processes of the devices, for their CPU. */
  devicePids(): number[] {
    return this.fleet ? [this.fleet.proc.pid] : this.agents.map((a) => a.pid);
  }

  /** The leg's target: the stack's api with the bench's API key; each result is kept by its marker. */
  target(): LegTarget {
    return {
      url: new URL(`${this.stack.api.url}/v1/chat/completions`),
      headers: { authorization: `Bearer ${this.ctx.apiKey}` },
      record: (marker, result) => this.marked.set(marker, result),
    };
  }

  /** The stages of the time to first token of the requests sent since the last call. */
  async stages(): Promise<Record<Stage, Summary>> {
    const stages = await ttftStages(this.ctx, await this.upstream.timings(), this.marked);
    this.marked.clear();
    return stages;
  }

  /** Forgets the requests sent so far (the warm-up's), here and at the upstream. */
  async discardStages(): Promise<void> {
    await this.upstream.timings();
    this.marked.clear();
  }

  async stop(): Promise<void> {
    await this.fleet?.stop();
    await Promise.all(this.agents.map((a) => a.stop(5_000)));
  }
}
