import type { ChainableCommander } from 'ioredis';
import type { RedisClient } from '../redis/redis';
import { KeySpace } from '../redis/key-space';
import { DEVICE_FIELDS, deviceStateCodec } from './device-state-codec';

/** How long a device's live state lives without its dispatcher renewing it (it died). */
export const DEVICE_STATE_TTL_MS = 30_000;

/**
 * A batch of renewals in one command: building two commands per device (HSET, PEXPIRE) in the
 * client cost more than Redis running them. KEYS: the states. ARGV: now, TTL (ms).
 */
const RENEW_LUA = `for _, key in ipairs(KEYS) do
  redis.call('HSET', key, '${DEVICE_FIELDS.heartbeatAt}', ARGV[1])
  redis.call('PEXPIRE', key, ARGV[2])
end`;

/**
 * The task a device holds, as its live state shows it. KEYS: the state. ARGV: 'set' or 'clear', the
 * task's address. Set only while the state exists (its dispatcher writes the rest and renews it);
 * cleared only if it still shows that task (the device may hold the next one already).
 */
const HOLDING_LUA = `
if ARGV[1] == 'set' then
  if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], '${DEVICE_FIELDS.task}', ARGV[2]) end
elseif redis.call('HGET', KEYS[1], '${DEVICE_FIELDS.task}') == ARGV[2] then
  redis.call('HSET', KEYS[1], '${DEVICE_FIELDS.task}', '')
end`;

type HoldingCommand = { syDeviceHolding(key: string, op: 'set' | 'clear', address: string): Promise<null> };

/** What an operator sees of a device while it is connected. */
export interface DeviceLive {
  online: boolean;
  connected_at: string | null;
  last_heartbeat_at: string | null;
  dispatcher: string | null;
  models: string[];
  /** The digest it announced for each model it serves, by model (a model it announced none for is absent). */
  digests: Record<string, string>;
  features: string[];
  available: boolean | null;
  /** The task address it is serving, or null. */
  task: string | null;
}

const OFFLINE: DeviceLive = {
  online: false,
  connected_at: null,
  last_heartbeat_at: null,
  dispatcher: null,
  models: [],
  digests: {},
  features: [],
  available: null,
  task: null,
};

/**
 * The one owner of the devices' live state (`sy:dev:<id>`, through deviceStateCodec): the device's
 * dispatcher writes it (DeviceStates, in its batch of background writes: the writes are added to a
 * pipeline the caller sends), the task repository sets the task it holds after each claim and each
 * ending (holding), and the admin views read it here.
 */
export class DeviceStateRepository {
  private readonly holdingCommand: RedisClient & HoldingCommand;
  private readonly keys: KeySpace;

  constructor(private readonly redis: RedisClient) {
    redis.defineCommand('syDeviceHolding', { numberOfKeys: 1, lua: HOLDING_LUA });
    this.holdingCommand = redis as RedisClient & HoldingCommand;
    this.keys = KeySpace.of(redis);
  }

  /**
   * The device took the task at `address` (set), or let go of it (clear). The operators' view only:
   * nothing is decided on it.
   */
  async holding(deviceId: string, op: 'set' | 'clear', address: string): Promise<void> {
    await this.holdingCommand.syDeviceHolding(this.keys.deviceState(deviceId), op, address);
  }

  /** A device connected to `dispatcher`: its state starts afresh (an earlier connection's is dropped). */
  connected(
    pipeline: ChainableCommander,
    deviceId: string,
    by: { dispatcher: string; pool: string; at: number },
  ): void {
    const key = this.keys.deviceState(deviceId);
    const at = new Date(by.at);
    const state = deviceStateCodec.encode({
      dispatcher: by.dispatcher,
      connectedAt: at,
      heartbeatAt: at,
      pool: by.pool,
      available: false,
      task: null,
    });
    pipeline.del(key).hset(key, state).pexpire(key, DEVICE_STATE_TTL_MS);
  }

  /** What the device serves now (after an announce, or when what it may serve changed). */
  serves(
    pipeline: ChainableCommander,
    deviceId: string,
    serving: {
      models: readonly string[];
      /** The digest announced for each model, in the same order; null for none. */
      digests: readonly (string | null)[];
      features: readonly string[];
      available: boolean;
    },
  ): void {
    const key = this.keys.deviceState(deviceId);
    const state = deviceStateCodec.encode({
      models: [...serving.models],
      digests: serving.digests.map((d) => d ?? ''),
      features: [...serving.features].sort(),
      available: serving.available,
    });
    pipeline.hset(key, state).pexpire(key, DEVICE_STATE_TTL_MS);
  }

  /** The device disconnected. */
  gone(pipeline: ChainableCommander, deviceId: string): void {
    pipeline.del(this.keys.deviceState(deviceId));
  }

  /**
   * The devices are still connected: their heartbeat is `now`, and their states live on. One script
   * per partition of the devices (one on a single server): a script's keys share a slot.
   */
  renew(pipeline: ChainableCommander, deviceIds: readonly string[], now: number): void {
    const byPartition = new Map<number, string[]>();
    for (const id of deviceIds) {
      const k = this.keys.partitionOf(id);
      let states = byPartition.get(k);
      if (!states) {
        states = [];
        byPartition.set(k, states);
      }
      states.push(this.keys.deviceState(id));
    }
    for (const states of byPartition.values()) {
      pipeline.eval(RENEW_LUA, states.length, ...states, now, DEVICE_STATE_TTL_MS);
    }
  }

  /** The live state of each device (offline when no dispatcher holds it). */
  async live(deviceIds: string[]): Promise<Map<string, DeviceLive>> {
    const out = new Map<string, DeviceLive>();
    if (deviceIds.length === 0) {
      return out;
    }
    // Issued together (they leave in one write per node), each to its device's node on a cluster.
    const replies = await Promise.all(deviceIds.map((id) => this.redis.hgetall(this.keys.deviceState(id))));
    deviceIds.forEach((id, i) => {
      const state = deviceStateCodec.decode(replies[i]);
      out.set(
        id,
        state.dispatcher
          ? {
              online: true,
              connected_at: state.connectedAt?.toISOString() ?? null,
              last_heartbeat_at: state.heartbeatAt?.toISOString() ?? null,
              dispatcher: state.dispatcher,
              models: state.models,
              digests: Object.fromEntries(
                state.models.map((m, k) => [m, state.digests[k] ?? '']).filter(([, d]) => d !== ''),
              ),
              features: state.features,
              available: state.available,
              task: state.task,
            }
          : OFFLINE,
      );
    });
    return out;
  }
}
