import { Inject, Injectable } from '@nestjs/common';
import type { OnModuleInit } from '@nestjs/common';
import { Coalescer, KnownCredentials, LOGGER, PgService, credentialSource } from '@app/common';
import type { Logger } from '@app/common';

/** How often revocations are looked for: a revoked device is dropped within about this. */
const REVOCATION_CHECK_MS = 1_000;
/** Connects and disconnects of many devices are recorded together at most this often. */
const TOUCH_WINDOW_MS = 200;

/** A device as its handshake needs it. */
export interface DeviceRow {
  id: string;
  org_id: string | null;
  name: string;
  revoked_at: Date | null;
  token_hash: string;
}

/**
 * Who a connecting device is, by its token (stored hashed); the revocations that must end a
 * connection; connects and disconnects recorded as the device's last_seen_at, in batches.
 *
 * A token that is no device's costs no query of its own: each dispatcher holds the set of every
 * device's token hash (KnownCredentials) and refuses the others from memory. A known token is looked up in
 * Postgres (its device, and whether it was revoked a moment ago), and the tokens of handshakes that
 * arrive together are looked up together, one query for all of them (while one lookup runs, the next
 * handshakes wait for it and go in the next): when a dispatcher restarts, all its devices come back
 * at once, and one query each through a pool of ten made the later ones wait past the pool's
 * connection timeout, refused with `server_error`.
 */
@Injectable()
export class DeviceAuth implements OnModuleInit {
  private revocationTimer: NodeJS.Timeout | null = null;
  private readonly touches = new Coalescer((ids: string[]) => this.touchBatch(ids), TOUCH_WINDOW_MS);
  private readonly lookups = new Coalescer((hashes: string[]) => this.lookupBatch(hashes), 0);
  private readonly known: KnownCredentials;

  constructor(
    private readonly db: PgService,
    @Inject(LOGGER) private readonly logger: Logger,
  ) {
    this.known = new KnownCredentials(credentialSource(db, 'devices'));
  }

  onModuleInit(): void {
    this.known
      .refreshAfterNow()
      .catch((err: unknown) =>
        this.logger.warn(
          { err: (err as Error).message },
          'could not read the device tokens; the next handshake retries',
        ),
      );
  }

  /**
   * The device whose token has this hash, or null for a token that is no device's or a revoked
   * device's. Rejects when Postgres does not answer.
   */
  async identify(hash: string): Promise<DeviceRow | null> {
    if (!(await this.known.mayExist(hash))) {
      return null;
    }
    const device = await this.lookups.submit(hash);
    return device && !device.revoked_at ? device : null;
  }

  /**
   * Calls `drop` for each device revoked from now on. Only revocations since the last look are read
   * (with an overlap for clocks), whatever the number of devices connected.
   */
  watchRevocations(drop: (deviceId: string) => void): void {
    let since = new Date(Date.now() - REVOCATION_CHECK_MS);
    this.revocationTimer = setInterval(() => {
      const from = since;
      since = new Date();
      this.db
        .sql<{ id: string }>(`SELECT id FROM devices WHERE revoked_at >= $1`, [new Date(from.getTime() - 5_000)])
        .then(({ rows }) => rows.forEach((r) => drop(r.id)))
        .catch((err: unknown) => {
          since = from;
          this.logger.warn({ err: (err as Error).message }, 'could not look for revoked devices; retrying');
        });
    }, REVOCATION_CHECK_MS);
    this.revocationTimer.unref();
  }

  stopWatching(): void {
    if (this.revocationTimer) {
      clearInterval(this.revocationTimer);
      this.revocationTimer = null;
    }
  }

  /** Records when a device was last seen (on connect and disconnect), in the background. */
  touch(deviceId: string): void {
    this.touches
      .submit(deviceId)
      .catch((err: unknown) =>
        this.logger.warn({ err: (err as Error).message, deviceId }, 'could not record when a device was seen'),
      );
  }

  private async lookupBatch(hashes: string[]): Promise<(DeviceRow | null)[]> {
    const { rows } = await this.db.sql<DeviceRow>(
      `SELECT id, org_id, name, revoked_at, token_hash FROM devices WHERE token_hash = ANY($1::text[])`,
      [[...new Set(hashes)]],
    );
    const byHash = new Map(rows.map((r) => [r.token_hash, r]));
    return hashes.map((hash) => byHash.get(hash) ?? null);
  }

  private async touchBatch(ids: string[]): Promise<void[]> {
    await this.db.sql(`UPDATE devices SET last_seen_at = now() WHERE id = ANY($1::uuid[])`, [[...new Set(ids)]]);
    return ids.map(() => undefined);
  }
}
