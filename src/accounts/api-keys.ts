import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { crc32 } from 'node:zlib';

// sk-svc-<43 chars: 32 random bytes, base64url><6 chars: CRC32 of the secret, base62>.
// The fixed prefix and length let secret scanners recognise a leaked key; the checksum lets us
// reject a mistyped or truncated key without touching the database.
export const API_KEY_PREFIX = 'sk-svc-';
const SECRET_CHARS = 43;
const CHECKSUM_CHARS = 6;
const SHAPE = new RegExp(`^${API_KEY_PREFIX}([A-Za-z0-9_-]{${SECRET_CHARS}})([0-9A-Za-z]{${CHECKSUM_CHARS}})$`);
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

function base62(n: number, width: number): string {
  let out = '';
  for (let i = 0; i < width; i++) {
    out = BASE62[n % 62] + out;
    n = Math.floor(n / 62);
  }
  return out;
}

function checksum(secret: string): string {
  return base62(crc32(secret), CHECKSUM_CHARS);
}

export interface IssuedKey {
  key: string;
  hash: string;
  displayPrefix: string;
  /** The key's last 4 characters: what its redacted value shows. */
  last4: string;
}

export function generateApiKey(): IssuedKey {
  const secret = randomBytes(32).toString('base64url');
  const key = `${API_KEY_PREFIX}${secret}${checksum(secret)}`;
  return { key, hash: hashApiKey(key), displayPrefix: displayPrefix(key), last4: key.slice(-4) };
}

/** True when the key has our shape and its checksum matches: worth a database lookup. */
export function isWellFormedApiKey(key: string): boolean {
  const m = SHAPE.exec(key);
  return m !== null && checksum(m[1]!) === m[2];
}

export function hashApiKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

export function displayPrefix(key: string): string {
  return key.slice(0, API_KEY_PREFIX.length + 6);
}

/** Constant-time comparison of two hex digests. */
export function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a, 'hex');
  const y = Buffer.from(b, 'hex');
  return x.length === y.length && timingSafeEqual(x, y);
}

/**
 * What a key is shown as: the prefix and its last 4 characters. A key issued before the last 4
 * were kept shows its first characters instead (its display prefix), followed by the ellipsis.
 */
export function redactedValue(key: { last4: string | null; display_prefix: string }): string {
  return key.last4 === null ? `${key.display_prefix}…` : `${API_KEY_PREFIX}…${key.last4}`;
}
