import { createHash, randomInt } from 'node:crypto';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** Random base62 text from a CSPRNG, without modulo bias. */
export function randomBase62(length: number): string {
  let out = '';
  for (let i = 0; i < length; i++) {
    out += BASE62[randomInt(62)];
  }
  return out;
}

/** SHA-256 hex of a secret: the only form in which keys and device tokens are stored. */
export function sha256Hex(value: string): string {
  return createHash('sha256').update(value).digest('hex');
}

export const API_KEY_PREFIX = 'sy_';
export const DEVICE_TOKEN_PREFIX = 'syd_';
/** 40 base62 characters: about 238 bits of entropy, above the 32-character minimum of DESIGN.md. */
const SECRET_LENGTH = 40;
/** How much of a secret is kept for display (`sy_AbC1…`): enough to tell keys apart, far too little to guess. */
const DISPLAY_CHARS = 4;

export interface NewSecret {
  secret: string;
  hash: string;
  prefix: string;
}

function newSecret(prefix: string): NewSecret {
  const secret = prefix + randomBase62(SECRET_LENGTH);
  return { secret, hash: sha256Hex(secret), prefix: secret.slice(0, prefix.length + DISPLAY_CHARS) };
}

export const newApiKey = (): NewSecret => newSecret(API_KEY_PREFIX);
export const newDeviceToken = (): NewSecret => newSecret(DEVICE_TOKEN_PREFIX);

/** Whether a string has the shape of an API key (checked before any database lookup). */
export function looksLikeApiKey(value: string): boolean {
  return /^sy_[0-9A-Za-z]{32,128}$/.test(value);
}

export function looksLikeDeviceToken(value: string): boolean {
  return /^syd_[0-9A-Za-z]{32,128}$/.test(value);
}
