import { createHash } from 'node:crypto';
import { adminTokenActor, auditValue, dashboardActor, localActor, recordAudit } from './audit';
import type { AuditActor } from './audit';
import { AdminKeysService } from './keys.service';
import { AdminOrgsService } from './orgs.service';
import type { Sql } from './sql';

/** One statement a FakeSql was given, and whether it ran in a transaction. */
interface Statement {
  text: string;
  values: unknown[];
  inTransaction: boolean;
}

/** SQL without a database: answers each statement from the first rule whose pattern it matches, and logs it. */
class FakeSql {
  readonly log: Statement[] = [];
  transactions = 0;

  constructor(private readonly rules: [RegExp, (values: unknown[]) => unknown[]][] = []) {}

  sql(inTransaction = false): Sql {
    return {
      query: async <R>(text: string, values: unknown[] = []) => {
        this.log.push({ text, values, inTransaction });
        const rule = this.rules.find(([pattern]) => pattern.test(text));
        return (rule ? rule[1](values) : []) as R[];
      },
      transaction: async <T>(fn: (tx: Sql) => Promise<T>) => {
        this.transactions++;
        return fn(this.sql(true));
      },
    };
  }

  /** The audit entries written: their parameters, decoded. */
  entries() {
    return this.log
      .filter((s) => s.text.includes('INSERT INTO audit_log'))
      .map((s) => ({
        actor: s.values[0],
        via: s.values[1],
        kind: s.values[2],
        target: s.values[3],
        before: s.values[4] === null ? null : JSON.parse(s.values[4] as string),
        after: s.values[5] === null ? null : JSON.parse(s.values[5] as string),
        inTransaction: s.inTransaction,
      }));
  }
}

const ACTOR: AuditActor = { via: 'api', actor: 'admin-token:0123456789ab' };
const TOKEN = 'an-admin-token-of-at-least-32-characters-000';
const KEY = 'sy_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcd';

describe('auditValue', () => {
  it('leaves out the fields that hold secrets or their digests, at any depth, and keeps display prefixes', () => {
    const value = auditValue({
      id: 'k1',
      hash: 'ab'.repeat(32),
      token_hash: 'cd'.repeat(32),
      key: KEY,
      token: 'syd_x',
      prefix: 'sy_0123',
      token_prefix: 'syd_abcd',
      max_tokens: 8,
      replacement: { id: 'k2', hash: 'ef'.repeat(32), admin_token: TOKEN, api_key: KEY, password: 'p' },
    });
    expect(value).toEqual({
      id: 'k1',
      prefix: 'sy_0123',
      token_prefix: 'syd_abcd',
      max_tokens: 8,
      replacement: { id: 'k2' },
    });
  });

  it('redacts a text shaped like an API key or a device token wherever it is', () => {
    expect(auditValue({ label: `old ${KEY} key`, note: `syd_${'a'.repeat(40)}` })).toEqual({
      label: 'old [redacted] key',
      note: '[redacted]',
    });
    // A display prefix is far too short to be one.
    expect(auditValue('sy_0123')).toBe('sy_0123');
  });

  it('writes JSON: dates as ISO strings, bigints as strings of digits (as pg reads BIGINT), nothing for undefined', () => {
    expect(
      auditValue({
        at: new Date('2026-12-06T14:00:00.000Z'),
        budget: 1_000_000n,
        huge: 2n ** 62n,
        gone: undefined,
        list: ['a', 1, null, true],
        nan: Number.NaN,
      }),
    ).toEqual({
      at: '2026-12-06T14:00:00.000Z',
      budget: '1000000',
      huge: (2n ** 62n).toString(),
      list: ['a', 1, null, true],
      nan: null,
    });
  });
});

describe('actors', () => {
  it('names an admin token by a fingerprint that is stable, its own, and no digest of the token', () => {
    const actor = adminTokenActor(TOKEN);
    expect(actor.via).toBe('api');
    expect(actor.actor).toMatch(/^admin-token:[0-9a-f]{12}$/);
    expect(adminTokenActor(TOKEN)).toEqual(actor);
    expect(adminTokenActor(`${TOKEN}x`).actor).not.toBe(actor.actor);
    const fingerprint = actor.actor.slice('admin-token:'.length);
    expect(TOKEN).not.toContain(fingerprint);
    expect(createHash('sha256').update(TOKEN).digest('hex')).not.toContain(fingerprint);
  });

  it('names a dashboard session by its own fingerprint, and the CLI by user and host', () => {
    const session = 'A'.repeat(43);
    expect(dashboardActor(session)).toEqual({
      via: 'dashboard',
      actor: expect.stringMatching(/^dashboard:[0-9a-f]{12}$/),
    });
    expect(dashboardActor(session).actor).not.toBe(dashboardActor('B'.repeat(43)).actor);
    expect(localActor()).toEqual({ via: 'cli', actor: expect.stringMatching(/^cli:[^@\s]+@\S+$/) });
  });
});

describe('recordAudit', () => {
  it('writes one entry with its actor, kind, target and values', async () => {
    const db = new FakeSql();
    await recordAudit(db.sql(), ACTOR, {
      kind: 'key.revoke',
      target: 'k1',
      before: { id: 'k1', hash: 'x', revoked_at: null },
      after: { id: 'k1', hash: 'x', revoked_at: new Date('2026-12-06T14:00:00.000Z') },
    });
    expect(db.entries()).toEqual([
      {
        actor: ACTOR.actor,
        via: 'api',
        kind: 'key.revoke',
        target: 'k1',
        before: { id: 'k1', revoked_at: null },
        after: { id: 'k1', revoked_at: '2026-12-06T14:00:00.000Z' },
        inTransaction: false,
      },
    ]);
  });

  it('refuses a change without an actor, and writes nothing', async () => {
    const db = new FakeSql();
    await expect(
      recordAudit(db.sql(), null, { kind: 'org.create', target: 'acme', before: null, after: {} }),
    ).rejects.toThrow(/without an actor/);
    expect(db.log).toEqual([]);
  });
});

describe('the admin services record their changes in the change’s transaction', () => {
  const orgRow = { id: 'o1', name: 'acme', created_at: new Date(0), rpm_limit: null, weight: 1 };

  it('org.create and org.update; a look at the limits is no change', async () => {
    const db = new FakeSql([
      [/^INSERT INTO organizations/, () => [orgRow]],
      [/^SELECT \* FROM organizations/, () => [orgRow]],
      [/^UPDATE organizations/, () => [{ ...orgRow, rpm_limit: 60 }]],
    ]);
    const orgs = new AdminOrgsService(db.sql()).as(ACTOR);
    await orgs.create('acme');
    await orgs.setLimits('acme', { rpm: 60 });
    expect(db.entries()).toEqual([
      expect.objectContaining({ kind: 'org.create', target: 'acme', before: null, inTransaction: true }),
      expect.objectContaining({
        kind: 'org.update',
        target: 'acme',
        before: expect.objectContaining({ rpm_limit: null }),
        after: expect.objectContaining({ rpm_limit: 60 }),
        inTransaction: true,
      }),
    ]);
    // The row the entry's "before" holds was locked by the transaction.
    expect(db.log.find((s) => s.text.startsWith('SELECT * FROM organizations'))?.text).toMatch(/FOR UPDATE$/);
    const transactions = db.transactions;
    await orgs.setLimits('acme', {});
    expect(db.transactions).toBe(transactions);
    expect(db.entries()).toHaveLength(2);
  });

  it('key.revoke holds the key before and after, without its hash', async () => {
    const id = '6c0b0d2e-8f43-4c1e-9a55-2d0c4e7b9f10';
    const key = { id, org_id: 'o1', hash: 'ab'.repeat(32), prefix: 'sy_0123', revoked_at: null };
    const db = new FakeSql([
      [/^SELECT k\.\*/, () => [{ ...key, org: 'acme' }]],
      [/^UPDATE api_keys/, () => [{ ...key, revoked_at: new Date('2026-12-06T14:00:00.000Z') }]],
    ]);
    await new AdminKeysService(db.sql()).as(ACTOR).revoke(id);
    expect(db.entries()).toEqual([
      {
        actor: ACTOR.actor,
        via: 'api',
        kind: 'key.revoke',
        target: id,
        before: { id, org_id: 'o1', prefix: 'sy_0123', revoked_at: null, org: 'acme' },
        after: { id, org_id: 'o1', prefix: 'sy_0123', revoked_at: '2026-12-06T14:00:00.000Z', org: 'acme' },
        inTransaction: true,
      },
    ]);
  });

  it('a service without an actor changes nothing: the transaction fails', async () => {
    const db = new FakeSql([[/^INSERT INTO organizations/, () => [orgRow]]]);
    await expect(new AdminOrgsService(db.sql()).create('acme')).rejects.toThrow(/without an actor/);
    expect(db.entries()).toEqual([]);
  });
});
