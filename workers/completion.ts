import { randomBytes } from 'node:crypto';
import type { ChainableCommander } from 'ioredis';
import type { AppContext } from '../src/context.js';
import type { BackgroundService } from '../src/lifecycle.js';
import { COMPLETIONS_QUEUE, createWorker } from '../src/infra/queues.js';
import type { CompletionJob } from '../src/chat/completion-job.js';
import { cancelPattern } from '../src/chat/relay-protocol.js';
import { RelayBatch } from '../src/chat/relay-publisher.js';
import { ClientWatch, ConnectionStability, settledAfterMs, WorkerPresence, workerAliveKey } from '../src/chat/liveness.js';
import { runJob, type JobRuntime, type RunningJob } from '../src/chat/run-job.js';
import { recordUsageDirectly } from '../src/usage/metering.service.js';
import { isDependencyDown } from '../src/infra/outage.js';

const FETCH_LOOPS = 4;

/**
 * The completion worker: takes jobs from the queue (config.queue.workerConcurrency at a time) and
 * hands each to runJob. Around it: cancellation on one pattern subscription per process, this
 * worker's liveness key (a re-run of a job it holds leaves the job alone while it lives), and the
 * watch on the web processes its jobs answer to (a dead one's jobs are stopped).
 */
export async function startCompletionWorker(app: AppContext): Promise<BackgroundService> {
  const { config } = app;
  const prefix = config.redis.prefix;
  const workerId = `${process.pid}-${randomBytes(3).toString('hex')}`;
  const running = new Map<string, RunningJob>();
  const metrics = app.metrics.completion;

  const cancels = app.redisConnection('subscriber', 'cancel-subscriber');
  const cancelPrefix = cancelPattern(prefix).slice(0, -1);
  cancels.on('pmessage', (_pattern: string, channel: string) => {
    const job = running.get(channel.slice(cancelPrefix.length));
    if (job && !job.controller.signal.aborted) job.controller.abort('client_cancelled');
  });
  await cancels.psubscribe(cancelPattern(prefix));
  // Fail at start-up, not on the first request, when the catalog file is wrong.
  app.checkCatalog();

  // The settle script runs by hash inside each request's closing MULTI: load it now and after
  // every reconnect (a restarted Redis has forgotten it; a miss in between falls back, see settleAfter).
  const loadScript = () => app.limiter.loadSettleScript().catch((err) => app.log.warn({ reason: String(err) }, 'could not load the settle script yet; settles fall back until it loads'));
  await loadScript();
  app.redis.on('ready', () => void loadScript());

  const ttl = config.queue.livenessTtlMs;
  const stability = new ConnectionStability(app.redis);
  const presence = new WorkerPresence(app.redis, prefix, workerId, ttl, () => ({ concurrency: config.queue.workerConcurrency, active: running.size }));
  await presence.start();
  const watch = new ClientWatch(app.redis, stability, running, ttl, prefix, (requestId) => {
    app.log.info({ requestId }, 'the web process holding this request is gone; stopping it');
  });
  watch.start();

  const runtime: JobRuntime = {
    app,
    workerId,
    batch: new RelayBatch(app.redis, { runningSeconds: Math.ceil((config.providers.requestTimeoutMs / 1000) * 3), endedSeconds: config.queue.relayLogTtlSeconds }, (err) => {
      metrics.relayPublishFailures.inc();
      if (isDependencyDown(err)) app.outages.redis.failure('relay', err);
      else app.log.error({ err }, 'Redis refused a relay command');
    }),
    running,
    settleInto: (job) => (tx: ChainableCommander, actualTokens: number) => {
      for (const [cmd, ...args] of app.limiter.settleCommands({ accountId: job.accountId, requestId: job.id, actualTokens })) tx.call(cmd, ...args);
    },
    settleAlone: (job) => (actualTokens: number) => app.limiter.settle({ accountId: job.accountId, requestId: job.id, actualTokens }),
    recordDirectly: (usage) => recordUsageDirectly(app, usage),
    workerAlive: async (id) => {
      // Absence means something only on a connection that has been up long enough (see liveness.ts).
      while (!stability.stableFor(settledAfterMs(ttl))) await new Promise((r) => setTimeout(r, 100));
      return (await app.redis.exists(workerAliveKey(prefix, id))) === 1;
    },
    metrics,
    beforeRecord: config.faults.crashBeforeRecord
      ? () => {
          app.log.warn('failpoint crash-before-record: exiting without recording usage');
          process.kill(process.pid, 'SIGKILL');
        }
      : undefined,
  };

  // Several BullMQ workers share the process's concurrency: one worker fetches jobs one at a time,
  // and under load its single fetch loop waits behind everything else on the event loop. Four
  // loops picked jobs up in about half the time in the benchmark.
  const fetchers = Math.min(FETCH_LOOPS, config.queue.workerConcurrency);
  const workers = Array.from({ length: fetchers }, (_, i) =>
    createWorker<CompletionJob>(
      config,
      COMPLETIONS_QUEUE,
      app.redisConnection('queue-worker', `completion-worker-${i}`),
      async (job) => {
        const outcome = await runJob(runtime, job.data, job.attemptsStarted > 1 || job.stalledCounter > 0);
        metrics.finished.inc({ outcome });
      },
      {
        concurrency: Math.ceil(config.queue.workerConcurrency / fetchers),
        lockDuration: Math.max(config.queue.stalledIntervalMs, 1000),
      },
    ),
  );
  for (const worker of workers) {
    worker.on('error', (err) => {
      if (isDependencyDown(err)) app.outages.redis.failure('completion queue', err);
      // A lock lost in a Redis restart: the job was taken over, declined or finished elsewhere.
      else if (/could not renew lock|Missing lock|Missing key/.test(err.message)) app.log.info({ reason: err.message }, 'a completion job lost its queue lock');
      else app.log.error({ err }, 'completion worker error');
    });
    worker.on('failed', (job, err) => app.log.error({ jobId: job?.id, err }, 'completion job failed'));
  }
  await Promise.all(workers.map((w) => w.waitUntilReady()));

  return {
    name: 'completions',
    async stop() {
      // Finishes the jobs in hand (streams in flight run to their end), takes no new ones.
      await Promise.all(workers.map((w) => w.close()));
      watch.stop();
      await presence.stop();
    },
  };
}
