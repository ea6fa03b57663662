import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleDestroy, OnModuleInit } from '@nestjs/common';
import {
  AppError,
  LOGGER,
  NETWORK_POOL,
  decodePresenceMember,
  REDIS,
  SUB_REDIS,
  KeySpace,
  Announcements,
} from '@app/common';
import type { Feature, Logger, Requirement, RedisClient } from '@app/common';

/**
 * What this instance remembers of a (pool, model)'s presence. Dispatchers announce every change on a
 * channel, which drops the entry; an entry is also dropped after CACHE_TTL_MS in case an announcement
 * was lost (Pub/Sub does not persist), and all of them when the subscription reconnects.
 */
const CACHE_TTL_MS = 2_000;
/** Bounds the cache (entries are per pool and model). */
const CACHE_MAX_ENTRIES = 20_000;

export interface Route {
  pool: string;
  mode: 'direct' | 'network';
}

export interface RouteRequest {
  orgId: string;
  model: string;
  mode: 'auto' | 'direct' | 'network';
  /** The features the request needs, each with the field that needs it (named in unsupported_by_node). */
  requires: Requirement[];
  /** The org lets its prompts go to the shared network. */
  networkAllowed: boolean;
  /** The catalog lets network devices serve the model (else it is its organizations' own). */
  modelOnNetwork: boolean;
}

/**
 * Chooses the pool a request goes to from the devices online now (published by the dispatchers):
 * `direct` = the org's own devices, `network` = the shared ones, `auto` = direct when one of the
 * org's devices can serve it, else the network (unless the org keeps its prompts off it, or the
 * catalog keeps the model off it). Presence
 * is cached per (pool, model) and dropped on every change, so a request usually needs no round trip.
 */
@Injectable()
export class PresenceService implements OnModuleInit, OnModuleDestroy {
  private readonly cache = new Map<string, { features: Feature[][]; at: number }>();

  private readonly keys: KeySpace;

  constructor(
    @Inject(REDIS) private readonly redis: RedisClient,
    @Inject(SUB_REDIS) private readonly sub: RedisClient,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.keys = KeySpace.of(redis);
  }

  async onModuleInit(): Promise<void> {
    this.sub.on('ready', () => this.cache.clear());
    this.sub.on('error', (err: Error) => this.logger.warn({ err: err.message }, 'presence subscription error'));
    // Not awaited: the api starts while Redis is down (requests then read presence each time).
    Announcements.listen(this.sub, {
      presenceChanged: (pool, model) => this.cache.delete(this.keys.presence(pool, model)),
    }).catch((err: unknown) =>
      this.logger.warn({ err: (err as Error).message }, 'could not subscribe to presence changes'),
    );
  }

  onModuleDestroy(): void {
    this.cache.clear();
  }

  /** The feature sets of the devices online for a (pool, model); `fresh` skips the cache. */
  private async online(pool: string, model: string, fresh: boolean): Promise<Feature[][]> {
    const key = this.keys.presence(pool, model);
    const now = performance.now();
    const hit = this.cache.get(key);
    if (hit && !fresh && now - hit.at < CACHE_TTL_MS) {
      return hit.features;
    }
    const members = await this.redis.zrangebyscore(key, Date.now(), '+inf');
    const features = members.map((m) => decodePresenceMember(m).features);
    if (this.cache.size >= CACHE_MAX_ENTRIES) {
      this.cache.clear();
    }
    this.cache.set(key, { features, at: now });
    return features;
  }

  /**
   * What is online for a model in the pools a caller may use (its org's, and the network unless it
   * keeps off it): each device's features, and until when the latest of them is known to be there
   * (devices renew this continuously). Read from Redis, for the Ollama model routes (/api/show, /api/ps).
   */
  async serving(
    orgId: string,
    model: string,
    networkAllowed: boolean,
  ): Promise<{ features: Feature[][]; until: number | null }> {
    const pools = networkAllowed ? [orgId, NETWORK_POOL] : [orgId];
    const now = Date.now();
    const answers = await Promise.all(
      pools.map((pool) => this.redis.zrangebyscore(this.keys.presence(pool, model), now, '+inf', 'WITHSCORES')),
    );
    const features: Feature[][] = [];
    let until: number | null = null;
    for (const flat of answers) {
      for (let i = 0; i < flat.length; i += 2) {
        features.push(decodePresenceMember(flat[i]).features);
        until = Math.max(until ?? 0, Number(flat[i + 1]));
      }
    }
    return { features, until };
  }

  /**
   * The cache is trusted to route a request, never to refuse one: a refusal is checked against Redis
   * itself, so that a device that has just come online (its announcement still on the way) is found.
   */
  async route(request: RouteRequest): Promise<Route> {
    return (await this.decide(request, false)) ?? (await this.decide(request, true))!;
  }

  private async decide(request: RouteRequest, fresh: boolean): Promise<Route | null> {
    const { orgId, model, mode, requires } = request;
    if (mode === 'network' && !request.networkAllowed) {
      throw new AppError(
        'network_not_allowed',
        "Your organization keeps its requests off the shared network: use mode 'direct' or 'auto'.",
        'mode',
      );
    }
    if (mode === 'network' && !request.modelOnNetwork) {
      throw new AppError(
        'network_not_allowed',
        `The model '${model}' is not served by the shared network, only by your organization’s own devices: use mode 'direct' or 'auto'.`,
        'mode',
      );
    }
    const useNetwork = mode !== 'direct' && request.networkAllowed && request.modelOnNetwork;
    const [direct, network] = await Promise.all([
      mode === 'network' ? Promise.resolve([]) : this.online(orgId, model, fresh),
      useNetwork ? this.online(NETWORK_POOL, model, fresh) : Promise.resolve([]),
    ]);
    const supports = (features: Feature[]) => requires.every((r) => features.includes(r.feature));
    if (direct.some(supports)) {
      return { pool: orgId, mode: 'direct' };
    }
    if (network.some(supports)) {
      return { pool: NETWORK_POOL, mode: 'network' };
    }
    if (!fresh) {
      return null;
    }
    const online = [...direct, ...network];
    if (online.length === 0) {
      const where = mode === 'auto' ? (useNetwork ? '' : ' among your organization’s devices') : ` in ${mode} mode`;
      throw new AppError(
        'no_device_available',
        `No device serving '${model}' is online${where}. Try again later.`,
        'model',
        { 'retry-after': '5' },
      );
    }
    const missing = requires.find((r) => !online.some((features) => features.includes(r.feature))) ?? requires[0];
    throw new AppError(
      'unsupported_by_node',
      `No online device serving '${model}' supports '${missing.feature}' (needed by '${missing.param}').`,
      missing.param,
    );
  }
}
