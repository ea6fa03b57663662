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

  private async online(pool: string, model: string): Promise<Feature[][]> {
    const members = await this.redis.zrangebyscore(keys.presence(pool, model), Date.now(), '+inf');
    return members.map((m) => decodePresenceMember(m).features);
  }

  async route(orgId: string, model: string, mode: 'auto' | 'direct' | 'network', requires: Feature[]): Promise<Route> {
    const [direct, network] = await Promise.all([
      mode === 'network' ? Promise.resolve([]) : this.online(orgId, model),
      mode === 'direct' ? Promise.resolve([]) : this.online(NETWORK_POOL, model),
    ]);
    const supports = (features: Feature[]) => requires.every((f) => features.includes(f));
    if (direct.some(supports)) {
      return { pool: orgId, mode: 'direct' };
    }
    if (network.some(supports)) {
      return { pool: NETWORK_POOL, mode: 'network' };
    }
    const online = [...direct, ...network];
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
