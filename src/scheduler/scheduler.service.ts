import { schedule, type ScheduledTask } from 'node-cron';
import type { AppContext } from '../context.js';
import { stripeConfigured } from '../infra/stripe.js';
import type { BackgroundService } from '../lifecycle.js';
import { latestDuePeriod } from './cron.js';
import { runJob, type RunOutcome } from './job-runner.js';
import { JOBS, type JobDefinition } from './jobs.js';

export interface Scheduler extends BackgroundService {
  /** The jobs this scheduler runs. */
  jobs: string[];
  /** Runs every job whose latest due period has not succeeded yet (what start-up and each cron tick do). */
  wake(reason: string): Promise<void>;
}

/** Runs one job's latest due period unless it already succeeded or another replica holds it. */
export async function runDueJob(app: AppContext, job: JobDefinition, opts: { shouldStop?: () => boolean } = {}): Promise<{ period: string } & RunOutcome> {
  const period = latestDuePeriod(job.granularity, job.cron(app.config), app.clock.now());
  return { period, ...(await runJob(app, job, period, opts)) };
}

/**
 * The scheduler role: node-cron tasks in UTC that only decide what is due and run it. Whenever
 * the scheduler wakes (at start-up, and at any job's cron tick) it runs every job whose latest
 * due period has no successful run yet, so a run missed while no scheduler was up is caught up at
 * start, and a failed run is retried at the next tick. Wakes in one process run one after another.
 */
export function startScheduler(app: AppContext): Scheduler {
  let stopping = false;
  let chain: Promise<void> = Promise.resolve();
  // Without Stripe there is nobody to invoice or reconcile with (no account can be paid).
  const jobs = Object.values(JOBS).filter((job) => !job.needsStripe || stripeConfigured(app.config));
  const left = Object.values(JOBS).filter((job) => !jobs.includes(job));
  if (left.length) app.log.warn({ jobs: left.map((j) => j.name) }, 'STRIPE_SECRET_KEY is not set: these jobs are not scheduled');

  const runAllDue = async (reason: string) => {
    for (const job of jobs) {
      if (stopping) return;
      try {
        const r = await runDueJob(app, job, { shouldStop: () => stopping });
        if (r.outcome !== 'already_done') app.log.info({ job: job.name, period: r.period, outcome: r.outcome, reason }, 'scheduler: job due');
      } catch (err) {
        app.log.error({ err, job: job.name, reason }, 'scheduler: could not run a due job; the next wake retries');
      }
    }
  };

  const wake = (reason: string): Promise<void> => {
    chain = chain.then(() => runAllDue(reason));
    return chain;
  };

  const logger = {
    info: (msg: string) => app.log.debug({ component: 'node-cron' }, msg),
    warn: (msg: string) => app.log.warn({ component: 'node-cron' }, msg),
    error: (msg: string | Error, err?: Error) => app.log.error({ component: 'node-cron', err: err ?? msg }, String(msg)),
    debug: (msg: string | Error) => app.log.debug({ component: 'node-cron' }, String(msg)),
  };
  const tasks: ScheduledTask[] = jobs.map((job) =>
    schedule(job.cron(app.config), () => wake(`cron:${job.name}`), { timezone: 'UTC', name: `scheduler:${job.name}`, logger }),
  );
  void wake('start');

  return {
    name: 'scheduler',
    jobs: jobs.map((j) => j.name),
    wake,
    async stop() {
      stopping = true;
      for (const t of tasks) await t.destroy();
      await chain;
    },
  };
}
