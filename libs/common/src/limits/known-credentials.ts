/**
 * Misses share one refresh, and refreshes start at most this often: a flood of distinct wrong
 * credentials costs a process at most 4 Postgres queries a second in all, whatever its rate. A
 * credential created a moment ago (on another instance, by the CLI) is found by the next refresh: its
 * first use here waits up to this long, and only while such a flood is on (otherwise the refresh
 * starts at once).
 */
export const MIN_REFRESH_INTERVAL_MS = 250;
/**
 * A refresh reads the credentials created since the previous one, with this overlap in the database's
 * own clock: one whose transaction began before the previous refresh and committed after it (its
 * created_at is its transaction's start) is still read, unless that transaction lasted longer than
 * this. Creating a key or registering a device is one short statement.
 */
export const CREATED_OVERLAP_MS = 60_000;
/**
 * How often the set is rebuilt from scratch, on a miss, so that revoked and expired credentials leave
 * it (a refresh only adds). Until then such a credential is only a lookup that refuses it, as every
 * one in the set is: the set never decides that a credential is valid.
 */
export const FULL_RELOAD_MS = 10 * 60_000;
/** Hashes read per query of a full load: about 1 MB a query, whatever the number of credentials. */
export const LOAD_PAGE_SIZE = 10_000;

/** Where the set is read from (Postgres: see credentialSource). */
export interface CredentialSource {
  /** The database's clock. */
  clock(): Promise<Date>;
  /** Hashes of credentials neither revoked nor expired, in hash order, after `after`, at most `limit`. */
  liveHashes(after: string, limit: number): Promise<string[]>;
  /** Hashes of the credentials created after `since` (the database's clock), and the database's clock now. */
  createdSince(since: Date): Promise<{ hashes: string[]; at: Date }>;
}

/** What credentialSource needs of a database: a parameterized query (PgService, PrismaService). */
interface Sql {
  sql<R extends object>(text: string, params?: unknown[]): Promise<{ rows: R[] }>;
}

/** The tables that hold hashed credentials, with their hash column and what makes a row live. */
const CREDENTIAL_TABLES = {
  api_keys: { hash: 'hash', live: 'revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())' },
  devices: { hash: 'token_hash', live: 'revoked_at IS NULL' },
} as const;

/**
 * A table of hashed credentials as the known set reads it: plain SQL on the hash's unique index and on
 * created_at's index, whatever the number of rows.
 */
export function credentialSource(db: Sql, table: keyof typeof CREDENTIAL_TABLES): CredentialSource {
  const { hash, live } = CREDENTIAL_TABLES[table];
  return {
    clock: async () => (await db.sql<{ at: Date }>('SELECT now() AS at')).rows[0].at,
    liveHashes: async (after, limit) =>
      (
        await db.sql<{ hash: string }>(
          `SELECT ${hash} AS hash FROM ${table} WHERE ${hash} > $1 AND ${live} ORDER BY ${hash} LIMIT $2`,
          [after, limit],
        )
      ).rows.map((r) => r.hash),
    createdSince: async (since) => {
      const { rows } = await db.sql<{ at: Date; hashes: string[] | null }>(
        `SELECT now() AS at, array_agg(${hash}) AS hashes FROM ${table} WHERE created_at > $1`,
        [since],
      );
      return { at: rows[0].at, hashes: rows[0].hashes ?? [] };
    },
  };
}

/**
 * A credential's place in the set: the first 52 bits of its SHA-256 (13 hex digits), a number held
 * exactly by a double. 8 bytes each in the loaded array (about 8 MB for a million); two sharing a
 * prefix, or a guess hitting one (about 1 in 4.5e15 per credential), only cost a lookup.
 */
export const prefixOf = (hash: string): number => parseInt(hash.slice(0, 13), 16);

const sleep = (ms: number) =>
  new Promise<void>((resolve) => {
    // A refresh waits at most MIN_REFRESH_INTERVAL_MS; nothing to keep the process up for.
    setTimeout(resolve, ms).unref();
  });

/**
 * The set of credentials (API keys, device tokens) that may exist, kept by each process that checks
 * them, so that one that does not exist is refused without a Postgres query of its own: distinct
 * random guesses defeat a cache of wrong ones, not a set of the right ones. Loaded at start, rebuilt
 * every FULL_RELOAD_MS, and refreshed with the credentials created since, by the misses themselves: a
 * hash not in the set waits for a refresh that starts after it arrived (so a credential created before
 * its first use is always found: never a wrong refusal), shared by every miss meanwhile, at most one
 * per MIN_REFRESH_INTERVAL_MS. When the refresh fails (Postgres unreachable) the miss fails with it:
 * the caller answers as it does when Postgres is down, not with a refusal the set cannot vouch for.
 */
export class KnownCredentials {
  /** The full load's prefixes, sorted. */
  private loaded: Float64Array | null = null;
  /** Prefixes of credentials created since the full load. */
  private readonly recent = new Set<number>();
  private since: Date | null = null;
  private fullLoadAt = 0;
  private current: Promise<void> = Promise.resolve();
  private next: Promise<void> | null = null;
  private lastStartAt = -Infinity;

  constructor(private readonly source: CredentialSource) {}

  /** Whether the credential whose hash this is may exist: false only when a refresh after this call says so. */
  async mayExist(hash: string): Promise<boolean> {
    if (this.has(hash)) {
      return true;
    }
    await this.refreshAfterNow();
    return this.has(hash);
  }

  /**
   * Resolves once a refresh that started after this call has ended (rejects when it failed). Calls
   * while one waits to start share it.
   */
  refreshAfterNow(): Promise<void> {
    this.next ??= this.scheduleRefresh();
    return this.next;
  }

  /** How many credentials the set holds (the full load and those seen since). */
  get size(): number {
    return (this.loaded?.length ?? 0) + this.recent.size;
  }

  private has(hash: string): boolean {
    const prefix = prefixOf(hash);
    return this.recent.has(prefix) || (this.loaded !== null && includes(this.loaded, prefix));
  }

  private async scheduleRefresh(): Promise<void> {
    // One at a time, and not more often than MIN_REFRESH_INTERVAL_MS.
    await this.current.catch(() => undefined);
    const wait = this.lastStartAt + MIN_REFRESH_INTERVAL_MS - Date.now();
    if (wait > 0) {
      await sleep(wait);
    }
    // From here on, a new miss needs a later refresh: this one may have read the table before it.
    this.next = null;
    this.lastStartAt = Date.now();
    this.current = this.refresh();
    return this.current;
  }

  private async refresh(): Promise<void> {
    if (this.loaded === null || this.since === null || Date.now() - this.fullLoadAt >= FULL_RELOAD_MS) {
      await this.fullLoad();
      return;
    }
    const { hashes, at } = await this.source.createdSince(this.since);
    for (const hash of hashes) {
      this.recent.add(prefixOf(hash));
    }
    this.since = new Date(at.getTime() - CREATED_OVERLAP_MS);
  }

  private async fullLoad(): Promise<void> {
    // Credentials created from here on are the next refresh's (created after `since`).
    const at = await this.source.clock();
    const prefixes: number[] = [];
    for (let after = ''; ;) {
      const page = await this.source.liveHashes(after, LOAD_PAGE_SIZE);
      for (const hash of page) {
        prefixes.push(prefixOf(hash));
      }
      if (page.length < LOAD_PAGE_SIZE) {
        break;
      }
      after = page[page.length - 1];
    }
    this.loaded = Float64Array.from(prefixes).sort();
    this.recent.clear();
    this.since = new Date(at.getTime() - CREATED_OVERLAP_MS);
    this.fullLoadAt = Date.now();
  }
}

/** Binary search in a sorted array. */
function includes(sorted: Float64Array, value: number): boolean {
  let low = 0;
  let high = sorted.length - 1;
  while (low <= high) {
    const mid = (low + high) >>> 1;
    const found = sorted[mid];
    if (found === value) {
      return true;
    }
    if (found < value) {
      low = mid + 1;
    } else {
      high = mid - 1;
    }
  }
  return false;
}
