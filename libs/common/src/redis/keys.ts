/**
 * Every Redis key and channel Switchyard uses outside BullMQ's own. These names are persisted:
 * changing one strands the data of a running deployment.
 */
export const keys = {
  /** A task's state while it is in flight (hash), the authority until its record is written. */
  taskState: (taskId: string) => `sy:t:${taskId}`,
  /** The ordered events of one task, dispatcher → api (a stream). */
  taskStream: (taskId: string) => `sy:task:${taskId}`,
  /** Every accepted task transition, in order, for the Postgres writer (a stream with a consumer group). */
  records: 'sy:records',
  /** Tasks in flight, scored by the time past which nobody can still end them (a sorted set). */
  liveTasks: 'sy:live',
  /** Tasks a dispatcher holds (a set), for the survivors when it dies. */
  heldBy: (dispatcherId: string) => `sy:held:${dispatcherId}`,
  /** Devices online for a (pool, model): sorted set of `deviceId|feature,feature` scored by expiry (epoch ms). */
  presence: (pool: string, modelId: string) => `sy:presence:${pool}:${modelId}`,
  /** A queue's recent service time on a device (hash field `ms`, a moving average), for queue etas. */
  serviceTime: (queue: string) => `sy:svc:${queue}`,
  /** A process that is alive (api or dispatcher): a key that expires unless renewed. */
  instance: (kind: InstanceKind, id: string) => `sy:inst:${kind}:${id}`,
  /** The instances of a kind, scored by the expiry of their last renewal (epoch ms). */
  instances: (kind: InstanceKind) => `sy:insts:${kind}`,
  /** Written by readiness checks: a Redis that refuses writes (over maxmemory) is not ready. */
  readinessProbe: 'sy:ready',
  /**
   * A device disconnected for its misdeeds, refused at the handshake while this exists (its PTTL is the
   * wait; its value the device id), by the device's token key (the first 16 hex digits of its token's
   * SHA-256, known before any lookup). The braces keep it in one Cluster slot with its count.
   */
  deviceCoolingOff: (tokenKey: string) => `sy:cool:{${tokenKey}}`,
  /** How many times that device was disconnected lately: each cooling-off is longer; forgotten after a quiet hour. */
  deviceStrikeOuts: (tokenKey: string) => `sy:cool:{${tokenKey}}:n`,
  /** The rate-limiter-flexible prefix of failed device handshakes per client address (`<prefix>:<address>`). */
  deviceHandshakeFailures: 'sy:rl:devfail',
  /** Published by the api after enqueueing: the line (queue name) that has a new job. */
  jobsChannel: 'sy:jobs',
  /** Published by the api when a client goes away: the task id to cancel. */
  cancelChannel: 'sy:cancel',
  /** Published by dispatchers when a (pool, model)'s devices change: `pool model`. */
  presenceChannel: 'sy:presence-changed',
} as const;

export type InstanceKind = 'api' | 'dispatcher';

/** The consumer group of the records stream. */
export const RECORD_WRITERS = 'writers';
