import { Inject, Injectable } from '@nestjs/common';
import type { OnApplicationBootstrap } from '@nestjs/common';
import {
  AppError,
  KnownCredentials,
  LOGGER,
  PrismaService,
  credentialSource,
  looksLikeApiKey,
  sha256Hex,
} from '@app/common';
import type { Logger, OrgCompat } from '@app/common';
import type { AuthContext } from './auth-context';
import { KeyUsageService } from '../keys/key-usage.service';

/**
 * A key lookup is fresh this long; an older one is still used while a new lookup runs in the
 * background, up to STALE_MS, so that a request with a known key never waits for Postgres. A revoked
 * key is refused on every api instance within about STALE_MS.
 */
const FRESH_MS = 500;
const STALE_MS = 1_000;
/**
 * While Postgres is unreachable, a key seen in the last minute keeps working (requests need no
 * Postgres on their way; their records are written once it is back); an unknown key gets 503.
 */
const STALE_IF_ERROR_MS = 60_000;
/**
 * Bounds the cache. Keys that do not exist never enter it (KnownCredentials refuses them first): it holds
 * the keys in use, revoked and expired ones still in the known set, and the rare false positive.
 */
const CACHE_MAX_ENTRIES = 10_000;

interface CacheEntry {
  context: AuthContext | null;
  expiresAt: number | null;
  cachedAt: number;
  refreshing: boolean;
}

/** The one answer for unknown, revoked and expired keys alike: it tells an attacker nothing. */
export function invalidApiKey(): AppError {
  return new AppError(
    'invalid_api_key',
    "Incorrect API key provided. Send a valid key as 'Authorization: Bearer <key>' or 'X-API-Key: <key>'.",
  );
}

interface KeyRow {
  id: string;
  org_id: string;
  revoked_at: Date | null;
  expires_at: Date | null;
  org_name: string;
  rpm_limit: number | null;
  concurrency_limit: number | null;
  max_queued: number | null;
  weight: number;
  network: boolean;
  resume: boolean;
  compat: OrgCompat;
  /** Postgres BIGINTs, which pg reads as strings. */
  org_budget: string | null;
  key_budget: string | null;
}

const KEY_LOOKUP = `
  SELECT k.id, k.org_id, k.revoked_at, k.expires_at, o.name AS org_name, o.rpm_limit, o.concurrency_limit,
         o.max_queued, o.weight, o.network, o.resume, o.compat, o.monthly_token_budget AS org_budget,
         k.monthly_token_budget AS key_budget
  FROM api_keys k JOIN organizations o ON o.id = k.org_id
  WHERE k.hash = $1`;

@Injectable()
export class ApiKeyService implements OnApplicationBootstrap {
  private readonly cache = new Map<string, CacheEntry>();
  /** The keys that may exist: an unknown key is refused without a query of its own (see KnownCredentials). */
  private readonly known: KnownCredentials;

  constructor(
    private readonly prisma: PrismaService,
    private readonly keyUsage: KeyUsageService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.known = new KnownCredentials(credentialSource(prisma, 'api_keys'));
  }

  /** Loads the known keys before the first request needs them (a failure is retried by the first miss). */
  onApplicationBootstrap(): void {
    this.known.refreshAfterNow().catch((err: unknown) => {
      this.logger.warn({ err }, 'the API keys could not be loaded; the first request with a key will retry');
    });
  }

  /** Resolves a presented key to its organization, or throws 401 invalid_api_key. */
  async authenticate(key: string): Promise<AuthContext> {
    if (!looksLikeApiKey(key)) {
      throw invalidApiKey();
    }
    const hash = sha256Hex(key);
    let entry = this.cache.get(hash);
    if (!entry && !(await this.known.mayExist(hash))) {
      throw invalidApiKey();
    }
    const now = Date.now();
    if (!entry || now - entry.cachedAt > STALE_MS) {
      const stale = entry;
      entry = await this.lookup(hash).catch((err: unknown) => {
        if (stale && now - stale.cachedAt <= STALE_IF_ERROR_MS) {
          return stale;
        }
        throw err;
      });
    } else if (now - entry.cachedAt > FRESH_MS && !entry.refreshing) {
      entry.refreshing = true;
      this.lookup(hash).catch(() => {
        // Postgres is unreachable: the entry is used until STALE_MS, then the request waits (and fails).
        entry!.refreshing = false;
      });
    }
    if (!entry.context || (entry.expiresAt !== null && entry.expiresAt <= now)) {
      throw invalidApiKey();
    }
    this.keyUsage.record(entry.context.apiKeyId);
    return entry.context;
  }

  private async lookup(hash: string): Promise<CacheEntry> {
    // Plain SQL: this runs about twice a second per key in use, and Prisma's query compiler would run
    // on the api's one thread each time, between the requests it serves.
    const { rows } = await this.prisma.sql<KeyRow>(KEY_LOOKUP, [hash]);
    const row = rows[0];
    const entry: CacheEntry = {
      context:
        row && !row.revoked_at
          ? {
              orgId: row.org_id,
              orgName: row.org_name,
              apiKeyId: row.id,
              limits: { rpm: row.rpm_limit, concurrency: row.concurrency_limit, maxQueued: row.max_queued },
              weight: row.weight,
              network: row.network,
              resume: row.resume,
              compat: row.compat,
              budgets: {
                org: row.org_budget === null ? null : Number(row.org_budget),
                key: row.key_budget === null ? null : Number(row.key_budget),
              },
            }
          : null,
      expiresAt: row?.expires_at?.getTime() ?? null,
      cachedAt: Date.now(),
      refreshing: false,
    };
    if (this.cache.size >= CACHE_MAX_ENTRIES) {
      this.cache.clear();
    }
    this.cache.set(hash, entry);
    return entry;
  }
}
