import { z } from 'zod';

const port = (fallback: number) => z.coerce.number().int().min(1).max(65535).default(fallback);
const positiveMs = (fallback: number) => z.coerce.number().int().min(1).default(fallback);
const url = (schemes: string[], fallback: string) =>
  z
    .string()
    .default(fallback)
    .refine(
      (value) => {
        try {
          return schemes.includes(new URL(value).protocol);
        } catch {
          return false;
        }
      },
      `must be a URL starting with ${schemes.map((s) => `${s}//`).join(' or ')}`,
    );

/**
 * Every setting Switchyard reads from the environment, with its default. Parsed once at boot by
 * {@link loadConfig}; nothing else reads process.env.
 */
export const configSchema = z
  .object({
    DATABASE_URL: url(['postgresql:', 'postgres:'], 'postgresql://postgres@127.0.0.1:5432/switchyard'),
    REDIS_URL: url(['redis:', 'rediss:'], 'redis://127.0.0.1:6379'),
    /**
     * Seed nodes of a Redis Cluster, `host:port,host:port,…`: when set, every process uses the cluster
     * (and its key names carry hash tags) instead of REDIS_URL.
     */
    REDIS_CLUSTER_NODES: z
      .string()
      .optional()
      .transform((value, ctx) => {
        const seeds = (value ?? '')
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean);
        const nodes = seeds.map((seed) => {
          const match = /^(\[[0-9a-fA-F:]+\]|[^:\s]+):(\d{1,5})$/.exec(seed);
          const port = Number(match?.[2]);
          return match && port >= 1 && port <= 65535 ? { host: match[1].replace(/^\[|\]$/g, ''), port } : null;
        });
        if (nodes.some((node) => node === null)) {
          ctx.addIssue({ code: 'custom', message: 'must be host:port pairs separated by commas' });
          return z.NEVER;
        }
        return nodes.length > 0 ? (nodes as { host: string; port: number }[]) : undefined;
      }),
    /** Port of the api's HTTP server. */
    API_PORT: port(8080),
    /** Port of the dispatcher: its /healthz, /metrics and the devices' socket.io endpoint. */
    DISPATCHER_PORT: port(8081),
    /** Address the HTTP servers listen on. */
    HOST: z.string().min(1).default('0.0.0.0'),
    /** Bearer token for the admin HTTP API; when unset the admin API refuses every request. */
    ADMIN_TOKEN: z.string().min(32, 'must be at least 32 characters').optional(),
    /** When set, /admin is served only on this port (and ADMIN_HOST), not on API_PORT. */
    ADMIN_PORT: z.coerce.number().int().min(1).max(65535).optional(),
    ADMIN_HOST: z.string().min(1).default('127.0.0.1'),
    /** Behind a proxy: the client address comes from X-Forwarded-For (the proxy's own entry aside). */
    TRUST_PROXY: z
      .enum(['true', 'false', '1', '0'])
      .default('false')
      .transform((v) => v === 'true' || v === '1'),
    /**
     * The demo and the tests only: start an embedded Postgres and Redis even when DATABASE_URL and
     * REDIS_URL answer (they are started anyway for a URL that does not answer and was not given).
     */
    SWITCHYARD_EMBEDDED: z
      .enum(['true', 'false', '1', '0'])
      .default('false')
      .transform((v) => v === 'true' || v === '1'),
    /** The demo only: where the embedded Postgres keeps its data (default .switchyard/embedded in the project). */
    SWITCHYARD_EMBEDDED_DIR: z.string().min(1).optional(),
    /** Model used when a request names none; without it such a request gets 400 model_required. */
    DEFAULT_MODEL: z.string().min(1).optional(),
    /** How long a request may wait in its queue for a busy device before 503 queue_timeout. */
    QUEUE_TIMEOUT_MS: positiveMs(60_000),
    /** How long a device has to acknowledge an assignment before the job goes to another device. */
    ASSIGN_ACK_TIMEOUT_MS: positiveMs(5_000),
    /** A device that sends nothing (not even a heartbeat) for this long is considered gone. */
    DEVICE_INACTIVITY_MS: positiveMs(15_000),
    /** A task a device holds that produces no event for this long is ended (its dispatcher is gone). */
    TASK_IDLE_TIMEOUT_MS: positiveMs(120_000),
    /** A request (queue wait included) that has not finished after this long is ended with 504 stream_timeout. */
    MAX_STREAM_MS: positiveMs(600_000),
    /** Most messages in one request (400 beyond). */
    MAX_MESSAGES: z.coerce.number().int().min(1).default(1_000),
    /** Most characters of message content in one request, all messages together (400 beyond). */
    MAX_INPUT_CHARS: z.coerce.number().int().min(1).default(1_000_000),
    /** Request bodies above this many bytes are refused with 413. */
    BODY_LIMIT_BYTES: z.coerce
      .number()
      .int()
      .min(1_024)
      .default(4 * 1024 * 1024),
    /** On SIGTERM, how long in-flight requests (api) and tasks (dispatcher) may take to finish. */
    SHUTDOWN_GRACE_MS: z.coerce.number().int().min(0).default(30_000),
    /** Failed authentications allowed per client address per minute before 429. */
    AUTH_FAILURES_PER_MINUTE: z.coerce.number().int().min(1).default(30),
    /** Most models one device may announce; a longer list is refused whole. */
    DEVICE_MAX_MODELS: z.coerce.number().int().min(1).max(1000).default(64),
    /** Largest event a device may send; a larger one closes its connection (its task is handled as a drop). */
    DEVICE_MAX_EVENT_BYTES: z.coerce
      .number()
      .int()
      .min(1024)
      .default(256 * 1024),
    /** Each device's budget of events per second (bursts of one second's worth); an event over it is dropped. */
    DEVICE_MAX_EVENTS_PER_SECOND: z.coerce.number().int().min(1).default(2_000),
    /** Each device's budget of bytes per second, as its events measure on the wire (bursts of one second's worth). */
    DEVICE_MAX_BYTES_PER_SECOND: z.coerce
      .number()
      .int()
      .min(1024)
      .default(4 * 1024 * 1024),
    /** A device that sends this many invalid, foreign or over-budget events is disconnected. */
    DEVICE_MAX_INVALID_EVENTS: z.coerce.number().int().min(1).default(20),
    /** Failed device handshakes per client address per minute; then the address is refused before any lookup. */
    DEVICE_HANDSHAKE_FAILURES: z.coerce.number().int().min(1).default(30),
    /** A device disconnected for its misdeeds is refused this long, doubled on each repeat (docs/protocol.md). */
    DEVICE_COOLING_OFF_MS: positiveMs(10_000),
    /**
     * How often each network device serving a model with canaries is sent one (jittered by ±25 %, only
     * while it is idle and no job waits for it); a device on probation gets one as soon as it is free.
     */
    CANARY_INTERVAL_MS: positiveMs(600_000),
    /** How many devices may try a job before it fails (a device that drops before the first token). */
    MAX_ATTEMPTS: z.coerce.number().int().min(1).max(20).default(3),
    /**
     * How many times a task whose device was lost after output reached the client may continue on
     * another device (docs/architecture.md, "Resume"); 0 turns resume off for every organization.
     */
    RESUME_MAX_ATTEMPTS: z.coerce.number().int().min(0).max(10).default(2),
    /**
     * The most inputs one device embeds at a time: an embeddings request with more is split into
     * batches of this many, embedded in parallel by the idle devices serving the model.
     */
    EMBED_BATCH_MAX: z.coerce.number().int().min(1).max(2048).default(64),
    /**
     * How many days task records are kept (by `queued_at`); older ended ones are deleted in small
     * batches, and the usage rollups keep their counts. 0 keeps every record.
     */
    TASK_RETENTION_DAYS: z.coerce.number().int().min(0).max(36_500).default(90),
    /**
     * The most task records retention deletes a second. A month's records accrue at a few a second; at
     * 2,000 a second a month of 10 million goes in under an hour and a half, and its WAL stays small
     * beside the request path's.
     */
    TASK_RETENTION_ROWS_PER_SECOND: z.coerce.number().int().min(100).max(1_000_000).default(2_000),
    LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  })
  // One port cannot both serve /admin only and refuse it.
  .refine((c) => c.ADMIN_PORT === undefined || c.ADMIN_PORT !== c.API_PORT, {
    path: ['ADMIN_PORT'],
    message: 'must differ from API_PORT',
  });

export type AppConfig = z.infer<typeof configSchema>;

/** A configuration error: one line per invalid variable. */
export class ConfigError extends Error {}

/** A bad value as the error line shows it: never a secret, and URLs without their password. */
function shown(name: string, value: string): string {
  if (name === 'ADMIN_TOKEN') {
    return '(hidden)';
  }
  if (name.endsWith('_URL')) {
    try {
      const url = new URL(value);
      if (url.password) {
        url.password = '***';
      }
      return JSON.stringify(url.toString());
    } catch {
      return JSON.stringify(value.replace(/\/\/[^@/]*@/, '//***@'));
    }
  }
  return JSON.stringify(value);
}

/** A node of a Redis Cluster, as REDIS_CLUSTER_NODES lists its seeds. */
export interface ClusterNode {
  host: string;
  port: number;
}

/** Where a process finds Redis: one server (REDIS_URL), or a cluster by its seed nodes (REDIS_CLUSTER_NODES). */
export type RedisTarget = { readonly url: string } | { readonly nodes: readonly ClusterNode[] };

/** The target of a configuration: the cluster when REDIS_CLUSTER_NODES is set, else REDIS_URL. */
export function redisTargetOf(config: {
  REDIS_URL: string;
  REDIS_CLUSTER_NODES?: readonly ClusterNode[];
}): RedisTarget {
  return config.REDIS_CLUSTER_NODES?.length ? { nodes: config.REDIS_CLUSTER_NODES } : { url: config.REDIS_URL };
}

/** Parses and validates the configuration; throws a {@link ConfigError} naming every bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): AppConfig {
  // An empty variable counts as unset, as in most shells' `VAR= cmd`.
  const cleaned = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = configSchema.safeParse(cleaned);
  if (parsed.success) {
    return parsed.data;
  }
  const lines = parsed.error.issues.map((issue) => {
    const name = String(issue.path[0] ?? 'environment');
    return `invalid configuration: ${name}=${shown(name, env[name] ?? '')}: ${issue.message}`;
  });
  throw new ConfigError(lines.join('\n'));
}

/**
 * Whether a variable was given (not left to its default): the demo starts an embedded server only for
 * a URL the user did not give. An empty variable counts as unset, as in loadConfig.
 */
export function givenInEnvironment(name: keyof AppConfig, env: NodeJS.ProcessEnv = process.env): boolean {
  return env[name] !== undefined && env[name] !== '';
}

/** Loads the configuration or, for a process entry point, prints the problem and exits 1. */
export function loadConfigOrExit(env: NodeJS.ProcessEnv = process.env): AppConfig {
  try {
    return loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      process.exit(1);
    }
    throw error;
  }
}

/** Nest injection token for the parsed {@link AppConfig}. */
export const APP_CONFIG = Symbol('APP_CONFIG');
