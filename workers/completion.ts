import type { AppContext } from '../src/context.js';
import type { BackgroundService } from '../src/lifecycle.js';
import { completionShards, createWorker } from '../src/infra/queues.js';
import type { Watchdog } from '../src/infra/watchdog.js';
import { isDependencyDown } from '../src/infra/outage.js';
import type { CompletionJob } from '../src/chat/relay/completion-job.js';
import { startCompletionJobs, type StoredResponses } from '../src/chat/job/completion-jobs.js';
import { answerWrite, markEnded, markStarted } from '../src/responses/stored-responses.service.js';
import { storedResponseBatch } from '../src/responses/stored-response-batch.js';

const FETCH_LOOPS = 4;

/**
 * The completion worker: takes jobs from every shard of the queue (config.queue.workerConcurrency
 * at a time in all) and hands each to chat's completion jobs (src/chat/job/completion-jobs.ts).
 */
export async function startCompletionWorker(
  app: AppContext,
  watchdog?: Pick<Watchdog, 'markOnStall' | 'unmarkOnStall'>,
): Promise<BackgroundService> {
  const { config } = app;
  // Fail at start-up, not on the first request, when the catalog file is wrong.
  app.checkCatalog();
  app.compute.start();
  // Answers that end together are stored in one statement (stored-response-batch.ts).
  const storeResponses = storedResponseBatch(app.db);
  const responses: StoredResponses = {
    store: (job, response) => storeResponses(answerWrite(app, job, response)),
    start: (job, response) => markStarted(app, job, response),
    end: (job, response) => markEnded(app, job, response),
  };
  const jobs = await startCompletionJobs({
    redis: app.redis,
    subscriber: app.redisConnection('subscriber', 'cancel-subscriber'),
    config,
    log: app.log,
    clock: app.clock,
    metrics: app.metrics,
    providers: app.providers,
    outages: app.outages,
    limiter: app.limiter,
    ledger: { db: app.db, onUsageRecorded: app.onUsageRecorded },
    responses,
    watchdog,
  });

  const shards = completionShards(config);
  const workers = fetchLoops(config.queue.workerConcurrency, shards.length).map((concurrency, i) =>
    createWorker<CompletionJob>(
      config,
      shards[i % shards.length]!,
      app.redisConnection('queue-worker', `completion-worker-${i}`),
      (job) =>
        jobs.run(job.data, {
          rerun: job.attemptsStarted > 1 || job.stalledCounter > 0,
          waitedMs: job.processedOn === undefined ? undefined : Math.max(0, job.processedOn - job.timestamp),
        }),
      { concurrency },
    ),
  );
  for (const worker of workers) {
    worker.on('error', (err) => {
      if (isDependencyDown(err)) app.outages.redis.failure('completion queue', err);
      // A lock lost in a Redis restart: the job was taken over, declined or finished elsewhere, and
      // its end reported to the queue by this worker finds the lock gone or another's.
      else if (/could not renew lock|Missing lock|Missing key|Lock mismatch/.test(err.message))
        app.log.info({ reason: err.message }, 'a completion job lost its queue lock');
      else app.log.error({ err }, 'completion worker error');
    });
    worker.on('failed', (job, err) => {
      app.log.error({ jobId: job?.id, err }, 'completion job failed');
      // The queue found it stalled once more than it re-runs a job: nobody will answer it now.
      if (job && /stalled more than allowable limit/.test(err.message)) void jobs.abandoned(job.data);
    });
  }
  await Promise.all(workers.map((w) => w.waitUntilReady()));

  return {
    name: 'completions',
    async stop() {
      // Finishes the jobs in hand (streams in flight run to their end), takes no new ones.
      await Promise.all(workers.map((w) => w.close()));
      await jobs.stop();
    },
  };
}

/**
 * The concurrency of each BullMQ worker, one per fetch loop. Several share the process's
 * concurrency: one worker fetches jobs one at a time, and under load its single fetch loop waits
 * behind everything else on the event loop. Four loops picked jobs up in about half the time in the
 * benchmark. Every shard of the queue gets the same number of loops (at least one); the dispatcher
 * spreads jobs evenly over the shards, and the loops share the concurrency exactly (with fewer jobs
 * at once than shards, one per shard).
 */
function fetchLoops(concurrency: number, shards: number): number[] {
  const perShard = Math.max(1, Math.floor(Math.min(FETCH_LOOPS, concurrency) / shards));
  const fetchers = perShard * shards;
  return Array.from({ length: fetchers }, (_, i) =>
    Math.max(1, Math.floor(concurrency / fetchers) + (i < concurrency % fetchers ? 1 : 0)),
  );
}
