import { randomBytes } from 'node:crypto';
import { sleep, type Clock } from '../../clock.js';
import type { Config } from '../../config.js';
import { isDependencyDown, type OutageLog } from '../../infra/outage.js';
import type { RedisClient } from '../../infra/redis.js';
import type { Watchdog } from '../../infra/watchdog.js';
import type { Limiter } from '../../limits/limiter.service.js';
import type { Logger } from '../../logger.js';
import { eventLoopLag, type Metrics } from '../../metrics.js';
import type { ProviderRegistry } from '../../providers/registry.js';
import { recordUsageDirectly, type MeteringDeps } from '../../usage/metering.service.js';
import { appendUsage } from '../../usage/usage-stream.js';
import { settlementOf } from '../relay/completion-job.js';
import {
  ClientWatch,
  ConnectionStability,
  readWorkerSeen,
  settledAfterMs,
  WEB_PROCESS_GONE,
  WorkerPresence,
} from '../relay/liveness.js';
import { cancelChannel, detachedRequest, relayTtls } from '../relay/protocol.js';
import { RelayBatch } from '../relay/relay-batch.js';
import { ResumeGrace } from '../relay/resume-grace.js';
import { CompletionJobs, type JobRuntime, type RunningJob } from './run-job.js';
import type { StoredResponses } from './settle.js';

export type { CompletionJobs } from './run-job.js';
export type { StoredResponses } from './settle.js';

/** What a worker process lends its completion jobs: its connections, clock and log, and the features they settle with. */
export interface CompletionJobsDeps {
  redis: RedisClient;
  /** A connection of its own, for this worker's cancel channel. */
  subscriber: RedisClient;
  config: Pick<Config, 'redis' | 'providers' | 'queue' | 'faults'>;
  log: Logger;
  clock: Clock;
  metrics: Pick<Metrics, 'completion' | 'metering'>;
  providers: Pick<ProviderRegistry, 'for'>;
  outages: { redis: OutageLog };
  limiter: Pick<Limiter, 'settle'>;
  /** The ledger, for a usage Redis could not take in time. */
  ledger: Pick<MeteringDeps, 'db' | 'onUsageRecorded'>;
  /** The Responses API's stored answers (a feature above chat: the worker's entry lends them). */
  responses?: StoredResponses;
  /** Marks the requests of the jobs this process holds, should its event loop stall. */
  watchdog?: Pick<Watchdog, 'markOnStall' | 'unmarkOnStall'>;
}

/**
 * Starts what a worker's completion jobs run within: the relay batch, the resumable streams' grace
 * period, cancellation on a channel of its own, this worker's liveness key and registry entry (a
 * re-run of a job it holds leaves the job alone while it lives) and the watch on the web processes
 * its jobs answer to (a dead one's jobs are stopped). The queue's workers hand it each job.
 */
export async function startCompletionJobs(deps: CompletionJobsDeps): Promise<CompletionJobs> {
  const { config, log, redis } = deps;
  const prefix = config.redis.prefix;
  const ttlMs = config.queue.livenessTtlMs;
  const workerId = `${process.pid}-${randomBytes(3).toString('hex')}`;
  const running = new Map<string, RunningJob>();
  const stability = new ConnectionStability(redis);
  // A missing liveness key or subscriber means something only on a connection that has been up long enough (relay/liveness.ts).
  const settled = () => stability.stableFor(settledAfterMs(ttlMs));
  const grace = new ResumeGrace({
    redis,
    prefix,
    graceMs: config.queue.resumeGraceSeconds * 1000,
    settled,
    onExpired: (requestId) =>
      log.info({ requestId }, 'no reader resumed this stream within the grace period; stopping it'),
  });
  const stopWatching = await watch(deps, { workerId, running, grace, settled });
  return new CompletionJobs(
    {
      redis,
      clock: deps.clock,
      log,
      outages: deps.outages,
      config,
      providers: deps.providers,
      metrics: deps.metrics.completion,
      responses: deps.responses,
      workerId,
      running,
      grace,
      batch: new RelayBatch({
        redis,
        ttls: relayTtls(config),
        onFailure: (err) => {
          deps.metrics.completion.relayPublishFailures.inc();
          if (isDependencyDown(err)) deps.outages.redis.failure('relay', err);
          else log.error({ err }, 'Redis refused a relay command');
        },
        coalesceMs: config.queue.relayCoalesceMs,
      }),
      workerSeen: async (id) => {
        while (!settled()) await sleep(100);
        return readWorkerSeen(redis, prefix, id);
      },
      // The usage stream and the account's quota keys live in different slots: two commands, sent together.
      record: (job, usage) =>
        Promise.all([appendUsage(redis, config, job.shard, usage), deps.limiter.settle(settlementOf(job, usage))]),
      recordDirectly: (usage) => recordUsageDirectly({ ...deps.ledger, metrics: deps.metrics }, usage),
      ...failpoints(config.faults, log),
    },
    deps.watchdog,
    stopWatching,
  );
}

/**
 * Starts this worker's side of its clients' liveness: its own liveness key and registry entry,
 * the watch on the web processes its jobs answer to, and its cancel channel. Returns what stops
 * them (the channel closes with its connection).
 */
async function watch(
  deps: Pick<CompletionJobsDeps, 'redis' | 'subscriber' | 'config' | 'log'>,
  {
    workerId,
    running,
    grace,
    settled,
  }: Pick<JobRuntime, 'workerId' | 'running' | 'grace'> & { settled: () => boolean },
): Promise<() => Promise<void>> {
  const { redis, config, log } = deps;
  const prefix = config.redis.prefix;
  const ttlMs = config.queue.livenessTtlMs;
  const lag = eventLoopLag();
  const presence = new WorkerPresence({
    redis,
    prefix,
    workerId,
    ttlMs,
    capacity: () => ({ concurrency: config.queue.workerConcurrency, active: running.size, lagMs: lag.takeMaxMs() }),
  });
  const clients = new ClientWatch({ redis, settled, running, ttlMs, prefix, ...onClientGone(log, running, grace) });
  const channel = cancelChannel(prefix, workerId);
  listenForCancels(deps.subscriber, channel, running, grace);
  await deps.subscriber.ssubscribe(channel);
  await presence.start();
  clients.start();
  return async () => {
    clients.stop();
    await presence.stop();
    lag.stop();
  };
}

/**
 * A web process whose client leaves names the request on this worker's channel (it reads which
 * worker holds the request from the request's state): a resumable one is detached for its grace
 * period, any other stopped.
 */
function listenForCancels(
  subscriber: RedisClient,
  channel: string,
  running: ReadonlyMap<string, RunningJob>,
  grace: ResumeGrace,
): void {
  subscriber.on('smessage', (from: string, message: string) => {
    if (from !== channel) return;
    const detached = detachedRequest(message);
    const job = running.get(detached ?? message);
    if (!job) return;
    if (detached !== undefined) grace.detached(detached, job);
    else if (!job.controller.signal.aborted) job.controller.abort('client_cancelled');
  });
}

/** What the watch does with a job whose client's web process is gone: a resumable one is detached, any other stopped. */
function onClientGone(
  log: Logger,
  running: ReadonlyMap<string, RunningJob>,
  grace: ResumeGrace,
): Pick<ConstructorParameters<typeof ClientWatch>[0], 'onGone' | 'onDetached'> {
  return {
    onGone: (requestId) => log.info({ requestId }, 'the web process holding this request is gone; stopping it'),
    onDetached: (requestId) => {
      const job = running.get(requestId);
      if (!job) return;
      // A resumable request none of whose events reached the web process: its client never held
      // the completion id it would resume with, so it left before the request began for it. A
      // background response's client had its id in the first answer: it runs on.
      if ((job.publisher?.received ?? 0) === 0 && !job.background) {
        log.info({ requestId }, 'the web process holding this request died before its client had its id; stopping it');
        job.controller.abort(WEB_PROCESS_GONE);
        return;
      }
      grace.detached(requestId, job);
    },
  };
}

/**
 * Failpoints for the fault tests. FAULT_INJECT=crash-before-record: the process dies after the
 * upstream answered, before the record. FAULT_BLOCK_WORKER_USER: a job whose `user` is the marker
 * blocks this thread for good (without spinning a core).
 */
function failpoints(faults: Config['faults'], log: Logger): Pick<JobRuntime, 'beforeRecord' | 'beforeUpstream'> {
  const marker = faults.blockWorkerForUser;
  return {
    beforeRecord: faults.crashBeforeRecord
      ? () => {
          log.warn('failpoint crash-before-record: exiting without recording usage');
          process.kill(process.pid, 'SIGKILL');
        }
      : undefined,
    beforeUpstream:
      marker === undefined
        ? undefined
        : (job) => {
            if (job.params.user !== marker) return;
            log.warn({ requestId: job.id }, 'failpoint FAULT_BLOCK_WORKER_USER: blocking the event loop');
            Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
          },
  };
}
