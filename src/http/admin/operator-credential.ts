import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { Clock } from '../../clock.js';

/** How long a sign-in at the dashboard's form lasts. */
export const OPERATOR_SESSION_MS = 8 * 3_600_000;

const sha256 = (s: string): Buffer => createHash('sha256').update(s).digest();

/**
 * Whether `given` is the operator token. Both sides are hashed first, so the comparison takes the
 * same time whatever their lengths and wherever they differ.
 */
export function isOperatorToken(token: string, given: string): boolean {
  return timingSafeEqual(sha256(token), sha256(given));
}

const sessionMac = (token: string, expires: number): string =>
  createHmac('sha256', token).update(`admin-queues-session:${expires}`).digest('base64url');

/**
 * A signed-in operator's cookie value: its expiry (Unix seconds) and a MAC of it keyed by the
 * token. The token itself never travels in a cookie, and a new ADMIN_TOKEN ends every session.
 */
export function newOperatorSession(token: string, clock: Clock): string {
  const expires = Math.floor((clock.now().getTime() + OPERATOR_SESSION_MS) / 1000);
  return `${expires}.${sessionMac(token, expires)}`;
}

export function isOperatorSession(token: string, value: string | undefined, clock: Clock): boolean {
  const m = /^(\d{1,12})\.([A-Za-z0-9_-]{43})$/.exec(value ?? '');
  if (!m) return false;
  const expires = Number(m[1]);
  const genuine = timingSafeEqual(Buffer.from(m[2]!), Buffer.from(sessionMac(token, expires)));
  return genuine && expires * 1000 > clock.now().getTime();
}
