import { Inject, Injectable } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { AppError, NETWORK_POOL, decodePresenceMember, keys } from '@app/common';
import type { Feature } from '@app/common';
import { REDIS } from '../redis/redis.module';

/** The request parameter behind each feature, for unsupported_by_node errors. */
const FEATURE_PARAM: Record<Feature, string> = {
  tools: 'tools',
  json_object: 'response_format',
  json_schema: 'response_format',
  logprobs: 'logprobs',
  n: 'n',
  stream_usage: 'stream_options',
  logit_bias: 'logit_bias',
  reasoning_effort: 'reasoning_effort',
};

export interface Route {
  pool: string;
  mode: 'direct' | 'network';
}

/**
 * Chooses the pool a request goes to from the devices online now (published by the dispatchers):
 * `direct` = the org's own devices, `network` = the shared ones, `auto` = direct when one of the
 * org's devices can serve it, else the network.
 */
@Injectable()
export class PresenceService {
  constructor(@Inject(REDIS) private readonly redis: Redis) {}

  /**
   * The presence entries of a pool's devices for a model that have not expired. A request that
   * needs no feature is served by any device, so one entry is enough to know (most requests: this
   * runs for every one of them, and a pool may hold thousands of devices).
   */
  private async online(pool: string, model: string, requires: Feature[]): Promise<string[]> {
    const key = keys.presence(pool, model);
    return requires.length === 0
      ? this.redis.zrangebyscore(key, Date.now(), '+inf', 'LIMIT', 0, 1)
      : this.redis.zrangebyscore(key, Date.now(), '+inf');
  }

  async route(orgId: string, model: string, mode: 'auto' | 'direct' | 'network', requires: Feature[]): Promise<Route> {
    const [direct, network] = await Promise.all([
      mode === 'network' ? Promise.resolve([]) : this.online(orgId, model, requires),
      mode === 'direct' ? Promise.resolve([]) : this.online(NETWORK_POOL, model, requires),
    ]);
    const supports = (member: string) => {
      const { features } = decodePresenceMember(member);
      return requires.every((f) => features.includes(f));
    };
    if (direct.some(supports)) {
      return { pool: orgId, mode: 'direct' };
    }
    if (network.some(supports)) {
      return { pool: NETWORK_POOL, mode: 'network' };
    }
    const online = [...direct, ...network].map((m) => decodePresenceMember(m).features);
    if (online.length === 0) {
      const where = mode === 'auto' ? '' : ` in ${mode} mode`;
      throw new AppError(
        'no_device_available',
        `No device serving '${model}' is online${where}. Try again later.`,
        'model',
        { 'retry-after': '5' },
      );
    }
    const missing = requires.find((f) => !online.some((features) => features.includes(f))) ?? requires[0];
    throw new AppError(
      'unsupported_by_node',
      `No online device serving '${model}' supports '${missing}'.`,
      FEATURE_PARAM[missing],
    );
  }
}
