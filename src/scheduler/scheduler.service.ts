import { schedule, type ScheduledTask } from 'node-cron';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Queue } from '../infra/queues.js';
import { stripeConfigured } from '../infra/stripe.js';
import type { Logger } from '../logger.js';
import type { SchedulerMetrics } from '../metrics.js';
import { latestDuePeriod } from './cron.js';
import { JOBS, type JobName } from './jobs.js';

/** One period of one job, as the scheduler hands it to the workers. */
export interface ScheduledWork {
  job: JobName;
  period: string;
}

export interface Scheduler {
  name: string;
  stop(): Promise<void>;
  /** The jobs this scheduler decides about. */
  jobs: string[];
  /** Hands every job's latest due period to the workers (what start-up and each cron tick do). */
  wake(reason: string): Promise<void>;
}

/** What the scheduler works with: the queue it hands work to, the clock its crons read, its config. */
export interface SchedulerDeps {
  queue: Queue<ScheduledWork>;
  clock: Clock;
  log: Logger;
  config: Config;
  metrics: { scheduler: SchedulerMetrics };
}

/** The queue job id of a period: the same period handed over twice (two schedulers) is one job. */
export const scheduledJobId = (w: ScheduledWork): string => `${w.job}.${w.period}`;

/**
 * The scheduler role: node-cron tasks in UTC that only decide what is due and hand it to the
 * workers, which run it (cron fires, workers work). Whenever it wakes (at start-up and at any
 * job's cron tick) it queues every job's latest due period; a period already queued or running is
 * not queued twice, and the worker skips a period that already succeeded, so a run missed while
 * no scheduler was up is caught up at start and a failed run is retried at the next tick. Any
 * number of schedulers can run.
 */
export function startScheduler(deps: SchedulerDeps): Scheduler {
  const { config, log } = deps;
  let stopping = false;
  let chain: Promise<void> = Promise.resolve();
  // Without Stripe there is nobody to invoice or reconcile with (no account can be paid).
  const jobs = Object.values(JOBS).filter((job) => !job.needsStripe || stripeConfigured(config));
  const left = Object.values(JOBS).filter((job) => !jobs.includes(job));
  if (left.length)
    log.warn({ jobs: left.map((j) => j.name) }, 'STRIPE_SECRET_KEY is not set: these jobs are not scheduled');

  const handOver = async (reason: string) => {
    for (const job of jobs) {
      if (stopping) return;
      const work: ScheduledWork = {
        job: job.name,
        period: latestDuePeriod(job.granularity, job.cron(config), deps.clock.now()),
      };
      try {
        // A period another process holds is tried again with backoff; a failed one is removed, so
        // the next wake can hand it over again.
        await deps.queue.add(job.name, work, {
          jobId: scheduledJobId(work),
          attempts: 6,
          backoff: { type: 'exponential', delay: 10_000 },
          removeOnFail: true,
        });
        deps.metrics.scheduler.enqueued.inc({ job: job.name });
        log.debug({ ...work, reason }, 'scheduler: handed a due period to the workers');
      } catch (err) {
        log.warn(
          { ...work, reason, err: err instanceof Error ? err.message : String(err) },
          'scheduler: could not queue a due period; the next wake retries',
        );
      }
    }
  };

  const wake = (reason: string): Promise<void> => {
    chain = chain.then(() => handOver(reason));
    return chain;
  };

  const logger = {
    info: (msg: string) => log.debug({ component: 'node-cron' }, msg),
    warn: (msg: string) => log.warn({ component: 'node-cron' }, msg),
    error: (msg: string | Error, err?: Error) => log.error({ component: 'node-cron', err: err ?? msg }, String(msg)),
    debug: (msg: string | Error) => log.debug({ component: 'node-cron' }, String(msg)),
  };
  const tasks: ScheduledTask[] = jobs.map((job) =>
    schedule(job.cron(config), () => wake(`cron:${job.name}`), {
      timezone: 'UTC',
      name: `scheduler:${job.name}`,
      logger,
    }),
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
