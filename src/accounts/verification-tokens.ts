import { createHash, randomBytes } from 'node:crypto';

// Verification tokens travel in a link, so they are URL-safe; only their SHA-256 is stored, so a
// database leak yields no usable link.

export function generateVerificationToken(): { token: string; hash: string } {
  const token = randomBytes(32).toString('base64url');
  return { token, hash: hashVerificationToken(token) };
}

export function hashVerificationToken(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}
