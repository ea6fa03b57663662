import { execFile, spawn, spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
// Not the @app/common index, which loads all of libs/common (see embedded-redis.ts).
import { canBind, freePort } from '@app/common/lifecycle/free-port';
import { readyServer } from './server-process';

/** How long one redis-server may take to say it is ready. */
const START_TIMEOUT_MS = 15_000;
/**
 * How long `redis-cli --cluster create` may take: it waits for the nodes to meet in steps of a second,
 * about one step on a quiet machine.
 */
const CREATE_TIMEOUT_MS = 30_000;
/** How long the nodes may take, once created, to agree on the cluster and to attach their replicas. */
const SETTLE_TIMEOUT_MS = 30_000;
/** How often the settling cluster is asked again. */
const POLL_MS = 50;
/** How long one question to a node may take: they are all on this machine. */
const ASK_TIMEOUT_MS = 2_000;
/** Redis Cluster's number of hash slots, fixed by its protocol. */
const SLOTS = 16_384;
/** Signals that pause or resume a process rather than end it: kill() does not wait for an exit after them. */
const PAUSING: NodeJS.Signals[] = ['SIGSTOP', 'SIGTSTP', 'SIGCONT'];

/** How startEmbeddedRedisCluster lays out its cluster. */
export interface EmbeddedRedisClusterOptions {
  /** Masters, among which the 16384 slots are shared (default 3, the least redis-cli creates a cluster of). */
  masters?: number;
  /** Replicas of each master (default 1): a killed master is failed over to one of them. */
  replicasPerMaster?: number;
  /**
   * The first of a block of consecutive ports, all of which must be free: the nodes' client ports
   * (basePort, basePort+1 …), then their cluster bus ports. Default: each port the kernel's pick of a
   * free one.
   */
  basePort?: number;
  /**
   * The directory of the nodes' cluster files (nodes-<port>.conf), kept at stop; those of this
   * cluster's ports are removed at start, since a node that finds one joins its old cluster instead.
   * Default: a temporary directory of its own, removed at stop.
   */
  dataDir?: string;
  /**
   * cluster-node-timeout (default 1000): how long a node may not answer before it is suspected failing.
   * Redis's own default (15 s) would make a failover test wait a quarter of a minute; at one second a
   * killed master is failed over to its replica in a couple of seconds.
   */
  nodeTimeoutMs?: number;
}

/** A master as the cluster sees it now (a failover changes which node it is). */
export interface ClusterMaster {
  /** Its client port on 127.0.0.1. */
  port: number;
  /** Its redis-server's process id. */
  pid: number;
  /** Its node id (40 hex characters). */
  id: string;
  /** The ranges of slots it serves, [first, last] inclusive. */
  slots: [number, number][];
}

/** One node's process. */
export interface ClusterProcess {
  port: number;
  pid: number;
  /** False once the process has exited (killed, or stopped). */
  running: boolean;
}

/**
 * A Redis Cluster of this machine's redis-server processes on 127.0.0.1, for the tests, the bench and
 * the demo: started, created, and settled (every node says cluster_state:ok, agrees on who is master
 * and replica, and every replica is in sync with its master) before it is handed out.
 */
export interface EmbeddedRedisCluster {
  /** Every node (the masters first, as created): the seed list for a cluster client (ioredis `new Cluster(nodes)`). */
  nodes: { host: string; port: number }[];
  /** The same, as `127.0.0.1:p1,127.0.0.1:p2,…` (the format of REDIS_CLUSTER_NODES). */
  seeds: string;
  /** One line for the operator: what it is and where. */
  description: string;
  /** The directory of its nodes' cluster files. */
  dataDir: string;
  /**
   * The masters now, as CLUSTER NODES of a running node says: without those it marks failing (a
   * master killed moments ago is listed until the cluster notices, within about nodeTimeoutMs).
   */
  masters(): Promise<ClusterMaster[]>;
  /** Every node's process, running or not. */
  processes(): ClusterProcess[];
  /**
   * Sends `signal` to the node on `port` (for failover tests) and waits for its process to exit, but
   * after SIGSTOP, SIGTSTP and SIGCONT, which pause or resume it (a hung node, then a recovered one).
   */
  kill(port: number, signal?: NodeJS.Signals): Promise<void>;
  /** Stops every node still running, waits for their processes to end, and removes its own data directory. */
  stop(): Promise<void>;
}

/** A started redis-server of the cluster. */
interface Node {
  port: number;
  child: ChildProcess;
  stop: () => Promise<void>;
}

/** Whether both of the machine's redis-server and redis-cli run. */
function hasRedisTools(): boolean {
  const runs = (tool: string) => spawnSync(tool, ['--version'], { stdio: 'ignore' }).status === 0;
  return runs('redis-server') && runs('redis-cli');
}

const isRunning = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;

/** `count` distinct free ports: the block from basePort, or as many of the kernel's picks. */
async function choosePorts(count: number, options: EmbeddedRedisClusterOptions): Promise<number[]> {
  if (options.basePort !== undefined) {
    const ports = Array.from({ length: count }, (_, i) => options.basePort! + i);
    if (!Number.isInteger(options.basePort) || options.basePort < 1 || ports[count - 1] > 65_535) {
      throw new Error(`basePort ${options.basePort}: a cluster of this size needs ports up to ${ports[count - 1]}`);
    }
    for (const port of ports) {
      if (!(await canBind(port))) {
        throw new Error(`port ${port} (of the block from basePort ${options.basePort}) is taken`);
      }
    }
    return ports;
  }
  const ports = new Set<number>();
  // The kernel may hand out again a port it just handed out (nothing listens on it until the nodes start).
  for (let tries = 0; ports.size < count; tries++) {
    if (tries > count * 10) {
      throw new Error(`no ${count} distinct free ports from the kernel after ${tries} tries`);
    }
    ports.add(await freePort());
  }
  return [...ports];
}

/**
 * One redis-server in cluster mode. Its cluster bus port is chosen as its client port is, rather than
 * Redis's default (the client port + 10000): that one is past 65535 for a kernel's pick above 55535,
 * and is never checked to be free.
 */
async function startNode(port: number, busPort: number, dataDir: string, nodeTimeoutMs: number): Promise<Node> {
  const configFile = join(dataDir, `nodes-${port}.conf`);
  await rm(configFile, { force: true });
  const args = [
    ...['--port', String(port), '--bind', '127.0.0.1', '--protected-mode', 'no'],
    ...['--save', '', '--appendonly', 'no', '--dir', dataDir],
    // As the single embedded redis-server: BullMQ refuses a Redis that may evict its keys.
    ...['--maxmemory-policy', 'noeviction'],
    ...['--cluster-enabled', 'yes', '--cluster-port', String(busPort), '--cluster-config-file', configFile],
    ...['--cluster-node-timeout', String(nodeTimeoutMs)],
    // A master waits 5 s by default before a replica's first (diskless) sync, for more replicas to share
    // it: every start would wait for it.
    ...['--repl-diskless-sync-delay', '0'],
  ];
  // A process group of its own, as the single embedded redis-server (see startEmbeddedPostgres).
  const child = spawn('redis-server', args, { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  const stop = await readyServer(child, {
    name: `redis-server :${port}`,
    ready: /Ready to accept connections/,
    timeoutMs: START_TIMEOUT_MS,
    stopSignal: 'SIGTERM',
  });
  return { port, child, stop };
}

/** Asks the node on `port` one command, on a connection of its own that is closed after. */
async function ask(port: number, ...command: [string, ...string[]]): Promise<string> {
  const redis = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: ASK_TIMEOUT_MS,
    commandTimeout: ASK_TIMEOUT_MS,
  });
  // The connection's own error says why (ECONNREFUSED …); the command's only says it closed.
  let cause: string | null = null;
  redis.on('error', (error: Error) => (cause ??= error.message));
  try {
    await redis.connect();
    return String(await redis.call(...command));
  } catch (error) {
    throw new Error(`127.0.0.1:${port} ${command.join(' ')}: ${cause ?? (error as Error).message}`);
  } finally {
    redis.disconnect();
  }
}

/** One line of CLUSTER NODES. */
interface NodeLine {
  id: string;
  port: number;
  flags: string[];
  /** The id of the master it replicates, or null (a master). */
  masterId: string | null;
  slots: [number, number][];
}

/** CLUSTER NODES, line by line (slots being moved, `[slot->-id]`, left out). */
function parseNodes(text: string): NodeLine[] {
  return text
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '')
    .map((line) => {
      const [id, address, flags, master, , , , , ...slots] = line.split(' ');
      return {
        id,
        port: Number(/:(\d+)@/.exec(address)?.[1] ?? -1),
        flags: flags.split(','),
        masterId: master === '-' ? null : master,
        slots: slots
          .filter((slot) => !slot.startsWith('['))
          .map((slot): [number, number] => {
            const [first, last = first] = slot.split('-').map(Number);
            return [first, last];
          }),
      };
    });
}

/** A node no node marks failing, being met, or without an address. */
const healthy = (line: NodeLine) => !line.flags.some((flag) => ['fail', 'fail?', 'handshake', 'noaddr'].includes(flag));

/** Null when the node on `port` sees the whole cluster as it was created, else what it lacks. */
async function nodeSettled(port: number, masters: number, replicas: number): Promise<string | null> {
  const info = await ask(port, 'CLUSTER', 'INFO');
  if (!/^cluster_state:ok\r?$/m.test(info)) {
    return `${port} says ${/^cluster_state:\w+/m.exec(info)?.[0] ?? 'no cluster_state'}`;
  }
  const lines = parseNodes(await ask(port, 'CLUSTER', 'NODES'));
  const total = masters * (1 + replicas);
  const serving = lines.filter((line) => line.flags.includes('master') && line.slots.length > 0 && healthy(line));
  const covered = serving.reduce((sum, line) => sum + line.slots.reduce((n, [a, b]) => n + b - a + 1, 0), 0);
  if (lines.length !== total || serving.length !== masters || covered !== SLOTS) {
    return `${port} knows ${lines.length} nodes, ${serving.length} masters serving ${covered} slots`;
  }
  for (const master of serving) {
    const attached = lines.filter((line) => line.masterId === master.id && healthy(line)).length;
    if (attached !== replicas) {
      return `${port} sees ${attached} replicas of ${master.port}`;
    }
  }
  const replication = await ask(port, 'INFO', 'replication');
  if (/^role:slave\r?$/m.test(replication) && !/^master_link_status:up\r?$/m.test(replication)) {
    return `${port} is a replica not yet in sync with its master`;
  }
  return null;
}

/**
 * Waits until every node sees the cluster whole: `redis-cli --cluster create` returns once the nodes
 * agree on the slots, while some of them still take the replicas for masters, and before the replicas'
 * first sync.
 */
async function waitSettled(nodes: Node[], masters: number, replicas: number): Promise<void> {
  const deadline = Date.now() + SETTLE_TIMEOUT_MS;
  for (;;) {
    const exited = nodes.find((node) => !isRunning(node.child));
    if (exited) {
      throw new Error(`redis-server :${exited.port} exited while the cluster settled`);
    }
    const lacking = await Promise.all(
      nodes.map((node) => nodeSettled(node.port, masters, replicas).catch((error: Error) => error.message)),
    );
    const first = lacking.find((what) => what !== null);
    if (first === undefined) {
      return;
    }
    if (Date.now() > deadline) {
      throw new Error(`the Redis Cluster did not settle within ${SETTLE_TIMEOUT_MS} ms: ${first}`);
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** A whole number of at least `least`, or the default. */
function count(name: string, value: number | undefined, fallback: number, least: number): number {
  const n = value ?? fallback;
  if (!Number.isInteger(n) || n < least) {
    throw new Error(`${name} must be a whole number of at least ${least} (got ${n})`);
  }
  return n;
}

/**
 * Starts a Redis Cluster of the machine's redis-server (7.0 or later: it sets each node's cluster bus
 * port): masters × (1 + replicasPerMaster) nodes on 127.0.0.1, created with `redis-cli --cluster
 * create`, keeping nothing on disk but the nodes' cluster files, each node in a process group of its
 * own (as startEmbeddedRedis's). Resolves once the cluster is settled; on failure, nothing it started
 * is left running.
 */
export async function startEmbeddedRedisCluster(
  options: EmbeddedRedisClusterOptions = {},
): Promise<EmbeddedRedisCluster> {
  const masters = count('masters', options.masters, 3, 3);
  const replicas = count('replicasPerMaster', options.replicasPerMaster, 1, 0);
  const nodeTimeoutMs = count('nodeTimeoutMs', options.nodeTimeoutMs, 1_000, 1);
  if (!hasRedisTools()) {
    // redis-memory-server, the single embedded Redis's fallback, builds no redis-cli.
    throw new Error('an embedded Redis Cluster needs redis-server and redis-cli (7.0 or later) on the PATH');
  }
  const total = masters * (1 + replicas);
  const ports = await choosePorts(total * 2, options);
  const ownDir = options.dataDir === undefined;
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), 'switchyard-redis-cluster-')));
  await mkdir(dataDir, { recursive: true });

  const nodes: Node[] = [];
  let stopping: Promise<void> | null = null;
  const stop = () =>
    (stopping ??= (async () => {
      for (const node of nodes) {
        // A paused node would take a SIGTERM only once resumed (after the stop's grace period).
        if (isRunning(node.child)) {
          node.child.kill('SIGCONT');
        }
      }
      await Promise.all(nodes.map((node) => node.stop()));
      if (ownDir) {
        await rm(dataDir, { recursive: true, force: true });
      }
    })());

  try {
    const started = await Promise.allSettled(
      Array.from({ length: total }, (_, i) => startNode(ports[i], ports[total + i], dataDir, nodeTimeoutMs)),
    );
    for (const result of started) {
      if (result.status === 'fulfilled') {
        nodes.push(result.value);
      }
    }
    const failed = started.find((result) => result.status === 'rejected');
    if (failed) {
      throw failed.reason;
    }
    const addresses = nodes.map((node) => `127.0.0.1:${node.port}`);
    await promisify(execFile)(
      'redis-cli',
      ['--cluster', 'create', ...addresses, '--cluster-replicas', String(replicas), '--cluster-yes'],
      { timeout: CREATE_TIMEOUT_MS },
    ).catch((error: Error & { stdout?: string; stderr?: string }) => {
      throw new Error(
        `redis-cli --cluster create failed: ${error.message}\n${error.stdout ?? ''}${error.stderr ?? ''}`,
      );
    });
    await waitSettled(nodes, masters, replicas);
  } catch (error) {
    await stop();
    throw error;
  }

  const byPort = new Map(nodes.map((node) => [node.port, node]));
  const nodeAt = (port: number) => {
    const node = byPort.get(port);
    if (!node) {
      throw new Error(`no node of this cluster on port ${port}`);
    }
    return node;
  };
  const seeds = nodes.map((node) => `127.0.0.1:${node.port}`).join(',');
  const replicaWord = replicas === 1 ? 'replica' : 'replicas';
  return {
    nodes: nodes.map((node) => ({ host: '127.0.0.1', port: node.port })),
    seeds,
    dataDir,
    description: `Redis Cluster (this machine's redis-server) of ${masters} masters with ${replicas} ${replicaWord} each on ${seeds}, nothing kept on disk but its node files in ${dataDir}`,
    async masters() {
      const errors: string[] = [];
      for (const node of nodes.filter((n) => isRunning(n.child))) {
        try {
          const lines = parseNodes(await ask(node.port, 'CLUSTER', 'NODES'));
          return lines
            .filter((line) => line.flags.includes('master') && healthy(line))
            .map((line) => ({
              port: line.port,
              pid: byPort.get(line.port)?.child.pid ?? -1,
              id: line.id,
              slots: line.slots,
            }));
        } catch (error) {
          // A node paused (SIGSTOP) or on its way out: another one answers.
          errors.push((error as Error).message);
        }
      }
      throw new Error(
        `no node of the cluster answers CLUSTER NODES${errors.length > 0 ? `: ${errors.join('; ')}` : ''}`,
      );
    },
    processes() {
      return nodes.map((node) => ({ port: node.port, pid: node.child.pid ?? -1, running: isRunning(node.child) }));
    },
    async kill(port, signal = 'SIGKILL') {
      const { child } = nodeAt(port);
      if (!isRunning(child)) {
        return;
      }
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill(signal);
      if (!PAUSING.includes(signal)) {
        await exited;
      }
    },
    stop,
  };
}
