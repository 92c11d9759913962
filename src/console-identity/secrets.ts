import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';

// The console's secrets (a sign-in link's token, a session cookie's value) are 256 random bits,
// URL-safe, and stored only as their SHA-256: a database leak yields no usable link or session.

export function generateSecret(): { value: string; hash: string } {
  const value = randomBytes(32).toString('base64url');
  return { value, hash: hashSecret(value) };
}

export const hashSecret = (value: string): string => createHash('sha256').update(value).digest('hex');

/**
 * The session's CSRF token, derived from the cookie value (which page script cannot read, being
 * HttpOnly, and another site cannot learn): nothing to store, and it dies with the session.
 */
export const csrfTokenFor = (sessionValue: string): string =>
  createHash('sha256').update(`csrf\u0000${sessionValue}`).digest('base64url');

export function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

const keyFor = (sessionValue: string): Buffer =>
  Buffer.from(hkdfSync('sha256', sessionValue, '', 'console pending api key', 32));

/**
 * Encrypts `plain` (the key a verification issued) so that only a request carrying the session's
 * cookie can read it: the stored row alone decrypts to nothing. AES-256-GCM, iv.tag.ciphertext.
 */
export function sealForSession(sessionValue: string, plain: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', keyFor(sessionValue), iv);
  const data = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
  return [iv, cipher.getAuthTag(), data].map((b) => b.toString('base64url')).join('.');
}

/** The sealed text, or undefined when it was not sealed for this session. */
export function openForSession(sessionValue: string, sealed: string): string | undefined {
  const [iv, tag, data] = sealed.split('.').map((p) => Buffer.from(p, 'base64url'));
  if (!iv || !tag || !data) return undefined;
  try {
    const decipher = createDecipheriv('aes-256-gcm', keyFor(sessionValue), iv);
    decipher.setAuthTag(tag);
    return Buffer.concat([decipher.update(data), decipher.final()]).toString('utf8');
  } catch {
    return undefined;
  }
}
