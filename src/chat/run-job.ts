import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { RedisClient } from '../infra/redis.js';
import type { Logger } from '../logger.js';
import type { OutageLog } from '../infra/outage.js';
import type { ProviderRegistry } from '../providers/registry.js';
import { AppError } from '../errors.js';
import type { Provider } from '../providers/types.js';
import type { CompletionMetrics } from '../metrics.js';
import { usageOf, type CompletionJob } from './completion-job.js';
import {
  answerEvents,
  countChoices,
  finishRecording,
  runCompletion,
  startNow,
  toRelayError,
  type LoggedUsage,
} from './completion-runner.js';
import { deliveredText, lastEventIdOf, readRelayLog, type LogEntry } from './relay-log.js';
import type { GraceJob, ResumeGrace } from './resume-grace.js';
import { claimRequest, relayTarget, RelayPublisher, type RelayBatch, type RelayTarget } from './relay-publisher.js';
import { runningTtlSeconds } from './relay-protocol.js';
import type { UsageEvent } from '../usage/usage-event.js';
import { isDependencyDown } from '../infra/outage.js';

/** A job this worker is running, as its cancellation, its client's liveness and its grace period see it. */
export interface RunningJob extends GraceJob {
  controller: AbortController;
  /** The web process holding the client. */
  relayTo: string;
}

/** The process's pieces a job uses. */
export interface JobApp {
  redis: RedisClient;
  clock: Clock;
  log: Logger;
  providers: ProviderRegistry;
  outages: { redis: OutageLog };
  config: Pick<Config, 'redis' | 'providers' | 'queue'>;
}

/** What a worker process gives every job it runs. */
export interface JobRuntime {
  app: JobApp;
  workerId: string;
  batch: RelayBatch;
  running: Map<string, RunningJob>;
  /** Appends a request's usage to its stream and settles its quota (both safe to repeat). */
  record: (job: CompletionJob, usage: UsageEvent) => Promise<unknown>;
  recordDirectly: (usage: UsageEvent) => Promise<void>;
  /** Whether a worker's liveness key is there, read once the connection is known to be settled. */
  workerAlive: (workerId: string) => Promise<boolean>;
  metrics: CompletionMetrics;
  /** Resumable requests whose client left run on for a grace period. */
  grace: ResumeGrace;
  /** Failpoint for crash tests: called after the upstream answered, before recording. */
  beforeRecord?: () => void;
}

export type JobOutcome = 'completed' | 'cancelled' | 'failed' | 'interrupted' | 'declined' | 'expired';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs one completion job, deciding first what kind of run this is. A first run claims the request
 * and answers it. A job BullMQ hands out again (its worker stalled, or Redis lost its lock) is
 * declined while the worker that holds it is alive; once that worker is dead it is taken over,
 * and what its client was already sent decides the rest, read from the relay log:
 * - the end was published: nothing is left to do;
 * - the whole answer was relayed and its usage logged: the stream is closed normally, billed exactly;
 * - part of an answer was relayed: the stream ends with an error and the delivered text is billed;
 * - nothing the client can see: the request is answered afresh.
 */
export async function runJob(rt: JobRuntime, job: CompletionJob, mayBeRerun: boolean): Promise<JobOutcome> {
  const { app } = rt;
  // The same process took a job it is already running (its lock was lost in a Redis restart).
  if (rt.running.has(job.id)) return 'declined';
  const target = relayTarget(app.config.redis.prefix, job.relayTo, job.id);
  const ttl = runningTtlSeconds(app.config);
  const running: RunningJob = {
    controller: new AbortController(),
    relayTo: job.relayTo,
    resumable: job.resumable === true,
  };
  rt.running.set(job.id, running);
  rt.metrics.active.set(rt.running.size);
  try {
    let provider: Provider | undefined;
    let refused: unknown;
    try {
      provider = app.providers.for({ ...job.model, provider: job.model.provider as never });
      provider.check(job.params);
    } catch (err) {
      refused = err;
    }
    // The upstream request goes out while the job is claimed: the claim's round trip is not added
    // to the time to first token. Not for a job BullMQ has started before: its first run may have
    // answered already, and a request sent only to be aborted may still be billed by the provider.
    const firstAttemptStartedAt = performance.now();
    let firstAttempt =
      refused === undefined && !mayBeRerun
        ? startNow(answerEvents(provider!, job, running.controller.signal))
        : undefined;

    // A job fetched just before Redis went away is claimed once it is back (bounded, like the record).
    const deadline = performance.now() + app.config.queue.redisOutageMaxMs;
    const claimed = {
      accountId: job.accountId,
      stream: job.stream,
      resumableFor: running.resumable ? job.relayTo : undefined,
    };
    const claimOnce = async (force = false) => {
      for (;;) {
        try {
          return await claimRequest(app.redis, target, rt.workerId, ttl, claimed, force);
        } catch (err) {
          if (!isDependencyDown(err) || performance.now() > deadline) throw err;
          app.outages.redis.failure('claim', err);
          await sleep(250);
        }
      }
    };
    let claim;
    try {
      claim = await claimOnce();
      if (!claim.taken && !claim.recorded) {
        // Held by another worker: leave it alone while that worker lives. A key missing right after
        // a Redis restart may only mean its owner has not written it again yet: look twice.
        if (await rt.workerAlive(claim.previousOwner)) return decline(running);
        await sleep(app.config.queue.livenessTtlMs);
        if (await rt.workerAlive(claim.previousOwner)) return decline(running);
        claim = await claimOnce(true);
      }
    } catch (err) {
      running.controller.abort('claim_failed');
      throw err;
    }
    if (claim.recorded) return decline(running);
    if (claim.leftBeforeClaim) rt.grace.detached(job.id, running);
    // A job handed out again with no trace of an earlier run, admitted longer ago than any client
    // still waits and any state is kept: its request ended long ago and its state has expired
    // (every worker was down for minutes between its end and the queue's record of it). Running it
    // again would cost an upstream call and settle its quota twice; its client, if one were still
    // there, is told to retry.
    if (
      mayBeRerun &&
      claim.previousOwner === '' &&
      app.clock.now().getTime() - job.created * 1000 > app.config.queue.rerunHorizonMs
    ) {
      running.controller.abort('expired');
      app.log.warn({ requestId: job.id }, 'job handed out again long after its request; not running it');
      const expired = new AppError(
        'unavailable',
        'The request expired before a worker could answer it; please retry.',
        { code: 'request_expired' },
      );
      const publisher = new RelayPublisher(rt.batch, target, { seq: 1, eventId: 0 });
      await finishRecording(
        { ...runnerDeps(rt, job), publisher },
        job,
        'error',
        JSON.stringify(toRelayError(expired)),
        usageOf(job, 'failed', 0, 0),
      );
      return 'expired';
    }

    const start = { seq: 1, eventId: 0 };
    if (claim.previousOwner !== '') {
      running.controller.abort('rerun');
      firstAttempt = undefined;
      const log = await readRelayLog(app.redis, target.logKey);
      const taken = await takeOver(rt, job, target, log);
      if (taken !== undefined) return taken;
      // Nothing the client could see: answered afresh, numbering on from what the log holds.
      running.controller = new AbortController();
      start.seq = Math.max(0, ...log.map((e) => e.seq)) + 1;
      start.eventId = lastEventIdOf(log);
    }

    rt.metrics.started.inc();
    const publisher = new RelayPublisher(rt.batch, target, start, () => running.controller.abort('relay_backlog'));
    running.publisher = publisher;
    if (running.detached) publisher.stopPublishing();
    if (refused !== undefined) {
      await finishRecording(
        { ...runnerDeps(rt, job), publisher },
        job,
        'error',
        JSON.stringify(toRelayError(refused)),
        usageOf(job, 'failed', 0, 0),
      );
      return 'failed';
    }
    const outcome = await runCompletion(job, {
      ...runnerDeps(rt, job),
      provider: provider!,
      publisher,
      signal: running.controller.signal,
      firstAttempt,
      firstAttemptStartedAt,
      beforeRecord: rt.beforeRecord,
      onUpstreamTiming: ({ ttftSeconds, tokensPerSecond }) => {
        const labels = { provider: job.model.provider, model: job.model.id };
        rt.metrics.upstreamTtft.observe(labels, ttftSeconds);
        if (tokensPerSecond !== undefined) rt.metrics.upstreamTokensPerSecond.observe(labels, tokensPerSecond);
      },
    });
    if (outcome.status === 'cancelled')
      rt.metrics.cancellations.inc({ cause: String(running.controller.signal.reason ?? 'client_cancelled') });
    return outcome.status;
  } finally {
    clearTimeout(running.graceTimer);
    rt.running.delete(job.id);
    rt.metrics.active.set(rt.running.size);
  }
}

function decline(running: RunningJob): JobOutcome {
  running.controller.abort('declined');
  return 'declined';
}

function runnerDeps(rt: JobRuntime, job: CompletionJob) {
  return { app: rt.app, record: (usage: UsageEvent) => rt.record(job, usage), recordDirectly: rt.recordDirectly };
}

/**
 * A re-run after the worker that held the request died: what its client was sent decides. Returns
 * undefined when the client saw nothing, so the request is to be answered afresh.
 */
async function takeOver(
  rt: JobRuntime,
  job: CompletionJob,
  target: RelayTarget,
  log: LogEntry[],
): Promise<JobOutcome | undefined> {
  const { app } = rt;
  if (log.some((e) => e.kind === 'done' || e.kind === 'final' || e.kind === 'error')) return 'declined';
  const lastSeq = Math.max(0, ...log.map((e) => e.seq));
  const publisher = new RelayPublisher(rt.batch, target, { seq: lastSeq + 1, eventId: lastEventIdOf(log) });
  const deps = { ...runnerDeps(rt, job), publisher };
  const logged = log.find((e) => e.kind === 'usage');
  if (logged) {
    // The whole answer was relayed; only the end was missing.
    const { usage, done } = JSON.parse(logged.payload) as LoggedUsage;
    app.log.warn(
      { requestId: job.id },
      'job re-run after its worker stopped between the answer and its record; closing the stream',
    );
    await finishRecording(
      deps,
      job,
      'done',
      done,
      usageOf(job, 'completed', usage.prompt_tokens, usage.completion_tokens),
    );
    return 'completed';
  }
  const text = deliveredText(log, job.params.n ?? 1);
  if (!text.some((t) => t !== '')) return undefined;
  // Part of an answer was relayed: resuming it is not possible, repeating it would garble it.
  app.log.warn(
    { requestId: job.id },
    'job re-run after its worker stopped mid-stream; ending the stream and billing what was delivered',
  );
  const completion = countChoices(text.map((t) => ({ text: t })));
  const err = new AppError(
    'upstream',
    'The worker running this completion stopped before it finished; the partial answer cannot be resumed. Please retry.',
    { code: 'worker_interrupted' },
  );
  await finishRecording(
    deps,
    job,
    'error',
    JSON.stringify(toRelayError(err)),
    usageOf(job, 'failed', job.promptTokens, completion),
  );
  return 'interrupted';
}
