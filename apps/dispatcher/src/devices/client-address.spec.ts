import { forwardedAddress } from './client-address';

describe('forwardedAddress', () => {
  it('takes the first address of X-Forwarded-For, as Fastify does with trustProxy', () => {
    expect(forwardedAddress('203.0.113.7, 10.0.0.2', '10.0.0.1')).toBe('203.0.113.7');
    expect(forwardedAddress(' 2001:db8::1 ', '10.0.0.1')).toBe('2001:db8::1');
    expect(forwardedAddress(['203.0.113.7, 10.0.0.3', '10.0.0.2'], '10.0.0.1')).toBe('203.0.113.7');
  });

  it('falls back to the peer without a usable header', () => {
    expect(forwardedAddress(undefined, '10.0.0.1')).toBe('10.0.0.1');
    expect(forwardedAddress('', '10.0.0.1')).toBe('10.0.0.1');
    expect(forwardedAddress(' , 10.0.0.2', '10.0.0.1')).toBe('10.0.0.1');
  });
});
