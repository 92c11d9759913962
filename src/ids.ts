import { randomBytes } from 'node:crypto';

// Identifiers that are unique but not secret (request and completion ids): drawn from a pool of
// random bytes filled 4 KiB at a time, since one randomBytes call per id cost tens of
// microseconds a request. Secrets (API keys, verification tokens) take randomBytes of their own.
const POOL_BYTES = 4096;
let pool = Buffer.alloc(0);
let used = 0;

/** `bytes` random bytes from the pool, base64url-encoded. */
export function randomIdPart(bytes: number): string {
  if (used + bytes > pool.length) {
    pool = randomBytes(Math.max(POOL_BYTES, bytes));
    used = 0;
  }
  const part = pool.toString('base64url', used, used + bytes);
  used += bytes;
  return part;
}
