import { Holds } from './holds';

describe('Holds', () => {
  it('holds a key until its time, then forgets it', () => {
    const holds = new Holds();
    holds.hold('a', 1_000, 10_000);
    expect(holds.remaining('a', 10_000)).toBe(1_000);
    expect(holds.remaining('a', 10_999)).toBe(1);
    expect(holds.remaining('a', 11_000)).toBe(0);
    expect(holds.size).toBe(0);
    expect(holds.remaining('b', 10_000)).toBe(0);
  });

  it('a new hold replaces the old one', () => {
    const holds = new Holds();
    holds.hold('a', 1_000, 0);
    holds.hold('a', 5_000, 0);
    expect(holds.remaining('a', 2_000)).toBe(3_000);
  });

  it('keeps at most its bound, evicting the oldest hold first', () => {
    const holds = new Holds(2);
    holds.hold('a', 1_000, 0);
    holds.hold('b', 1_000, 0);
    holds.hold('a', 1_000, 0);
    holds.hold('c', 1_000, 0);
    expect(holds.size).toBe(2);
    expect(holds.remaining('b', 0)).toBe(0);
    expect(holds.remaining('a', 0)).toBe(1_000);
    expect(holds.remaining('c', 0)).toBe(1_000);
  });
});
