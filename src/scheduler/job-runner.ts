import type { Clock } from '../clock.js';
import type { Db } from '../infra/db.js';
import type { Logger } from '../logger.js';
import type { SchedulerMetrics } from '../metrics.js';
import type { JobDefinition, JobDeps } from './jobs.js';
import {
  BUSY,
  findRun,
  markRunFinished,
  markRunStarted,
  recentRuns,
  withRunClaim,
} from './scheduler-runs.repository.js';

/** The latest runs of every job, newest first (`npm run run-job -- status`). */
export const recentJobRuns = (db: Db, limit: number) => recentRuns(db, limit);

export type RunOutcome =
  | { outcome: 'ran'; ok: boolean; summary: Record<string, unknown> }
  | { outcome: 'already_done'; finishedAt: Date | null }
  | { outcome: 'busy' };

export interface RunOptions {
  /** Run even when this period already succeeded (an operator's re-run; nothing is billed twice). */
  force?: boolean;
  /** Only these accounts: no claim and no scheduler_runs record (the period is not "done" for everyone). */
  accounts?: string[];
  /** Do the work in this process rather than hand it to the workers (run-job --here). */
  inProcess?: boolean;
  progress?: (line: string) => void;
  /** Polled between accounts; true stops the run (recorded as failed, resumed by the next run). */
  shouldStop?: () => boolean;
}

export class RunInterrupted extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RunInterrupted';
  }
}

/** What running a job's period works with: its claim and record in Postgres, the clock, the job's own deps. */
export type JobRunnerDeps = JobDeps & { db: Db; clock: Clock; log: Logger; metrics: { scheduler: SchedulerMetrics } };

/**
 * Runs a job for a period at most once at a time across every worker and run-job
 * process: the claim is a Postgres advisory lock held by a transaction of its own for the whole
 * run, and before each account the job checks (fencing) that the lock is still held. A period that already
 * succeeded is skipped unless forced. Every account-level step is idempotent as well, so even a
 * run that lost its claim mid-account could not bill twice.
 */
export async function runJob(
  app: JobRunnerDeps,
  job: JobDefinition,
  period: string,
  opts: RunOptions = {},
): Promise<RunOutcome> {
  const m = app.metrics.scheduler;
  const stopCheck = () =>
    opts.shouldStop?.() ? Promise.reject(new RunInterrupted('the process running it is stopping')) : Promise.resolve();
  if (opts.accounts?.length) {
    const result = await job.run(app, period, {
      accounts: opts.accounts,
      progress: opts.progress,
      checkpoint: stopCheck,
    });
    return { outcome: 'ran', ...result };
  }
  const outcome = await withRunClaim(app.db, job.name, period, async (claim): Promise<RunOutcome> => {
    const previous = await findRun(app.db, job.name, period);
    if (previous?.status === 'succeeded' && !opts.force) {
      m.runs.inc({ job: job.name, outcome: 'already_done' });
      return { outcome: 'already_done', finishedAt: previous.finished_at };
    }
    await markRunStarted(app.db, job.name, period, app.clock.now());
    app.log.info({ job: job.name, period, previous: previous?.status ?? null }, 'scheduled job started');
    const checkpoint = async () => {
      await stopCheck();
      if (!(await claim.isHeld())) throw new RunInterrupted('the run lost its claim');
    };
    let ok: boolean;
    let summary: Record<string, unknown>;
    try {
      ({ ok, summary } = await job.run(app, period, {
        progress: opts.progress,
        inProcess: opts.inProcess,
        checkpoint,
      }));
    } catch (err) {
      ok = false;
      summary = { error: err instanceof Error ? err.message : String(err) };
      app.log.error({ err, job: job.name, period }, 'scheduled job failed');
    }
    await markRunFinished(app.db, job.name, period, ok ? 'succeeded' : 'failed', app.clock.now(), summary);
    m.runs.inc({ job: job.name, outcome: ok ? 'succeeded' : 'failed' });
    if (ok) m.lastSuccess.set({ job: job.name }, app.clock.now().getTime() / 1000);
    app.log.info({ job: job.name, period, ok, summary }, 'scheduled job finished');
    return { outcome: 'ran', ok, summary };
  });
  if (outcome === BUSY) {
    m.runs.inc({ job: job.name, outcome: 'busy' });
    return { outcome: 'busy' };
  }
  return outcome;
}
