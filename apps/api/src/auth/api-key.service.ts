import { Injectable } from '@nestjs/common';
import { AppError, PrismaService, looksLikeApiKey, sha256Hex } from '@app/common';
import type { AuthContext } from './auth-context';
import { KeyUsageService } from '../keys/key-usage.service';

/**
 * How long a key lookup is reused. Revocation must take effect within one second on every api
 * instance, so entries live well under that; a burst of requests with one key still costs one query.
 */
const CACHE_TTL_MS = 500;
/** Bounds the cache against floods of distinct (unknown) keys. */
const CACHE_MAX_ENTRIES = 10_000;

interface CacheEntry {
  context: AuthContext | null;
  expiresAt: number | null;
  cachedAt: number;
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
    if (!entry || now - entry.cachedAt > CACHE_TTL_MS) {
      entry = await this.lookup(hash, now);
    }
    if (!entry.context || (entry.expiresAt !== null && entry.expiresAt <= now)) {
      throw invalidApiKey();
    }
    this.keyUsage.record(entry.context.apiKeyId);
    return entry.context;
  }

  private async lookup(hash: string, now: number): Promise<CacheEntry> {
    const row = await this.prisma.client.apiKey.findUnique({ where: { hash }, include: { org: true } });
    const entry: CacheEntry = {
      context:
        row && !row.revokedAt
          ? {
              orgId: row.orgId,
              orgName: row.org.name,
              apiKeyId: row.id,
              limits: { rpm: row.org.rpmLimit, concurrency: row.org.concurrencyLimit, maxQueued: row.org.maxQueued },
            }
          : null,
      expiresAt: row?.expiresAt?.getTime() ?? null,
      cachedAt: now,
    };
    if (this.cache.size >= CACHE_MAX_ENTRIES) {
      this.cache.clear();
    }
    this.cache.set(hash, entry);
    return entry;
  }
}
