import { AUDIT_PAGE_DEFAULT, AdminAuditService, parseAuditQuery } from './audit.service';
import type { Sql } from './sql';

const param = (fn: () => unknown) => {
  try {
    fn();
  } catch (error) {
    return { code: (error as { code?: string }).code, param: (error as { param?: string }).param };
  }
  return null;
};

describe('parseAuditQuery', () => {
  it('fills in the defaults', () => {
    expect(parseAuditQuery({})).toEqual({ since: null, kinds: null, limit: AUDIT_PAGE_DEFAULT, after: null });
  });

  it('reads a date, a date-time with a zone, a kind, a family, a limit and a cursor', () => {
    expect(parseAuditQuery({ since: '2026-12-01' }).since?.toISOString()).toBe('2026-12-01T00:00:00.000Z');
    expect(parseAuditQuery({ since: '2026-12-01T09:30:00+01:00' }).since?.toISOString()).toBe(
      '2026-12-01T08:30:00.000Z',
    );
    expect(parseAuditQuery({ kind: 'key.revoke' }).kinds).toEqual(['key.revoke']);
    expect(parseAuditQuery({ kind: 'device' }).kinds).toEqual([
      'device.create',
      'device.models',
      'device.quarantine',
      'device.trust',
      'device.revoke',
    ]);
    expect(parseAuditQuery({ limit: '500', after: '42' })).toMatchObject({ limit: 500, after: '42' });
  });

  it.each([
    [{ since: 'yesterday' }, 'since'],
    [{ since: '2026-02-30' }, 'since'],
    [{ since: '2026-12-01T08:00:00' }, 'since'],
    [{ since: '' }, 'since'],
    [{ kind: 'org.delete' }, 'kind'],
    [{ kind: 'ORG' }, 'kind'],
    [{ kind: '' }, 'kind'],
    [{ limit: '0' }, 'limit'],
    [{ limit: '501' }, 'limit'],
    [{ limit: '1.5' }, 'limit'],
    [{ limit: 'ten' }, 'limit'],
    [{ after: '0' }, 'after'],
    [{ after: '-1' }, 'after'],
    [{ after: 'abc' }, 'after'],
    [{ after: '1'.repeat(20) }, 'after'],
  ])('refuses %j: 400 invalid_request naming %s', (params, name) => {
    expect(param(() => parseAuditQuery(params))).toEqual({ code: 'invalid_request', param: name });
  });
});

describe('AdminAuditService.list', () => {
  const entry = (id: number) => ({
    id: String(id),
    at: new Date(Date.UTC(2026, 11, 6, 14, 0, id)),
    actor: 'cli:root@host',
    via: 'cli',
    kind: 'org.create',
    target: `org-${id}`,
    before: null,
    after: { name: `org-${id}` },
  });
  const run = async (query: Parameters<typeof parseAuditQuery>[0], rows: ReturnType<typeof entry>[]) => {
    const seen: { text: string; values: unknown[] }[] = [];
    const sql: Sql = {
      query: async <R>(text: string, values: unknown[] = []) => {
        seen.push({ text, values });
        return rows as R[];
      },
      transaction: () => Promise.reject(new Error('a read needs no transaction')),
    };
    const page = await new AdminAuditService(sql).list(parseAuditQuery(query));
    return { page, seen };
  };

  it('pages newest first: one row more than the page says whether another follows', async () => {
    const { page, seen } = await run({ limit: '2' }, [entry(9), entry(8), entry(7)]);
    expect(page).toEqual({
      object: 'list',
      data: [
        expect.objectContaining({ id: '9', at: '2026-12-06T14:00:09.000Z' }),
        expect.objectContaining({ id: '8' }),
      ],
      first_id: '9',
      last_id: '8',
      has_more: true,
    });
    expect(seen[0].text).toMatch(/ORDER BY id DESC LIMIT \$1::int$/);
    expect(seen[0].values).toEqual([3]);
  });

  it('narrows by since, kind and cursor, with parameters only', async () => {
    const { page, seen } = await run({ since: '2026-12-01', kind: 'org', after: '10' }, [entry(9)]);
    expect(page.has_more).toBe(false);
    expect(seen[0].text).toMatch(/WHERE at >= \$1::timestamptz AND kind = ANY\(\$2::text\[\]\) AND id < \$3::bigint/);
    expect(seen[0].values).toEqual([new Date('2026-12-01T00:00:00.000Z'), ['org.create', 'org.update'], '10', 101]);
  });

  it('an empty page has no ids', async () => {
    const { page } = await run({}, []);
    expect(page).toEqual({ object: 'list', data: [], first_id: null, last_id: null, has_more: false });
  });
});
