import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { createRedis } from '@app/common';

/** The Redis connections of one process, as Redis sees them. */
export interface RedisClients {
  count: number;
  /** How many of them carry each client name (`(unnamed)` for none). */
  names: Record<string, number>;
}

/** The socket inodes a process holds open (/proc/<pid>/fd → socket:[inode]). */
function socketInodes(pid: number): Set<string> {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const match = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (match) {
        inodes.add(match[1]);
      }
    } catch {
      // closed meanwhile
    }
  }
  return inodes;
}

/** Local ports of the process's TCP connections to `remotePort` (/proc/net/tcp and tcp6, by inode). */
function localPortsTo(pid: number, remotePort: number): Set<number> {
  const inodes = socketInodes(pid);
  const ports = new Set<number>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      if (fields.length < 10 || !inodes.has(fields[9])) {
        continue;
      }
      const local = parseInt(fields[1].split(':')[1], 16);
      const remote = parseInt(fields[2].split(':')[1], 16);
      if (remote === remotePort) {
        ports.add(local);
      }
    }
  }
  return ports;
}

/**
 * Counts the connections a process has open to Redis, exactly: its sockets to Redis's port (from
 * /proc, by inode), matched against CLIENT LIST by their local port, so that a connection counts
 * whatever it is named (or if it is not), and nothing of another process does. The names say which
 * of the process's connections each is.
 */
export async function redisClientsOf(pid: number, redisUrl: string): Promise<RedisClients> {
  const port = Number(new URL(redisUrl).port || 6379);
  const redis = createRedis(redisUrl);
  try {
    const ports = localPortsTo(pid, port);
    const list = (await redis.client('LIST')) as string;
    const names: Record<string, number> = {};
    let count = 0;
    for (const line of list.split('\n')) {
      const addr = /\baddr=\S+:(\d+)\s/.exec(line);
      if (!addr || !ports.has(Number(addr[1]))) {
        continue;
      }
      count++;
      const name = /\bname=(\S*)/.exec(line)?.[1] || '(unnamed)';
      names[name] = (names[name] ?? 0) + 1;
    }
    return { count, names };
  } finally {
    redis.disconnect();
  }
}

/** The most connections seen in any sample, and the names at that sample. */
export function mostClients(samples: RedisClients[]): RedisClients {
  return samples.reduce((a, b) => (b.count > a.count ? b : a), { count: 0, names: {} });
}

/** `3 (switchyard-dispatcher 1, switchyard-dispatcher-sub 1, …)`. */
export function clientsText(c: RedisClients): string {
  const names = Object.entries(c.names)
    .sort()
    .map(([name, n]) => `${name} ${n}`)
    .join(', ');
  return `${c.count}${names ? ` (${names})` : ''}`;
}
