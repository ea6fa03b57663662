import { auditChangeLines, auditDiff } from './audit-diff';

describe('auditDiff', () => {
  it('lists the fields whose values differ, in their order', () => {
    expect(
      auditDiff(
        { id: 'o1', rpm_limit: null, weight: 1, tags: ['a'], extra: 1 },
        { id: 'o1', rpm_limit: 60, weight: 1, tags: ['a', 'b'], added: true },
      ),
    ).toEqual([
      { field: 'rpm_limit', before: null, after: 60 },
      { field: 'tags', before: ['a'], after: ['a', 'b'] },
      { field: 'extra', before: 1, after: undefined },
      { field: 'added', before: undefined, after: true },
    ]);
  });

  it('goes into an object both sides hold, by dotted path', () => {
    expect(
      auditDiff(
        { trust: { state: 'trusted', reason: null, canaries: 1 } },
        { trust: { state: 'quarantined', reason: 'bad', canaries: 1 } },
      ),
    ).toEqual([
      { field: 'trust.state', before: 'trusted', after: 'quarantined' },
      { field: 'trust.reason', before: null, after: 'bad' },
    ]);
    expect(auditDiff({ models: null }, { models: { a: 1 } })).toEqual([
      { field: 'models', before: null, after: { a: 1 } },
    ]);
  });

  it('is empty when nothing changed (a repeated action)', () => {
    expect(auditDiff({ enabled: true }, { enabled: true })).toEqual([]);
  });
});

describe('auditChangeLines', () => {
  it('shows an update as before → after, and a creation or removal as its fields', () => {
    expect(auditChangeLines({ rpm_limit: null, network: true }, { rpm_limit: 60, network: false })).toEqual([
      'rpm_limit: null → 60',
      'network: true → false',
    ]);
    expect(auditChangeLines(null, { name: 'acme', weight: 1 })).toEqual(['name: acme', 'weight: 1']);
    expect(auditChangeLines({ id: 'c1' }, null)).toEqual(['id: c1']);
  });
});
