import { sql } from 'kysely';
import type { Db } from '../infra/db.js';

// Per-account serialisation of invoicing.

// Session-level advisory locks live as long as the connection (or until released): a process that
// dies mid-invoice frees its accounts at once, with no lease to wait out. Namespace 7001 keeps our
// keys apart from anyone else's advisory locks.
const ACCOUNT_LOCK_NS = 7001;

async function tryLockAccountForInvoicing(conn: Db, accountId: string): Promise<boolean> {
  const r = await sql<{ ok: boolean }>`select pg_try_advisory_lock(${ACCOUNT_LOCK_NS}::int, hashtext(${accountId})) as ok`.execute(conn);
  return r.rows[0]?.ok === true;
}

async function unlockAccountForInvoicing(conn: Db, accountId: string): Promise<void> {
  await sql`select pg_advisory_unlock(${ACCOUNT_LOCK_NS}::int, hashtext(${accountId}))`.execute(conn);
}

export const BUSY = Symbol('busy');

/**
 * Runs `fn` on one pinned connection holding the account's invoicing lock, waiting up to
 * `waitMs` for another holder to finish. BUSY when it never got the lock.
 */
export async function withInvoicingLock<T>(db: Db, accountId: string, waitMs: number, fn: (conn: Db) => Promise<T>): Promise<T | typeof BUSY> {
  return db.connection().execute(async (conn) => {
    const deadline = Date.now() + waitMs;
    while (!(await tryLockAccountForInvoicing(conn, accountId))) {
      if (Date.now() >= deadline) return BUSY;
      await new Promise((r) => setTimeout(r, 100));
    }
    try {
      return await fn(conn);
    } finally {
      await unlockAccountForInvoicing(conn, accountId).catch(() => undefined);
    }
  });
}
