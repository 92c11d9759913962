import { randomBytes } from 'node:crypto';
import type { AppContext } from '../src/context.js';
import type { BackgroundService } from '../src/lifecycle.js';
import { completionShards, createWorker } from '../src/infra/queues.js';
import { settlementOf, type CompletionJob } from '../src/chat/relay/completion-job.js';
import {
  cancelChannel,
  detachedRequest,
  relayTtls,
  requestStateKey,
  STALLED_FIELD,
} from '../src/chat/relay/protocol.js';
import type { Watchdog } from '../src/infra/watchdog.js';
import { ResumeGrace } from '../src/chat/relay/resume-grace.js';
import { RelayBatch } from '../src/chat/relay/relay-batch.js';
import {
  ClientWatch,
  ConnectionStability,
  settledAfterMs,
  WorkerPresence,
  readWorkerSeen,
  WEB_PROCESS_GONE,
} from '../src/chat/relay/liveness.js';
import { endAbandoned, runJob, type JobRuntime, type RunningJob } from '../src/chat/job/run-job.js';
import { traceJob } from '../src/chat/relay/completion-tracing.js';
import { recordUsageDirectly } from '../src/usage/metering.service.js';
import { answerWrite, markEnded, markStarted } from '../src/responses/stored-responses.service.js';
import { storedResponseBatch } from '../src/responses/stored-response-batch.js';
import { endedResponse, startingResponse } from '../src/chat/stream/presenters/response.presenter.js';
import { appendUsage } from '../src/usage/usage-stream.js';
import { isDependencyDown } from '../src/infra/outage.js';
import { eventLoopLag } from '../src/metrics.js';

const FETCH_LOOPS = 4;

/**
 * The completion worker: takes jobs from every shard of the queue (config.queue.workerConcurrency
 * at a time in all) and hands each to runJob. Around it: cancellation on a channel of its own,
 * this worker's liveness key (a re-run of a job it holds leaves the job alone while it lives), and
 * the watch on the web processes its jobs answer to (a dead one's jobs are stopped).
 */
export async function startCompletionWorker(
  app: AppContext,
  watchdog?: Pick<Watchdog, 'markOnStall' | 'unmarkOnStall'>,
): Promise<BackgroundService> {
  const { config } = app;
  const prefix = config.redis.prefix;
  const workerId = `${process.pid}-${randomBytes(3).toString('hex')}`;
  const running = new Map<string, RunningJob>();
  const metrics = app.metrics.completion;

  // A web process whose client leaves names the request on this worker's channel (it reads which
  // worker holds the request from the request's state).
  const cancels = app.redisConnection('subscriber', 'cancel-subscriber');
  const channel = cancelChannel(prefix, workerId);
  const ttl = config.queue.livenessTtlMs;
  const stability = new ConnectionStability(app.redis);
  const grace = new ResumeGrace({
    redis: app.redis,
    prefix,
    graceMs: config.queue.resumeGraceSeconds * 1000,
    settled: () => stability.stableFor(settledAfterMs(ttl)),
    onExpired: (requestId) =>
      app.log.info({ requestId }, 'no reader resumed this stream within the grace period; stopping it'),
  });
  cancels.on('smessage', (from: string, message: string) => {
    if (from !== channel) return;
    const detached = detachedRequest(message);
    const job = running.get(detached ?? message);
    if (!job) return;
    if (detached !== undefined) grace.detached(detached, job);
    else if (!job.controller.signal.aborted) job.controller.abort('client_cancelled');
  });
  await cancels.ssubscribe(channel);
  // Fail at start-up, not on the first request, when the catalog file is wrong.
  app.checkCatalog();
  app.compute.start();

  const lag = eventLoopLag();
  const presence = new WorkerPresence({
    redis: app.redis,
    prefix,
    workerId,
    ttlMs: ttl,
    capacity: () => ({ concurrency: config.queue.workerConcurrency, active: running.size, lagMs: lag.takeMaxMs() }),
  });
  await presence.start();
  const watch = new ClientWatch({
    redis: app.redis,
    stability,
    running,
    ttlMs: ttl,
    prefix,
    onGone: (requestId) => app.log.info({ requestId }, 'the web process holding this request is gone; stopping it'),
    onDetached: (requestId) => {
      const job = running.get(requestId);
      if (!job) return;
      // A resumable request none of whose events reached the web process: its client never held
      // the completion id it would resume with, so it left before the request began for it. A
      // background response's client had its id in the first answer: it runs on.
      if ((job.publisher?.received ?? 0) === 0 && !job.background) {
        app.log.info(
          { requestId },
          'the web process holding this request died before its client had its id; stopping it',
        );
        job.controller.abort(WEB_PROCESS_GONE);
        return;
      }
      grace.detached(requestId, job);
    },
  });
  watch.start();

  // Answers that end together are stored in one statement (stored-response-batch.ts).
  const storeResponses = storedResponseBatch(app.db);
  const runtime: JobRuntime = {
    app,
    workerId,
    batch: new RelayBatch({
      redis: app.redis,
      ttls: relayTtls(config),
      onFailure: (err) => {
        metrics.relayPublishFailures.inc();
        if (isDependencyDown(err)) app.outages.redis.failure('relay', err);
        else app.log.error({ err }, 'Redis refused a relay command');
      },
      coalesceMs: config.queue.relayCoalesceMs,
    }),
    running,
    // The usage stream and the account's quota keys live in different slots: two commands, sent together.
    record: (job, usage) =>
      Promise.all([appendUsage(app.redis, config, job.shard, usage), app.limiter.settle(settlementOf(job, usage))]),
    recordDirectly: (usage) => recordUsageDirectly(app, usage),
    storeResponse: (job, response) => storeResponses(answerWrite(app, job, response)),
    startResponse: (job) => markStarted(app, job, startingResponse(job, 'in_progress')),
    endResponse: (job, status, error, delivered) => markEnded(app, job, endedResponse(job, status, error, delivered)),
    workerSeen: async (id) => {
      // Absence means something only on a connection that has been up long enough (see src/chat/relay/liveness.ts).
      while (!stability.stableFor(settledAfterMs(ttl))) await new Promise((r) => setTimeout(r, 100));
      return readWorkerSeen(app.redis, prefix, id);
    },
    metrics,
    grace,
    beforeRecord: config.faults.crashBeforeRecord
      ? () => {
          app.log.warn('failpoint crash-before-record: exiting without recording usage');
          process.kill(process.pid, 'SIGKILL');
        }
      : undefined,
    beforeUpstream: blockOn(app, config.faults.blockWorkerForUser),
  };

  // Several BullMQ workers share the process's concurrency: one worker fetches jobs one at a time,
  // and under load its single fetch loop waits behind everything else on the event loop. Four
  // loops picked jobs up in about half the time in the benchmark. Every shard of the queue gets the
  // same number of loops (at least one); the dispatcher spreads jobs evenly over the shards, and the
  // loops share the concurrency exactly (with fewer jobs at once than shards, one per shard).
  const shards = completionShards(config);
  const concurrency = config.queue.workerConcurrency;
  const perShard = Math.max(1, Math.floor(Math.min(FETCH_LOOPS, concurrency) / shards.length));
  const fetchers = perShard * shards.length;
  let runs = 0;
  const share = (i: number) => Math.max(1, Math.floor(concurrency / fetchers) + (i < concurrency % fetchers ? 1 : 0));
  const workers = Array.from({ length: fetchers }, (_, i) =>
    createWorker<CompletionJob>(
      config,
      shards[i % shards.length]!,
      app.redisConnection('queue-worker', `completion-worker-${i}`),
      async (job) => {
        const rerun = job.attemptsStarted > 1 || job.stalledCounter > 0;
        // A re-run's wait would count its first run's time as queueing.
        if (!rerun && job.processedOn !== undefined)
          metrics.queueWait.observe(Math.max(0, job.processedOn - job.timestamp) / 1000);
        // Should this process stall, its watchdog marks the jobs it holds: their take-over fails them
        // instead of handing them to the next worker.
        const request = job.data;
        // One mark per run: the same request may be handed to this process twice (a lock lost in a Redis restart).
        const mark = `${request.id}/${++runs}`;
        watchdog?.markOnStall(mark, requestStateKey(prefix, request.relayTo, request.id), STALLED_FIELD);
        try {
          const outcome = await traceJob(request, rerun, () => runJob(runtime, request, rerun));
          metrics.finished.inc({ outcome });
        } finally {
          watchdog?.unmarkOnStall(mark);
        }
      },
      { concurrency: share(i) },
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
      if (job && /stalled more than allowable limit/.test(err.message))
        endAbandoned(runtime, job.data).then(
          (outcome) => metrics.finished.inc({ outcome }),
          (e: unknown) => app.log.error({ jobId: job.id, err: e }, 'could not end a job the queue gave up on'),
        );
    });
  }
  await Promise.all(workers.map((w) => w.waitUntilReady()));

  return {
    name: 'completions',
    async stop() {
      // Finishes the jobs in hand (streams in flight run to their end), takes no new ones.
      await Promise.all(workers.map((w) => w.close()));
      watch.stop();
      await presence.stop();
      lag.stop();
    },
  };
}

/** Failpoint FAULT_BLOCK_WORKER_USER: a job whose `user` is the marker blocks this thread for good (without spinning a core). */
function blockOn(app: AppContext, marker: string | undefined): JobRuntime['beforeUpstream'] {
  if (marker === undefined) return undefined;
  return (job) => {
    if (job.params.user !== marker) return;
    app.log.warn({ requestId: job.id }, 'failpoint FAULT_BLOCK_WORKER_USER: blocking the event loop');
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
  };
}
