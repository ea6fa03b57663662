import { Injectable } from '@nestjs/common';
import { AppError, PrismaService, looksLikeApiKey, sha256Hex } from '@app/common';
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
/** Bounds the cache against floods of distinct (unknown) keys. */
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

@Injectable()
export class ApiKeyService {
  private readonly cache = new Map<string, CacheEntry>();

  constructor(
    private readonly prisma: PrismaService,
    private readonly keyUsage: KeyUsageService,
  ) {}

  /** Resolves a presented key to its organization, or throws 401 invalid_api_key. */
  async authenticate(key: string): Promise<AuthContext> {
    if (!looksLikeApiKey(key)) {
      throw invalidApiKey();
    }
    const hash = sha256Hex(key);
    const now = Date.now();
    let entry = this.cache.get(hash);
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
    const row = await this.prisma.client.apiKey.findUnique({ where: { hash }, include: { org: true } });
    const entry: CacheEntry = {
      context:
        row && !row.revokedAt
          ? {
              orgId: row.orgId,
              orgName: row.org.name,
              apiKeyId: row.id,
              limits: { rpm: row.org.rpmLimit, concurrency: row.org.concurrencyLimit, maxQueued: row.org.maxQueued },
              weight: row.org.weight,
              network: row.org.network,
            }
          : null,
      expiresAt: row?.expiresAt?.getTime() ?? null,
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
