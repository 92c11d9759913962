import { sql } from 'kysely';
import type { Db } from '../infra/db.js';

// A run of a scheduled job for a period is claimed by a session-level advisory lock on the
// connection that runs it: exclusive while the process lives, released by Postgres the moment
// its connection ends (a killed scheduler frees its claim at once; no lease to wait out).
// scheduler_runs keeps the record of each period's last run, which catch-up reads.
const JOB_LOCK_NS = 7002;

export async function tryClaimRun(conn: Db, job: string, period: string): Promise<boolean> {
  const r = await sql<{ ok: boolean }>`select pg_try_advisory_lock(${JOB_LOCK_NS}::int, hashtext(${`${job}:${period}`})) as ok`.execute(conn);
  return r.rows[0]?.ok === true;
}

export async function releaseRun(conn: Db, job: string, period: string): Promise<void> {
  await sql`select pg_advisory_unlock(${JOB_LOCK_NS}::int, hashtext(${`${job}:${period}`}))`.execute(conn);
}

/** The fencing check: this session still holds the run's lock (false, or an error, when its connection was lost). */
export async function holdsRun(conn: Db, job: string, period: string): Promise<boolean> {
  const r = await sql<{ held: boolean }>`
    select exists (
      select 1 from pg_locks
       where locktype = 'advisory' and granted and pid = pg_backend_pid()
         and classid = ${JOB_LOCK_NS}::int::oid
         and objid = (hashtext(${`${job}:${period}`})::bigint & 4294967295)::oid
         and objsubid = 2
    ) as held`.execute(conn);
  return r.rows[0]?.held === true;
}

export async function findRun(db: Db, job: string, period: string) {
  return db.selectFrom('scheduler_runs').selectAll().where('job', '=', job).where('period_key', '=', period).executeTakeFirst();
}

export async function markRunStarted(db: Db, job: string, period: string, at: Date): Promise<void> {
  await db
    .insertInto('scheduler_runs')
    .values({ job, period_key: period, status: 'running', started_at: at, finished_at: null })
    .onConflict((oc) => oc.columns(['job', 'period_key']).doUpdateSet({ status: 'running', started_at: at, finished_at: null }))
    .execute();
}

export async function markRunFinished(db: Db, job: string, period: string, status: 'succeeded' | 'failed', at: Date, details: unknown): Promise<void> {
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
