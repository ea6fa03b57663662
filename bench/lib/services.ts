import pg from 'pg';
import { createRedis } from '@app/common';
import type { CpuGroup } from './procfs';

/**
 * The Postgres processes that work for the bench: the backends connected to its database, plus the
 * WAL writer, background writer and checkpointer, which write what those backends change (they serve
 * every database of the server, so another user of the same server adds to them). Read through a
 * connection to the `postgres` database, so that the bench's own probe is not counted.
 */
export class PostgresProcesses implements CpuGroup {
  readonly name = 'postgres';
  private readonly client: pg.Client;
  private readonly database: string;

  constructor(databaseUrl: string) {
    const url = new URL(databaseUrl);
    this.database = decodeURIComponent(url.pathname.slice(1));
    url.pathname = '/postgres';
    this.client = new pg.Client({ connectionString: url.toString() });
  }

  async connect(): Promise<void> {
    await this.client.connect();
  }

  async pids(): Promise<number[]> {
    const { rows } = await this.client.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity
       WHERE datname = $1 OR backend_type IN ('walwriter', 'background writer', 'checkpointer')`,
      [this.database],
    );
    return rows.map((r) => r.pid);
  }

  /** Transactions and rows of the bench database so far. */
  counters(): Promise<DatabaseCounters> {
    return databaseCounters(this.client, this.database);
  }

  async close(): Promise<void> {
    await this.client.end().catch(() => undefined);
  }
}

/** The pid of the Redis server behind a URL (INFO server), which must be on this machine to be measured. */
export async function redisPid(redisUrl: string): Promise<number | null> {
  const redis = createRedis(redisUrl);
  try {
    const info = await redis.info('server');
    const match = /^process_id:(\d+)/m.exec(info);
    return match ? Number(match[1]) : null;
  } finally {
    redis.disconnect();
  }
}

/** Calls per Redis command since the server started (INFO commandstats; server-wide, every database). */
export async function redisCommandCalls(redisUrl: string): Promise<Map<string, number>> {
  const redis = createRedis(redisUrl);
  try {
    const info = await redis.info('commandstats');
    const out = new Map<string, number>();
    for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
      out.set(match[1], Number(match[2]));
    }
    return out;
  } finally {
    redis.disconnect();
  }
}

/** Calls per command between two INFO commandstats samples, most first. */
export function callsDelta(before: Map<string, number>, after: Map<string, number>): [string, number][] {
  return [...after.entries()]
    .map(([cmd, calls]): [string, number] => [cmd, calls - (before.get(cmd) ?? 0)])
    .filter(([, n]) => n > 0)
    .sort((a, b) => b[1] - a[1]);
}

export interface DatabaseCounters {
  commits: number;
  inserted: number;
  updated: number;
  returned: number;
}

/** Transactions and rows of one database (pg_stat_database; backends report them within a second or so). */
export async function databaseCounters(client: pg.Client, database: string): Promise<DatabaseCounters> {
  const { rows } = await client.query<{ c: string; i: string; u: string; r: string }>(
    `SELECT xact_commit AS c, tup_inserted AS i, tup_updated AS u, tup_returned AS r
     FROM pg_stat_database WHERE datname = $1`,
    [database],
  );
  const row = rows[0] ?? { c: '0', i: '0', u: '0', r: '0' };
  return { commits: Number(row.c), inserted: Number(row.i), updated: Number(row.u), returned: Number(row.r) };
}
