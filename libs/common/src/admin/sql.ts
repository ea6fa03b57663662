import type { Pool, PoolClient } from 'pg';
import type { PrismaClient } from '../prisma/generated/client';

/**
 * What the admin services need of Postgres: plain SQL and a transaction. Plain SQL, not Prisma, so
 * that the CLI never loads Prisma's query compiler (about 0.6 s of a command's start on our
 * machines); the api passes its pg pool, fixtures may pass a Prisma client.
 */
export interface Sql {
  query<R = Record<string, unknown>>(text: string, values?: unknown[]): Promise<R[]>;
  transaction<T>(fn: (sql: Sql) => Promise<T>): Promise<T>;
}

type PrismaLike = Pick<PrismaClient, '$queryRawUnsafe' | '$transaction'>;

function isPrisma(db: Pool | PoolClient | PrismaLike): db is PrismaLike {
  return typeof (db as PrismaLike).$queryRawUnsafe === 'function';
}

function fromClient(client: Pool | PoolClient): Sql {
  return {
    query: async <R>(text: string, values: unknown[] = []) => (await client.query(text, values)).rows as R[],
    transaction: async <T>(fn: (sql: Sql) => Promise<T>) => {
      const conn = 'release' in client ? client : await client.connect();
      try {
        await conn.query('BEGIN');
        const result = await fn(fromClient(conn));
        await conn.query('COMMIT');
        return result;
      } catch (error) {
        // Rollback after an error: the error thrown below is the one to report.
        await conn.query('ROLLBACK').catch(() => undefined);
        throw error;
      } finally {
        if (conn !== client) {
          conn.release();
        }
      }
    },
  };
}

function fromPrisma(db: PrismaLike): Sql {
  return {
    query: <R>(text: string, values: unknown[] = []) => db.$queryRawUnsafe<R[]>(text, ...values),
    transaction: <T>(fn: (sql: Sql) => Promise<T>) => db.$transaction<T>((tx) => fn(fromPrisma(tx))),
  };
}

/** SQL on a pg pool (or client), or on a Prisma client. */
export function sqlOf(db: Pool | PoolClient | PrismaLike): Sql {
  return isPrisma(db) ? fromPrisma(db) : fromClient(db);
}

/**
 * The SQLSTATE of a failed statement: pg's error code, or, through Prisma's raw queries, the driver
 * adapter's original code (Prisma's own code there is P2010 for any failed raw query).
 */
export function sqlState(error: unknown): string | undefined {
  const e = error as {
    code?: unknown;
    meta?: { driverAdapterError?: { cause?: { originalCode?: unknown } } };
  } | null;
  const original = e?.meta?.driverAdapterError?.cause?.originalCode;
  if (typeof original === 'string') {
    return original;
  }
  return typeof e?.code === 'string' && /^(?!P\d{4}$)[0-9A-Z]{5}$/.test(e.code) ? e.code : undefined;
}
