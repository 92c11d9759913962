import { randomBytes } from 'node:crypto';
import type { ChainableCommander } from 'ioredis';
import type { AppContext } from '../src/context.js';
import type { BackgroundService } from '../src/lifecycle.js';
import { COMPLETIONS_QUEUE, createWorker } from '../src/infra/queues.js';
import { redisKey } from '../src/infra/redis.js';
import { catalogOf } from '../src/catalog/catalog.js';
import { providerFor } from '../src/providers/registry.js';
import { loadSettleScript, settle, settleCommands } from '../src/limits/limiter.service.js';
import { usageOf, type CompletionJob } from '../src/chat/completion-job.js';
import { answerEvents, runCompletion, settleAfter, startNow, toRelayError } from '../src/chat/completion-runner.js';
import type { Provider } from '../src/providers/types.js';
import { cancelPattern, relayChannel } from '../src/chat/relay-protocol.js';
import { claimJob, parseProgress, RelayBatch, RelayPublisher } from '../src/chat/relay-publisher.js';
import { appendUsage } from '../src/usage/usage-stream.js';
import { AppError } from '../src/errors.js';

const FETCH_LOOPS = 4;

/**
 * The completion worker: takes jobs from the queue (config.queue.workerConcurrency at a time),
 * runs them against the provider and relays the output to the web process holding the client.
 * Cancellation arrives on one pattern subscription per process.
 */
export async function startCompletionWorker(app: AppContext): Promise<BackgroundService> {
  const { config } = app;
  const prefix = config.redis.prefix;
  const workerId = `${process.pid}-${randomBytes(3).toString('hex')}`;
  const running = new Map<string, AbortController>();

  const cancels = app.redisConnection('subscriber', 'cancel-subscriber');
  const cancelPrefix = cancelPattern(prefix).slice(0, -1);
  cancels.on('pmessage', (_pattern: string, channel: string) => {
    running.get(channel.slice(cancelPrefix.length))?.abort('client_cancelled');
  });
  await cancels.psubscribe(cancelPattern(prefix));
  // Fail at start-up, not on the first request, when the catalog file is wrong.
  catalogOf(app);

  // The settle script runs by hash inside each request's closing MULTI: load it now and after
  // every reconnect (a restarted Redis has forgotten it; a miss in between falls back, see settleAfter).
  const loadScript = () => loadSettleScript(app.redis).catch((err) => app.log.warn({ err }, 'could not load the settle script yet; settles fall back until it loads'));
  await loadScript();
  app.redis.on('ready', () => void loadScript());
  const settleInto = (job: CompletionJob) => (tx: ChainableCommander, actualTokens: number) => {
    for (const [cmd, ...args] of settleCommands(app, { accountId: job.accountId, requestId: job.id, actualTokens })) tx.call(cmd, ...args);
  };
  const batch = new RelayBatch(app.redis);
  const settleAlone = (job: CompletionJob) => (actualTokens: number) => settle(app, { accountId: job.accountId, requestId: job.id, actualTokens });

  const crashBeforeRecord = config.faults.crashBeforeRecord
    ? () => {
        app.log.warn('failpoint crash-before-record: exiting without recording usage');
        process.kill(process.pid, 'SIGKILL');
      }
    : undefined;

  /** `mayBeRerun`: BullMQ has started this job before (a stalled run); the claim will say what that run did. */
  const process_ = async (job: CompletionJob, mayBeRerun: boolean): Promise<void> => {
    const progressKey = redisKey(config, 'req', job.id);
    const channel = relayChannel(prefix, job.relayTo, job.id);
    const controller = new AbortController();
    running.set(job.id, controller);
    try {
      let provider: Provider | undefined;
      let refused: unknown;
      try {
        provider = providerFor(app, { ...job.model, provider: job.model.provider as never, tiers: [job.tier] });
        provider.check(job.params);
      } catch (err) {
        refused = err;
      }
      // The upstream request goes out while the job is claimed: the claim's round trip is not
      // added to the time to first token. Nothing is published before the claim says to go on.
      // Not for a job BullMQ has started before: its first run may have answered already, and
      // an upstream request sent only to be aborted may still be billed by the provider.
      const firstAttempt = refused === undefined && !mayBeRerun ? startNow(answerEvents(provider!, job, controller.signal)) : undefined;
      let claim: Awaited<ReturnType<typeof claimJob>>;
      try {
        claim = await claimJob(app.redis, progressKey, channel, workerId);
      } catch (err) {
        controller.abort('claim_failed');
        throw err;
      }
      const { firstRun, progress } = claim;
      if (!firstRun && progress && (progress.recorded || progress.sent || progress.completionTokens > 0 || progress.seq > 0)) {
        // BullMQ re-runs a job whose worker stalled (died or froze). What the first run did decides:
        // done, or its client already saw part of an answer (end that stream), or nothing yet (run it).
        controller.abort('rerun');
        if (!progress.recorded) await endInterruptedRun(app, batch, job, progress, channel, progressKey, settleInto(job), settleAlone(job));
        return;
      }
      const publisher = new RelayPublisher(batch, channel, progressKey, () => controller.abort('client_gone'), 1);
      if (refused !== undefined) {
        const errors = await publisher.finish('error', JSON.stringify(toRelayError(refused)), (tx) => {
          appendUsage(tx, config, usageOf(job, 'failed', 0, 0));
          settleInto(job)(tx, 0);
        });
        await settleAfter(errors, () => settleAlone(job)(0));
        return;
      }
      await runCompletion(job, {
        app,
        provider: provider!,
        publisher,
        signal: controller.signal,
        settle: settleInto(job),
        settleAlone: settleAlone(job),
        beforeRecord: crashBeforeRecord,
        firstAttempt,
      });
    } finally {
      running.delete(job.id);
    }
  };

  // Several BullMQ workers share the process's concurrency: one worker fetches jobs one at a time,
  // and under load its single fetch loop waits behind everything else on the event loop. Four
  // loops picked jobs up in about half the time in the benchmark.
  const fetchers = Math.min(FETCH_LOOPS, config.queue.workerConcurrency);
  const workers = Array.from({ length: fetchers }, (_, i) =>
    createWorker<CompletionJob>(config, COMPLETIONS_QUEUE, app.redisConnection('queue-worker', `completion-worker-${i}`), (job) => process_(job.data, job.attemptsStarted > 1 || job.stalledCounter > 0), {
      concurrency: Math.ceil(config.queue.workerConcurrency / fetchers),
      lockDuration: Math.max(config.queue.stalledIntervalMs, 1000),
    }),
  );
  for (const worker of workers) {
    worker.on('error', (err) => app.log.error({ err }, 'completion worker error'));
    worker.on('failed', (job, err) => app.log.error({ jobId: job?.id, err }, 'completion job failed'));
  }
  await Promise.all(workers.map((w) => w.waitUntilReady()));

  return {
    name: 'completions',
    async stop() {
      // Finishes the jobs in hand (streams in flight run to their end), takes no new ones.
      await Promise.all(workers.map((w) => w.close()));
    },
  };
}

/**
 * A re-run of a job whose first run already sent text: streaming it again would duplicate or
 * garble the client's answer. End the stream with an error event instead, and record what the
 * first run produced (it is in the progress record), once.
 */
async function endInterruptedRun(
  app: AppContext,
  batch: RelayBatch,
  job: CompletionJob,
  progress: NonNullable<ReturnType<typeof parseProgress>>,
  channel: string,
  progressKey: string,
  settle: (tx: ChainableCommander, tokens: number) => void,
  settleAlone: (tokens: number) => Promise<void>,
): Promise<void> {
  app.log.warn({ requestId: job.id }, 'job re-run after its worker stopped mid-request; ending the stream and recording partial usage');
  const publisher = new RelayPublisher(batch, channel, progressKey, () => undefined, progress.seq + 1);
  const err = new AppError('upstream', 'The worker running this completion stopped before it finished; the partial answer cannot be resumed. Please retry.', {
    code: 'worker_interrupted',
  });
  const errors = await publisher.finish('error', JSON.stringify(toRelayError(err)), (tx) => {
    appendUsage(tx, app.config, usageOf(job, 'failed', progress.promptTokens, progress.completionTokens));
    settle(tx, progress.promptTokens + progress.completionTokens);
  });
  await settleAfter(errors, () => settleAlone(progress.promptTokens + progress.completionTokens));
}
