import type { Clock } from '../clock.js';
import type { Db } from '../infra/db.js';
import type { Logger } from '../logger.js';
import { touchKeyLastUsed } from './keys.repository.js';

/** How stale a key's last_used_at may be: it is written at most once per key in this span. */
export const LAST_USED_GRANULARITY_MS = 60_000;
const MAX_TRACKED = 10_000;

/**
 * Records when each key was last used without a Postgres write per request: each web process
 * writes a key's last_used_at at most once a minute, and the UPDATE itself skips a row another
 * process wrote within the minute. The write runs beside the request, never in its way; a failed
 * one is logged and the next minute's use writes again.
 */
export class KeyLastUsed {
  private readonly written = new Map<string, number>();

  touch(deps: { db: Db; clock: Clock; log: Logger }, keyId: string): void {
    const now = deps.clock.now();
    const last = this.written.get(keyId);
    if (last !== undefined && now.getTime() - last < LAST_USED_GRANULARITY_MS) return;
    // Oldest first out (a Map iterates in insertion order): re-inserted so a busy key stays.
    this.written.delete(keyId);
    if (this.written.size >= MAX_TRACKED) this.written.delete(this.written.keys().next().value!);
    this.written.set(keyId, now.getTime());
    const before = new Date(now.getTime() - LAST_USED_GRANULARITY_MS);
    touchKeyLastUsed(deps.db, keyId, now, before).catch((err: unknown) => {
      this.written.delete(keyId);
      deps.log.warn({ err, keyId }, 'could not record when the API key was last used');
    });
  }
}
