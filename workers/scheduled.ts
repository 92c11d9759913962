import type { AppContext } from '../src/context.js';
import { createWorker, SCHEDULED_QUEUE } from '../src/infra/queues.js';
import type { BackgroundService } from '../src/lifecycle.js';
import { runJob } from '../src/scheduler/job-runner.js';
import { isJobName, JOBS } from '../src/scheduler/jobs.js';
import type { ScheduledWork } from '../src/scheduler/scheduler.service.js';

/** Another process holds the period's claim (a run-job by an operator): try again later. */
class PeriodBusy extends Error {}

/**
 * Runs the periods the scheduler hands over. The run claims its period (an advisory lock held for
 * the whole run), so however many workers take the same period, it runs once; a period another
 * process holds is retried with backoff.
 */
export async function startScheduledWork(app: AppContext): Promise<BackgroundService> {
  let stopping = false;
  // Present at zero from the start, so that increase() counts this process's first failed run too.
  for (const job of Object.keys(JOBS))
    for (const outcome of ['succeeded', 'failed']) app.metrics.scheduler.runs.inc({ job, outcome }, 0);
  const worker = createWorker<ScheduledWork>(
    app.config,
    SCHEDULED_QUEUE,
    app.redisConnection('queue-worker', 'scheduled-worker'),
    async (job) => {
      const { job: name, period } = job.data;
      if (!isJobName(name)) throw new Error(`unknown scheduled job ${String(name)}`);
      const outcome = await runJob(app, JOBS[name], period, { shouldStop: () => stopping });
      if (outcome.outcome === 'busy') throw new PeriodBusy(`${name} ${period} is held by another process`);
    },
    { concurrency: 1 },
  );
  worker.on('error', (err) => app.log.warn({ reason: err.message }, 'scheduled work: queue error'));
  worker.on('failed', (job, err) => {
    if (!(err instanceof PeriodBusy)) app.log.error({ jobId: job?.id, err }, 'scheduled work failed');
  });
  await worker.waitUntilReady();
  return {
    name: 'scheduled-work',
    async stop() {
      stopping = true;
      await worker.close();
    },
  };
}
