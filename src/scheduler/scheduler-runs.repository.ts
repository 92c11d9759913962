import { LOCK_BUSY as BUSY, withAdvisoryLock, type Db, type HeldLock } from '../infra/db.js';

// A run of a scheduled job for a period is claimed by a transaction-scoped advisory lock, held by
// a transaction of its own for the whole run (infra/db.ts says why not a session lock): exclusive
// while the process lives, released by Postgres the moment its connection ends (a killed worker
// frees its claim at once; no lease to wait out). scheduler_runs keeps the record of each
// period's last run, which catch-up reads.
const JOB_LOCK_NS = 7002;

export { BUSY };

/**
 * Runs `fn` holding the claim on `job`'s `period`, or answers BUSY at once when another process
 * holds it. `claim.isHeld()` is the fencing check: false, or a rejection, once the claim's
 * connection is gone.
 */
export async function withRunClaim<T>(
  db: Db,
  job: string,
  period: string,
  fn: (claim: HeldLock) => Promise<T>,
): Promise<T | typeof BUSY> {
  return withAdvisoryLock(db, { namespace: JOB_LOCK_NS, name: `${job}:${period}` }, 0, fn);
}

export async function findRun(db: Db, job: string, period: string) {
  return db
    .selectFrom('scheduler_runs')
    .selectAll()
    .where('job', '=', job)
    .where('period_key', '=', period)
    .executeTakeFirst();
}

export async function markRunStarted(db: Db, job: string, period: string, at: Date): Promise<void> {
  await db
    .insertInto('scheduler_runs')
    .values({ job, period_key: period, status: 'running', started_at: at, finished_at: null })
    .onConflict((oc) =>
      oc.columns(['job', 'period_key']).doUpdateSet({ status: 'running', started_at: at, finished_at: null }),
    )
    .execute();
}

export async function markRunFinished(
  db: Db,
  job: string,
  period: string,
  status: 'succeeded' | 'failed',
  at: Date,
  details: unknown,
): Promise<void> {
  await db
    .updateTable('scheduler_runs')
    .set({ status, finished_at: at, details: JSON.stringify(details) })
    .where('job', '=', job)
    .where('period_key', '=', period)
    .execute();
}

export async function recentRuns(db: Db, limit: number) {
  return db.selectFrom('scheduler_runs').selectAll().orderBy('started_at', 'desc').limit(limit).execute();
}
