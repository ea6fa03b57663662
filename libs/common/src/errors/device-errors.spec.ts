import { deviceMessage } from './device-errors';

const reported = (message: string) =>
  deviceMessage(message).replace('The device could not complete the request. It reported: ', '');

describe('deviceMessage', () => {
  it.each([
    ['a URL', 'see https://evil.example/fix now', 'see [url] now'],
    ['a bare domain', 'visit evil-support.com to fix it', 'visit [address] to fix it'],
    ['a subdomain with a path', 'go to help.evil.co.uk/reset please', 'go to [address] please'],
    ['a fullwidth URL', 'ｈｔｔｐｓ：／／ｅｖｉｌ．ｃｏｍ', '[url]'],
    ['a fullwidth domain', 'call ｅｖｉｌ．ｃｏｍ', 'call [address]'],
    ['a domain split by a zero-width space', 'evil\u200b.com', '[address]'],
    ['an e-mail address', 'write to help@evil.com', 'write to [address]'],
    ['an IPv4 address with a port', 'connect 10.0.0.1:8080 failed', 'connect [address] failed'],
    ['a phone number', 'call +1 (555) 123-4567 for support', 'call [number] for support'],
    ['a phone number without a country code', 'call 020 7946 0958 now', 'call [number] now'],
  ])('strips %s', (_what, input, expected) => {
    expect(reported(input)).toBe(expected);
  });

  it('removes bidi overrides, so that the text shows as it is stored', () => {
    const text = reported('error \u202Etxet desrever\u202C here');
    expect(text).not.toMatch(/[\u202A-\u202E\u2066-\u2069]/);
    expect(text).toBe('error txet desrever here');
  });

  it.each([
    ['a model file', 'failed to load model.gguf: out of memory'],
    ['a model id', "model 'llama3.2:3b' not found"],
    ['sizes and a date', 'context 131072 > 8192 since 2026-12-04'],
    ['a version', 'runtime 0.5.7 does not support tools'],
  ])('keeps %s', (_what, input) => {
    expect(reported(input)).toBe(input);
  });

  it('caps the text and says it is the device’s', () => {
    const message = deviceMessage('x'.repeat(1_000));
    expect(message).toMatch(/^The device could not complete the request\. It reported: x{300}…$/);
  });
});
