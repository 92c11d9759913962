import { LOCK_BUSY as BUSY, withAdvisoryLock, type Db } from '../infra/db.js';

// Per-account serialisation of invoicing: a transaction-scoped advisory lock held by a
// transaction of its own for as long as the account is being invoiced (infra/db.ts says why not a
// session lock). A process that dies mid-invoice ends that transaction with its connection, so
// its account is free at once, with no lease to wait out. Namespace 7001 keeps our keys apart from
// anyone else's advisory locks.
const ACCOUNT_LOCK_NS = 7001;

export { BUSY };

/**
 * Runs `fn` while holding the account's invoicing lock, waiting up to `waitMs` for another holder
 * to finish. BUSY when it never got the lock. `fn` gets the database handle to work with.
 */
export async function withInvoicingLock<T>(
  db: Db,
  accountId: string,
  waitMs: number,
  fn: (conn: Db) => Promise<T>,
): Promise<T | typeof BUSY> {
  return withAdvisoryLock(db, { namespace: ACCOUNT_LOCK_NS, name: accountId }, waitMs, () => fn(db));
}
