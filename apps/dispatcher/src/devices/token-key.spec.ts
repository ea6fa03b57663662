import { createHash } from 'node:crypto';
import { TOKEN_KEY_LENGTH, tokenHashes } from './token-key';

describe('tokenHashes', () => {
  it('a token key is the start of its SHA-256', () => {
    const { hash, key } = tokenHashes('syd_example');
    expect(hash).toBe(createHash('sha256').update('syd_example').digest('hex'));
    expect(key).toBe(hash.slice(0, TOKEN_KEY_LENGTH));
  });
});
