import type { Logger } from '@app/common/logging/logger';
import type { Feature } from '@app/common/protocol/chat';
import { FEATURES } from '@app/common/protocol/chat';
import type { ModelIdentity } from '@app/common/protocol/messages';
import { BackendError } from '../backend';

/** The announce schema accepts at most this many models per device. */
const MAX_ANNOUNCED_MODELS = 1000;

/** A model served under the catalog's name (`public`) and run under the runtime's name (`upstream`). */
export interface ModelMapping {
  public: string;
  upstream: string;
}

/** What the runtime says one of its models is (the announce's identity, without the public id). */
export type RuntimeIdentity = Omit<ModelIdentity, 'model'>;

/** An identity that says nothing: what a runtime that describes no model gives. */
export const UNKNOWN_IDENTITY: RuntimeIdentity = {
  digest: null,
  family: null,
  parameter_size: null,
  quantization: null,
  root: null,
  context_length: null,
};

/** What one probe of the runtime learned. */
export interface ProbeResult {
  /** The runtime's model names, as its list endpoint gives them. */
  models: string[];
  /** What the runtime says of its models, by the runtime's name; a model it says nothing of is absent. */
  identities: ReadonlyMap<string, RuntimeIdentity>;
  /** The features this runtime (this version, this server) supports. */
  features: Feature[];
  /** For the logs: what answered, e.g. `ollama 0.12.11` or `vllm`. */
  runtime: string;
}

export interface MonitorOptions {
  /** The backend's name, for logs. */
  backend: string;
  /** Explicit --model mappings; empty = serve what the runtime lists. */
  mapping: ModelMapping[];
  /** --features: declare exactly these, whatever the probe says. */
  featureOverride?: Feature[];
  /** Declared before the first successful probe, and when a probe cannot tell. */
  defaultFeatures: Feature[];
  /** Declared on top of whatever else (a set-up the probe cannot see, such as web search). */
  extraFeatures?: Feature[];
  /** How often the model list is read while the runtime answers. */
  discoveryIntervalMs: number;
  /** How often an unreachable runtime is probed. */
  healthIntervalMs: number;
  /** Upper bound on one probe; a runtime that does not answer in time counts as unreachable. */
  probeTimeoutMs: number;
  probe(signal: AbortSignal): Promise<ProbeResult>;
  /** Names under which the runtime may list an upstream model (Ollama lists `llama3.2` as `llama3.2:latest`). */
  aliases?(upstream: string): string[];
  logger: Logger;
}

/** Features in the protocol's order, without duplicates, so that announces compare and read the same. */
export function orderFeatures(features: Iterable<Feature>): Feature[] {
  const set = new Set(features);
  return FEATURES.filter((f) => set.has(f));
}

/**
 * Watches a local runtime: reads its model list (and what it says each model is) every discovery interval, marks it unavailable when
 * it cannot be reached (a probe or a task found the connection refused or timing out), then probes
 * it every health interval until it answers again. Reports every change of models, identities,
 * features or availability to the agent, which announces it.
 */
export class UpstreamMonitor {
  private reachable = false;
  private discovered: string[] = [];
  private identified: ReadonlyMap<string, RuntimeIdentity> = new Map();
  private probed: Feature[] | null = null;
  private timer: NodeJS.Timeout | undefined;
  private onChange: () => void = () => undefined;
  private stopped = false;
  private probing: Promise<void> | null = null;
  private again = false;
  /** The last problem logged, so that a lasting one is logged once, not at every probe. */
  private lastProblem: string | null = null;
  private missing = new Set<string>();
  private readonly log: Logger;

  constructor(private readonly options: MonitorOptions) {
    this.log = options.logger;
  }

  async start(onChange: () => void): Promise<void> {
    this.onChange = onChange;
    await this.refresh();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  available(): boolean {
    return this.reachable;
  }

  /** The public ids served now: the explicit mappings, or what the runtime lists. */
  models(): string[] {
    return this.options.mapping.length > 0 ? this.options.mapping.map((m) => m.public) : [...this.discovered];
  }

  features(): Feature[] {
    return orderFeatures([
      ...(this.options.featureOverride ?? this.probed ?? this.options.defaultFeatures),
      ...(this.options.extraFeatures ?? []),
    ]);
  }

  /**
   * What the runtime last said of each model served, by public id: a model it said nothing of is left
   * out (the dispatcher reads that as no digest). Under an explicit mapping, the runtime's entry for the
   * upstream name or one of its aliases.
   */
  identities(): ModelIdentity[] {
    const served =
      this.options.mapping.length > 0
        ? this.options.mapping
        : this.discovered.map((name) => ({ public: name, upstream: name }));
    const identities: ModelIdentity[] = [];
    for (const { public: model, upstream } of served) {
      const name = (this.options.aliases?.(upstream) ?? [upstream]).find((n) => this.identified.has(n));
      const identity = name === undefined ? undefined : this.identified.get(name);
      if (identity) {
        identities.push({ model, ...identity });
      }
    }
    return identities;
  }

  /** The runtime's name for a public id; throws `model_not_found` for a model this device does not serve. */
  upstreamName(publicId: string): string {
    const name =
      this.options.mapping.length > 0
        ? this.options.mapping.find((m) => m.public === publicId)?.upstream
        : this.discovered.includes(publicId)
          ? publicId
          : undefined;
    if (name === undefined) {
      throw new BackendError('model_not_found', `this device no longer serves '${publicId}'`);
    }
    return name;
  }

  /** A task could not connect: stop taking tasks now, and probe until the runtime answers. */
  markUnreachable(reason: string): void {
    if (this.stopped) {
      return;
    }
    if (this.reachable) {
      this.setReachable(false, reason);
      this.onChange();
    }
    this.schedule(this.options.healthIntervalMs);
  }

  /** Something suggests the model list or the runtime changed (a model vanished, a connection broke): look now. */
  refreshSoon(): void {
    if (!this.stopped) {
      this.schedule(0);
    }
  }

  private schedule(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.refresh(), ms);
    // The agent decides when the process ends, not a pending probe.
    this.timer.unref();
  }

  /** One probe; a probe asked for while one runs is done right after it. */
  private refresh(): Promise<void> {
    if (this.probing) {
      this.again = true;
      return this.probing;
    }
    clearTimeout(this.timer);
    this.probing = this.probeOnce().finally(() => {
      this.probing = null;
      if (this.stopped) {
        return;
      }
      if (this.again) {
        this.again = false;
        this.schedule(0);
      } else {
        this.schedule(this.reachable ? this.options.discoveryIntervalMs : this.options.healthIntervalMs);
      }
    });
    return this.probing;
  }

  private async probeOnce(): Promise<void> {
    const before = this.snapshot();
    let result: ProbeResult | null = null;
    try {
      result = await this.options.probe(AbortSignal.timeout(this.options.probeTimeoutMs));
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      const message = error instanceof Error ? error.message : String(error);
      if (code === 'upstream_unreachable') {
        this.setReachable(false, message);
      } else if (code === 'cancelled' || (error instanceof Error && error.name === 'TimeoutError')) {
        // Only the probe's own deadline aborts it.
        this.setReachable(false, `no answer within ${this.options.probeTimeoutMs} ms`);
      } else {
        // The runtime answered, but not with a model list (a 500, a 401): it is there, keep what we knew.
        this.setReachable(true);
        this.problem(`model list unavailable: ${message}`);
      }
    }
    if (this.stopped) {
      return;
    }
    if (result) {
      this.setReachable(true, undefined, result.runtime);
      if (result.models.length <= MAX_ANNOUNCED_MODELS) {
        this.problem(null);
      }
      let models = [...new Set(result.models)].sort();
      if (models.length > MAX_ANNOUNCED_MODELS) {
        this.problem(`the runtime lists ${models.length} models; serving the first ${MAX_ANNOUNCED_MODELS}`);
        models = models.slice(0, MAX_ANNOUNCED_MODELS);
      }
      if (this.options.mapping.length === 0) {
        const added = models.filter((m) => !this.discovered.includes(m));
        const removed = this.discovered.filter((m) => !models.includes(m));
        if (added.length > 0 || removed.length > 0) {
          this.log.info({ added, removed, models }, 'upstream models changed');
        }
        this.discovered = models;
      } else {
        this.warnMissing(models);
      }
      this.identified = result.identities;
      this.probed = orderFeatures(result.features);
    }
    if (this.snapshot() !== before) {
      this.onChange();
    }
  }

  private setReachable(reachable: boolean, reason?: string, runtime?: string): void {
    if (reachable === this.reachable) {
      return;
    }
    this.reachable = reachable;
    if (reachable) {
      this.log.info({ backend: this.options.backend, runtime }, 'upstream reachable');
    } else {
      this.log.warn(
        { backend: this.options.backend, reason, probe_every_ms: this.options.healthIntervalMs },
        'upstream unreachable: taking no tasks until it answers',
      );
    }
  }

  private problem(message: string | null): void {
    if (message !== null && message !== this.lastProblem) {
      this.log.warn({ backend: this.options.backend, problem: message }, 'upstream discovery failed');
    }
    this.lastProblem = message;
  }

  /** With explicit --model mappings the list does not change, but a model the runtime lacks deserves a warning. */
  private warnMissing(upstreamModels: string[]): void {
    for (const { public: id, upstream } of this.options.mapping) {
      const names = this.options.aliases?.(upstream) ?? [upstream];
      const listed = names.some((n) => upstreamModels.includes(n));
      if (!listed && !this.missing.has(upstream)) {
        this.missing.add(upstream);
        this.log.warn(
          { model: id, upstream_model: upstream },
          'the upstream does not list this model; its requests will fail until it is there',
        );
      } else if (listed && this.missing.delete(upstream)) {
        this.log.info({ model: id, upstream_model: upstream }, 'the upstream lists this model again');
      }
    }
  }

  private snapshot(): string {
    return JSON.stringify([this.reachable, this.models(), this.features(), this.identities()]);
  }
}
