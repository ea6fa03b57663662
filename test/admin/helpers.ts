import { createRedis, KeySpace } from '@app/common';
import { ADMIN_TOKEN, REDIS_URL, http, sleep } from '../support/stack';
import type { Api } from '../support/stack';

/** A request to the admin API with the admin token. */
export const adminClient = (api: Api) => (method: string, path: string, body?: unknown) =>
  http(method, `${api.url}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, body });

/** Polls until `check` holds: the dispatchers and the api pick up admin changes within a second or two. */
export async function eventually(what: string, check: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) {
      throw new Error(`${what} did not happen within ${timeoutMs} ms`);
    }
    await sleep(100);
  }
}

/** Whether a network device is in the model's presence now (what the api routes by). */
export async function presenceOf(model: string, deviceId: string): Promise<boolean> {
  const redis = createRedis(REDIS_URL);
  try {
    const members = await redis.zrangebyscore(KeySpace.of(redis).presence('network', model), Date.now(), '+inf');
    return members.some((m) => m.startsWith(`${deviceId}|`));
  } finally {
    redis.disconnect();
  }
}
