import { deviceStateCodec } from '../live/device-state-codec';
import { taskStateCodec } from '../tasks/task-state-codec';
import type { HashFieldDoc } from './hash-codec';

/** The Redis type of a key; `channel` for a Pub/Sub channel, `various` for a family of keys of several types. */
export type RedisKeyType = 'string' | 'hash' | 'list' | 'set' | 'sorted set' | 'stream' | 'channel' | 'various';

/**
 * Where a key lives on a Redis Cluster (see key-space.ts): with the hash tag of its task's partition, of
 * its queue's, of its device's or of its process kind's, or one key per partition (a global set or stream
 * split so that its load spreads over the masters). A key without one is used alone, by one command
 * (or carries its own braces). On a single server every name is as the catalog writes it.
 */
export type KeyPlacement = 'task' | 'queue' | 'device' | 'kind' | 'partition';

/** A key's name: a constant, or a function of the parts that vary. */
type KeyName = string | ((...parts: never) => string);

/** One key (or channel, or family of keys) of the catalog: its name and what the docs say of it. */
interface KeyEntry<N extends KeyName = KeyName> {
  readonly name: N;
  /**
   * The parts of the name that vary, as the docs write them: one per parameter of `name`; for a
   * prefix, the parts another library appends to it, each after a `:`.
   */
  readonly parts?: readonly string[];
  /** `name` is a prefix that a library (rate-limiter-flexible, BullMQ) completes. */
  readonly prefix?: boolean;
  /** Where it lives on a cluster; absent for a key used alone. Read only by key-space.ts and the docs. */
  readonly placement?: KeyPlacement;
  readonly type: RedisKeyType;
  /** What it holds; for a channel, what a message says. */
  readonly holds: string;
  /** How long it lives, and what removes it. */
  readonly lifetime: string;
  /** A hash's fields, from its codec. */
  readonly fields?: readonly HashFieldDoc[];
}

/** The entries, with their names' types kept (so that `keys` keeps each function's signature). */
const catalog = <C extends Record<string, KeyEntry>>(entries: C) => entries;

/**
 * Every Redis key and channel Switchyard uses, BullMQ's included, each with its type, what it holds
 * and its lifetime: the code builds names only from here (a unit test fails on a `sy:` literal
 * anywhere else in apps/ and libs/; Lua scripts are passed every key they touch, see lua-keys.spec.ts), and docs/architecture.md's
 * "Redis keys" table is written from it (redisKeyDocs). These names are persisted: changing one
 * strands the data of a running deployment.
 */
export const REDIS_KEYS = catalog({
  // Tasks.
  taskState: {
    placement: 'task',
    name: (taskId: string) => `sy:t:${taskId}`,
    parts: ['task id'],
    type: 'hash',
    holds: "a task's state while it is in flight, the authority until its record is written",
    lifetime: 'its deadline + 10 min; 10 min once it ended',
    fields: taskStateCodec.describe(),
  },
  taskStream: {
    placement: 'task',
    name: (taskId: string) => `sy:task:${taskId}`,
    parts: ['task id'],
    type: 'stream',
    holds: 'the ordered events of one task, dispatcher → api',
    lifetime: '600 s after its last write; deleted by the api when the request ends',
  },
  records: {
    placement: 'partition',
    name: 'sy:records',
    type: 'stream',
    holds: 'every accepted task transition, in order, for the Postgres writers (consumer group `writers`)',
    lifetime: 'an entry is deleted once written',
  },
  liveTasks: {
    placement: 'partition',
    name: 'sy:live',
    type: 'sorted set',
    holds: 'the tasks in flight, scored by their deadline',
    lifetime: 'a task leaves when it ends, or when the reaper finds its state gone',
  },
  heldBy: {
    placement: 'partition',
    name: (dispatcherId: string) => `sy:held:${dispatcherId}`,
    parts: ['dispatcher id'],
    type: 'set',
    holds: 'the tasks a dispatcher holds, for the survivors when it dies',
    lifetime: 'a task leaves at its requeue or end, or when a survivor took it over',
  },
  streamWake: {
    placement: 'partition',
    name: (readerId: string) => `sy:wake:${readerId}`,
    parts: ['reader id'],
    type: 'stream',
    holds:
      "on a cluster only: a mark that interrupts an api's blocking read of a partition's task streams, so that a new request's stream is read at once",
    lifetime: 'one entry (MAXLEN 1); 1 h after its last mark',
  },
  serviceTime: {
    placement: 'queue',
    name: (queue: string) => `sy:svc:${queue}`,
    parts: ['queue'],
    type: 'hash',
    holds: "`ms`: the queue's recent service time on a device (a moving average), for queue etas",
    lifetime: '1 h after its last completed task',
  },

  // Devices.
  presence: {
    placement: 'queue',
    name: (pool: string, modelId: string) => `sy:presence:${pool}:${modelId}`,
    parts: ['pool', 'model id'],
    type: 'sorted set',
    holds: 'the devices online for a (pool, model): `<device id>|<feature,feature>`, scored by expiry (epoch ms)',
    lifetime: 'an entry 15 s, renewed every 5 s; the key 30 s',
  },
  presenceChannel: {
    placement: 'partition',
    name: 'sy:presence-changed',
    type: 'channel',
    holds:
      "`<pool> <model id>`: the devices of that (pool, model) changed; on a cluster a sharded channel per partition, the queue's",
    lifetime: '—',
  },
  deviceState: {
    placement: 'device',
    name: (deviceId: string) => `sy:dev:${deviceId}`,
    parts: ['device id'],
    type: 'hash',
    holds: "a connected device's live state, kept by its dispatcher",
    lifetime: '30 s, renewed every 5 s; deleted when the device disconnects',
    fields: deviceStateCodec.describe(),
  },
  deviceCoolingOff: {
    // The braces keep it in one Cluster slot with its count.
    name: (tokenKey: string) => `sy:cool:{${tokenKey}}`,
    parts: ['token key'],
    type: 'string',
    holds:
      "a device disconnected for its misdeeds, refused at the handshake while this exists (value: its id), by its token's key (the first 16 hex digits of its SHA-256)",
    lifetime: 'its cooling-off: DEVICE_COOLING_OFF_MS, doubled with each repeat',
  },
  deviceStrikeOuts: {
    name: (tokenKey: string) => `sy:cool:{${tokenKey}}:n`,
    parts: ['token key'],
    type: 'string',
    holds: 'how many times that device was disconnected lately: each cooling-off is longer',
    lifetime: 'its cooling-off + 1 h',
  },
  deviceHandshakeFailures: {
    name: 'sy:rl:devfail',
    prefix: true,
    parts: ['address'],
    type: 'string',
    holds: "a client address's failed device handshakes this minute (rate-limiter-flexible)",
    lifetime: '60 s',
  },

  // Processes.
  instance: {
    placement: 'kind',
    name: (kind: InstanceKind, id: string) => `sy:inst:${kind}:${id}`,
    parts: ['api|dispatcher', 'instance id'],
    type: 'string',
    holds: 'a process that is alive (value: the expiry of its last renewal)',
    lifetime: '3 s, renewed every second',
  },
  instances: {
    placement: 'kind',
    name: (kind: InstanceKind) => `sy:insts:${kind}`,
    parts: ['api|dispatcher'],
    type: 'sorted set',
    holds: 'the instances of a kind, scored by the expiry of their last renewal (epoch ms)',
    lifetime: 'an instance leaves once taken over (dispatchers), or 1 h after it lapsed',
  },
  takeoverLock: {
    name: (dispatcherId: string) => `sy:takeover:${dispatcherId}`,
    parts: ['dispatcher id'],
    type: 'string',
    holds: "the survivor taking over a dead dispatcher's tasks (value: its id)",
    lifetime: '30 s',
  },
  readinessProbe: {
    name: 'sy:ready',
    type: 'string',
    holds: 'written by readiness checks: a Redis that refuses writes (over maxmemory) is not ready',
    lifetime: '10 s',
  },

  // Queues: the lines are BullMQ queues under the prefix `sy`.
  queuePrefix: {
    placement: 'queue',
    name: 'sy',
    prefix: true,
    parts: ['line', 'BullMQ key'],
    type: 'various',
    holds: "BullMQ's other keys of a line: `meta`, `events`, `marker`, `stalled-check`, …",
    lifetime: "BullMQ's",
  },
  lineWait: {
    placement: 'queue',
    name: (line: string) => `sy:${line}:wait`,
    parts: ['line'],
    type: 'list',
    holds: "a line's waiting job ids, oldest at the right end (BullMQ's)",
    lifetime: 'a job leaves when taken or removed',
  },
  lineActive: {
    placement: 'queue',
    name: (line: string) => `sy:${line}:active`,
    parts: ['line'],
    type: 'list',
    holds: "a line's jobs that dispatchers took (BullMQ's)",
    lifetime: 'a job leaves when it ends or is put back',
  },
  lineJob: {
    placement: 'queue',
    name: (line: string, jobId: string) => `sy:${line}:${jobId}`,
    parts: ['line', 'task id'],
    type: 'hash',
    holds: "a job (BullMQ's), with the request text; its id is the task id",
    lifetime: 'removed when the job ends',
  },
  lineJobLock: {
    placement: 'queue',
    name: (line: string, jobId: string) => `sy:${line}:${jobId}:lock`,
    parts: ['line', 'task id'],
    type: 'string',
    holds: "the lock token of the dispatcher that took the job: the claim (BullMQ's)",
    lifetime: '`MAX_STREAM_MS` + 60 s, never renewed',
  },
  fairPasses: {
    placement: 'queue',
    name: (queue: string) => `sy:fair:${queue}`,
    parts: ['queue'],
    type: 'sorted set',
    holds: "a queue's backlogged lines, scored by pass (fair share's virtual time)",
    lifetime: 'a line leaves when a pick finds it empty',
  },
  fairState: {
    placement: 'queue',
    name: (queue: string) => `sy:fairs:${queue}`,
    parts: ['queue'],
    type: 'hash',
    holds:
      "fair share's state of a queue: `<line>` a line's stride, `_v` the queue's virtual time, `p:<line>` a line's pass when it went idle",
    lifetime: 'no expiry',
  },
  backlog: {
    placement: 'partition',
    name: 'sy:backlog',
    type: 'sorted set',
    holds: 'the queues with backlogged lines, for the dispatchers’ safety sweep',
    lifetime: 'a queue leaves when none of its lines is backlogged',
  },
  stalledSweep: {
    name: 'sy:stalled-sweep',
    type: 'string',
    holds: "the dispatcher whose turn it is to run the lines' stalled-job checks",
    lifetime: '29 s',
  },
  jobsChannel: {
    placement: 'partition',
    name: 'sy:jobs',
    type: 'channel',
    holds: "a line (queue name) with a new or returned job; on a cluster a sharded channel per partition, the queue's",
    lifetime: '—',
  },
  cancelChannel: {
    placement: 'partition',
    name: 'sy:cancel',
    type: 'channel',
    holds:
      "a task id to stop on its device (its client went away); on a cluster a sharded channel per partition, the task's",
    lifetime: '—',
  },

  // Limits and sessions (api).
  requestsPerMinute: {
    name: 'sy:rl:rpm',
    prefix: true,
    parts: ['org id'],
    type: 'string',
    holds: "an organization's requests this minute (rate-limiter-flexible)",
    lifetime: '60 s',
  },
  concurrencySlots: {
    name: (orgId: string) => `sy:limit:concurrency:${orgId}`,
    parts: ['org id'],
    type: 'sorted set',
    holds: "an organization's task ids in flight, scored by expiry",
    lifetime: 'an entry leaves when its task ends, or `QUEUE_TIMEOUT_MS` + `MAX_STREAM_MS` + 60 s after it was taken',
  },
  queuedSlots: {
    name: (orgId: string, modelId: string) => `sy:limit:queued:${orgId}:${modelId}`,
    parts: ['org id', 'model id'],
    type: 'sorted set',
    holds: "an organization's task ids waiting for a model, scored by expiry",
    lifetime: 'an entry leaves when its task is assigned or ends, or at its expiry',
  },
  orgTokensSpent: {
    // The org id in braces: an org's counters and its keys' share a slot on a cluster, so that one MGET
    // reads both and one script adds to both.
    name: (orgId: string, month: string) => `sy:spent:{${orgId}}:${month}`,
    parts: ['org id', 'month (YYYY-MM)'],
    type: 'string',
    holds:
      'the tokens an organization with a monthly budget used in a month (UTC): added as its tasks end, raised to what Postgres counted by the budget reconciler',
    lifetime: 'until the end of the following month',
  },
  keyTokensSpent: {
    name: (orgId: string, keyId: string, month: string) => `sy:spent:{${orgId}}:key:${keyId}:${month}`,
    parts: ['org id', 'key id', 'month (YYYY-MM)'],
    type: 'string',
    holds: 'the tokens an API key with a monthly budget used in a month (UTC), as for an organization',
    lifetime: 'until the end of the following month',
  },
  apiKeyFailures: {
    name: 'sy:rl:authfail',
    prefix: true,
    parts: ['address'],
    type: 'string',
    holds: "a client address's failed API-key authentications this minute (rate-limiter-flexible)",
    lifetime: '60 s',
  },
  adminTokenFailures: {
    name: 'sy:rl:adminfail',
    prefix: true,
    parts: ['address'],
    type: 'string',
    holds: "a client address's failed admin-token authentications this minute (rate-limiter-flexible)",
    lifetime: '60 s',
  },
  adminSession: {
    name: (sessionHash: string) => `sy:admin-session:${sessionHash}`,
    parts: ['SHA-256 of the session id'],
    type: 'string',
    holds: 'a dashboard session (value: the fingerprint of the admin token that opened it)',
    lifetime: '12 h, or until signed out',
  },
});

type Catalog = typeof REDIS_KEYS;

/** The catalog's ids of the keys that have a placement (named only through a KeySpace). */
type PlacedId = { [K in keyof Catalog]: Catalog[K] extends { placement: KeyPlacement } ? K : never }[keyof Catalog];

const names = Object.fromEntries(Object.entries(REDIS_KEYS).map(([id, entry]) => [id, entry.name]));

/**
 * The names of the keys used alone and of the channels, by their catalog entry: a constant, or a
 * function of the parts. The keys with a placement are named by a KeySpace (key-space.ts), which knows
 * the layout: on a cluster their names carry a hash tag.
 */
export const keys = Object.fromEntries(
  Object.entries(names).filter(([id]) => !(REDIS_KEYS as Record<string, KeyEntry>)[id].placement),
) as { readonly [K in Exclude<keyof Catalog, PlacedId>]: Catalog[K]['name'] };

/** Every name as a single server has it, placed keys included: for key-space.ts only. */
export const singleServerNames = names as { readonly [K in keyof Catalog]: Catalog[K]['name'] };

export type InstanceKind = 'api' | 'dispatcher';

/** The consumer group of the records stream. */
export const RECORD_WRITERS = 'writers';

/** What the docs say of one key, channel or family of keys. */
export interface RedisKeyDoc {
  /** The catalog's name for it (`keys.<id>`). */
  id: keyof Catalog;
  /** The name, each part that varies written `<part>`: `sy:t:<task id>`. */
  pattern: string;
  type: RedisKeyType;
  /** Its name on a Redis Cluster, the hash tag written `{<whose tag>}`; as `pattern` for a key used alone. */
  clusterPattern: string;
  holds: string;
  lifetime: string;
  /** A hash's fields, when its codec defines them. */
  fields?: readonly HashFieldDoc[];
}

/** The pattern of an entry's name: its function called with `<part>` for each part, or its prefix followed by them. */
function patternOf(entry: KeyEntry): string {
  const parts = (entry.parts ?? []).map((part) => `<${part}>`);
  if (typeof entry.name === 'function') {
    return (entry.name as (...parts: string[]) => string)(...parts);
  }
  return [entry.name, ...(entry.prefix ? parts : [])].join(':');
}

/** How the docs write each placement's hash tag. */
const TAG_OF: Record<KeyPlacement, string> = {
  task: "<task's tag>",
  queue: "<queue's tag>",
  device: "<device's tag>",
  kind: "<kind's tag>",
  partition: '<partition tag>',
};

/** A single server's name with a hash tag: `sy:<rest>` becomes `sy:{<tag>}:<rest>`. */
export function tagged(tag: string, name: string): string {
  return name === 'sy' ? `sy:{${tag}}` : `sy:{${tag}}:${name.slice('sy:'.length)}`;
}

/** A tagged name as a single server has it (tagged's inverse). */
export function untagged(key: string): string {
  return `sy:${key.slice(key.indexOf('}:') + 2)}`;
}

/** The catalog as the docs' "Redis keys" table lists it, in its order. */
export function redisKeyDocs(): RedisKeyDoc[] {
  return (Object.entries(REDIS_KEYS) as [keyof Catalog, KeyEntry][]).map(([id, entry]) => ({
    id,
    pattern: patternOf(entry),
    type: entry.type,
    clusterPattern: entry.placement ? tagged(TAG_OF[entry.placement], patternOf(entry)) : patternOf(entry),
    holds: entry.holds,
    lifetime: entry.lifetime,
    ...(entry.fields ? { fields: entry.fields } : {}),
  }));
}

/**
 * The part of a key found by a scan, from its one-part key function (that function's inverse):
 * `keyPart(keys.lineActive, 'sy:chat.x.y:active')` is `chat.x.y`.
 */
export function keyPart(name: (part: string) => string, key: string): string {
  const [before, after] = name('\u0000').split('\u0000');
  return key.slice(before.length, key.length - after.length);
}
