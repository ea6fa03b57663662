import type { Sql } from '../admin/sql';

/**
 * A network device's trust (docs/operations.md, "Trust"): `probation` (registered, no canary
 * answered yet: no network tasks while one of its models has canaries), `trusted`, or `quarantined`
 * (no network tasks). A direct device is its organization's own: trust never holds it back.
 */
export const TRUST_STATES = ['probation', 'trusted', 'quarantined'] as const;
export type TrustState = (typeof TRUST_STATES)[number];

/** What a canary's answer did to a device's trust. */
export interface CanaryVerdict {
  /** The device's state after it. */
  state: TrustState;
  /** Whether the state changed (probation → trusted, or → quarantined). */
  changed: boolean;
}

/**
 * The one writer of devices' trust: an operator's decision (the admin API, the CLI), and the
 * dispatchers' (a canary answered, usage reports that kept disagreeing, a device trusted on announce).
 * Each change is one statement, so that two writers at once leave one of them whole.
 */
export class TrustStore {
  constructor(private readonly sql: Sql) {}

  /** An operator's decision; the state the device had. Null when there is no such device. */
  async set(id: string, state: TrustState, reason: string | null): Promise<TrustState | null> {
    const [before] = await this.sql.query<{ trust: TrustState }>(
      `UPDATE devices d SET trust = $2::device_trust, trust_reason = $3, trust_changed_at = now()
       FROM (SELECT id, trust FROM devices WHERE id = $1::uuid FOR UPDATE) old
       WHERE d.id = old.id RETURNING old.trust`,
      [id, state, reason],
    );
    return before?.trust ?? null;
  }

  /** Quarantines a network device not quarantined yet; whether it was. */
  async quarantine(id: string, reason: string): Promise<boolean> {
    const rows = await this.sql.query(
      `UPDATE devices SET trust = 'quarantined', trust_reason = $2, trust_changed_at = now()
       WHERE id = $1::uuid AND org_id IS NULL AND trust <> 'quarantined' RETURNING id`,
      [id, reason],
    );
    return rows.length > 0;
  }

  /** Network devices on probation that have nothing to prove (no canary for any model they serve): trusted. */
  async trustOnAnnounce(ids: readonly string[]): Promise<void> {
    if (ids.length === 0) {
      return;
    }
    await this.sql.query(
      `UPDATE devices SET trust = 'trusted', trust_reason = 'trusted on announce: no canaries for its models',
         trust_changed_at = now()
       WHERE id = ANY($1::uuid[]) AND org_id IS NULL AND trust = 'probation'`,
      [ids],
    );
  }

  /**
   * A canary answered: counted, and the device judged. A pass trusts a device on probation; a fail
   * quarantines it, with `reason`. Null when the device is gone (deleted meanwhile).
   */
  async canary(id: string, passed: boolean, reason: string): Promise<CanaryVerdict | null> {
    const [row] = await this.sql.query<{ trust: TrustState; changed: boolean }>(
      `UPDATE devices d SET
         canaries_passed = d.canaries_passed + $2::int,
         canaries_failed = d.canaries_failed + (1 - $2::int),
         last_canary_at = now(),
         trust = CASE
           WHEN $2::int = 0 THEN 'quarantined'::device_trust
           WHEN d.trust = 'probation' THEN 'trusted'::device_trust
           ELSE d.trust END,
         trust_reason = CASE
           WHEN $2::int = 0 AND d.trust <> 'quarantined' THEN $3
           WHEN $2::int = 1 AND d.trust = 'probation' THEN $3
           ELSE d.trust_reason END,
         trust_changed_at = CASE
           WHEN ($2::int = 0 AND d.trust <> 'quarantined') OR ($2::int = 1 AND d.trust = 'probation') THEN now()
           ELSE d.trust_changed_at END
       FROM (SELECT id, trust FROM devices WHERE id = $1::uuid FOR UPDATE) old
       WHERE d.id = old.id
       RETURNING d.trust, d.trust <> old.trust AS changed`,
      [id, passed ? 1 : 0, reason],
    );
    return row ? { state: row.trust, changed: row.changed } : null;
  }
}
