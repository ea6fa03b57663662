import { sqlState } from './sql';

describe('sqlState', () => {
  it('reads pg’s code', () => {
    expect(sqlState(Object.assign(new Error('duplicate key'), { code: '23505' }))).toBe('23505');
  });

  it('reads the original code under a Prisma raw-query error, not Prisma’s own P2010', () => {
    const error = Object.assign(new Error('Raw query failed'), {
      code: 'P2010',
      meta: { driverAdapterError: { cause: { originalCode: '23505', kind: 'UniqueConstraintViolation' } } },
    });
    expect(sqlState(error)).toBe('23505');
    expect(sqlState(Object.assign(new Error('cannot reach'), { code: 'P1001' }))).toBeUndefined();
  });

  it('is undefined for anything else', () => {
    expect(sqlState(new Error('plain'))).toBeUndefined();
    expect(sqlState(null)).toBeUndefined();
    expect(sqlState(Object.assign(new Error('net'), { code: 'ECONNREFUSED' }))).toBeUndefined();
  });
});
