import { ANNOUNCE_LIMITS } from '@app/common';
import { AnnounceRate } from './announce-rate';

describe('AnnounceRate', () => {
  const { burst, perSecond } = ANNOUNCE_LIMITS;

  it('allows a burst, then refuses until time refills it', () => {
    const rate = new AnnounceRate(0);
    for (let i = 0; i < burst; i++) {
      expect(rate.take(0)).toBe(true);
    }
    expect(rate.take(0)).toBe(false);
    expect(rate.take(1000 / perSecond - 1)).toBe(false);
    expect(rate.take(1000 / perSecond)).toBe(true);
    expect(rate.take(1000 / perSecond)).toBe(false);
  });

  it('never holds more than its burst, however long the device was quiet', () => {
    const rate = new AnnounceRate(0);
    const allowed = Array.from({ length: burst * 2 }, () => rate.take(3_600_000)).filter(Boolean).length;
    expect(allowed).toBe(burst);
  });

  it('a device announcing once a second is never refused', () => {
    const rate = new AnnounceRate(0);
    for (let t = 0; t < 600_000; t += 1_000) {
      expect(rate.take(t)).toBe(true);
    }
  });
});
