import { MAX_WAIT_MS, handshakeWait } from './handshake-wait';

const refusal = (message: string, data?: unknown) => Object.assign(new Error(message), { data });

describe('handshakeWait', () => {
  it('waits what a cooling-off or a limit of failures asks, spread by a tenth (at least a second)', () => {
    const cooling = refusal('cooling_off: retry after 20000 ms', { retry_after_ms: 20_000 });
    expect(handshakeWait(cooling, () => 0)).toBe(20_000);
    expect(handshakeWait(cooling, () => 1)).toBe(22_000);
    const failures = refusal('too_many_failed_handshakes: retry after 3000 ms', { retry_after_ms: 3_000 });
    expect(handshakeWait(failures, () => 0)).toBe(3_000);
    expect(handshakeWait(failures, () => 0.5)).toBe(3_500);
  });

  it('reads the wait from the message when the refusal carries no data', () => {
    expect(handshakeWait(refusal('cooling_off: retry after 640000 ms'), () => 0)).toBe(640_000);
    // Nothing readable: the longest a limit of failures asks.
    expect(handshakeWait(refusal('cooling_off'), () => 0)).toBe(60_000);
  });

  it('never waits more than an hour', () => {
    expect(handshakeWait(refusal('cooling_off', { retry_after_ms: 10 * MAX_WAIT_MS }), () => 0)).toBe(MAX_WAIT_MS);
  });

  it('other errors are not waits', () => {
    for (const message of [
      'invalid_device_token',
      'unsupported_protocol: this dispatcher speaks protocol 3',
      'xhr poll error',
    ]) {
      expect(handshakeWait(refusal(message, { retry_after_ms: 5 }))).toBeNull();
    }
  });
});
