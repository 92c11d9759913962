import { sleep, type Clock } from '../../clock.js';
import type { Config } from '../../config.js';
import type { RedisClient } from '../../infra/redis.js';
import type { Logger } from '../../logger.js';
import type { OutageLog } from '../../infra/outage.js';
import type { ProviderRegistry } from '../../providers/registry.js';
import { AppError } from '../../errors.js';
import type { Provider, TokenUsage } from '../../providers/types.js';
import { longestCacheTtl } from '../../providers/cache-control.js';
import type { CompletionMetrics } from '../../metrics.js';
import { usageOf, type CompletionJob } from '../relay/completion-job.js';
import {
  answerEvents,
  answerUsage,
  countChoices,
  countsOfAnswerUsage,
  NOTHING,
  finishRecording,
  runCompletion,
  startNow,
  storeAnswer,
  stoppedError,
  toRelayError,
  type RunnerDeps,
} from './completion-runner.js';
import { deliveredChoices, lastEventIdOf, readRelayLog, type LogEntry, type LoggedUsage } from '../relay/log.js';
import type { GraceJob, ResumeGrace } from '../relay/resume-grace.js';
import { claimRequest, type Claim } from '../relay/claim.js';
import { RelayPublisher } from '../relay/publisher.js';
import type { RelayBatch } from '../relay/relay-batch.js';
import { relayTarget, runningTtlSeconds, type RelayError, type RelayTarget } from '../relay/protocol.js';
import type { UsageEvent } from '../../usage/usage-event.js';
import { isDependencyDown } from '../../infra/outage.js';
import { retry } from '../../infra/retry.js';
import type { WorkerSeen } from '../relay/liveness.js';
import type { DeliveredAnswer } from '../stream/presenters/answer-presenter.js';
import { endedResponse, responseInEnd } from '../stream/presenters/response.presenter.js';

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
  /** Keeps a Responses API answer asked to be stored (see RunnerDeps.storeResponse). */
  storeResponse?: (job: CompletionJob, response: Record<string, unknown>) => Promise<void>;
  /** Marks a stored background response in_progress as its upstream call starts. */
  startResponse?: (job: CompletionJob) => Promise<void>;
  /**
   * Stores the end of a background response that ends without an answer to frame (never started,
   * or ended by a take-over, with what its stream delivered), unless it has ended already.
   */
  endResponse?: (
    job: CompletionJob,
    status: 'failed' | 'cancelled',
    error: RelayError,
    delivered?: DeliveredAnswer,
  ) => Promise<void>;
  /** Whether a worker's liveness key is there, and since when it is not, read once the connection is known to be settled. */
  workerSeen: (workerId: string) => Promise<WorkerSeen>;
  metrics: CompletionMetrics;
  /** Resumable requests whose client left run on for a grace period. */
  grace: ResumeGrace;
  /** Failpoint for crash tests: called after the upstream answered, before recording. */
  beforeRecord?: () => void;
  /** Failpoint for stall tests: called once a job is claimed, before its upstream call. */
  beforeUpstream?: (job: CompletionJob) => void;
}

export type JobOutcome = 'completed' | 'cancelled' | 'failed' | 'interrupted' | 'declined' | 'expired';

/**
 * Runs one completion job, in named steps: claim it (or decline it, held by a live worker), take it
 * over from a dead worker (what its client was already sent decides, read from the relay log),
 * call the upstream, frame and relay what it answers (runCompletion and the relay publisher), and
 * settle (finishRecording: the usage record, then the end). A job BullMQ hands out again (its
 * worker stalled, or Redis lost its lock) is declined while the worker that holds it is alive;
 * once that worker is dead it is taken over:
 * - the end was published: nothing is left to do, but for a whole answer sent ahead of its record,
 *   which is recorded (billed if its web process acknowledged it);
 * - the whole answer was relayed and its usage logged: the stream is closed normally, billed exactly;
 * - part of an answer was relayed: the stream ends with an error and the delivered text is billed;
 * - its worker was ended for a stalled event loop, or it was answered afresh once already: it ends
 *   with the error `worker_stalled`, what was delivered billed, so it cannot stall worker after worker;
 * - nothing the client can see: the request is answered afresh, unless its client has left.
 */
export async function runJob(rt: JobRuntime, job: CompletionJob, mayBeRerun: boolean): Promise<JobOutcome> {
  const { app } = rt;
  // The same process took a job it is already running (its lock was lost in a Redis restart).
  if (rt.running.has(job.id)) return 'declined';
  const target = relayTarget(app.config.redis.prefix, job.relayTo, job.id);
  const running: RunningJob = {
    controller: new AbortController(),
    relayTo: job.relayTo,
    resumable: job.resumable === true,
    background: job.wire?.background === true,
  };
  rt.running.set(job.id, running);
  rt.metrics.active.set(rt.running.size);
  try {
    const { provider, refused } = providerFor(rt, job);
    // The upstream request goes out while the job is claimed: the claim's round trip is not added
    // to the time to first token. Not for a job BullMQ has started before: its first run may have
    // answered already, and a request sent only to be aborted may still be billed by the provider.
    const firstAttemptStartedAt = performance.now();
    let firstAttempt =
      provider && !mayBeRerun ? startNow(answerEvents(provider, job, running.controller.signal)) : undefined;

    const claim = await claimJob(rt, job, target, running);
    if (claim === 'declined') return decline(running);
    if (claim.leftBeforeClaim) rt.grace.detached(job.id, running);
    if (expired(rt, job, claim, mayBeRerun)) {
      running.controller.abort('expired');
      app.log.warn({ requestId: job.id }, 'job handed out again long after its request; not running it');
      const err = new AppError('unavailable', 'The request expired before a worker could answer it; please retry.', {
        code: 'request_expired',
      });
      await endUnanswered(rt, job, target, { seq: 1, eventId: 0 }, err, 'failed');
      return 'expired';
    }
    // Told on this worker's channel since the job arrived, or found recorded by the claim.
    const cancelled = claim.cancelled || running.controller.signal.reason === 'client_cancelled';
    let start = { seq: 1, eventId: 0 };
    if (claim.previousOwner !== '') {
      running.controller.abort('rerun');
      firstAttempt = undefined;
      const log = await readRelayLog(app.redis, target.logKey);
      const taken = await takeOver(rt, job, target, log, claim);
      if (taken !== undefined) return taken;
      // Nothing the client could see: answered afresh, numbering on from what the log holds.
      running.controller = new AbortController();
      start = { seq: Math.max(0, ...log.map((e) => e.seq)) + 1, eventId: lastEventIdOf(log) };
    }
    if (cancelled) {
      // Its client left before this claim (queued, or between a dead worker and this take-over):
      // nothing is produced for it, and nothing is billed but what an earlier run delivered.
      running.controller.abort('client_cancelled');
      rt.metrics.cancellations.inc({ cause: 'client_cancelled' });
      await endUnanswered(rt, job, target, start, stoppedError(), 'cancelled');
      return 'cancelled';
    }
    rt.metrics.started.inc();
    if (running.background) await markStarted(rt, job);
    rt.beforeUpstream?.(job);
    if (!provider) {
      await endUnanswered(rt, job, target, start, refused, 'failed');
      return 'failed';
    }
    return await callUpstream(rt, job, target, running, start, provider, { firstAttempt, firstAttemptStartedAt });
  } finally {
    clearTimeout(running.graceTimer);
    rt.running.delete(job.id);
    rt.metrics.active.set(rt.running.size);
  }
}

/** A background response's stored status says a worker runs it; a failure to say so is only logged. */
async function markStarted(rt: JobRuntime, job: CompletionJob): Promise<void> {
  try {
    await rt.startResponse?.(job);
  } catch (err) {
    rt.app.log.error({ requestId: job.id, err }, 'could not mark the background response in_progress');
  }
}

/**
 * A Responses answer ending with no answer framed. A background one's stored status must not stay
 * queued or in_progress, the only place its client looks. A stored foreground stream ended by a
 * take-over after part of its answer is kept as failed with what it delivered, as its worker would
 * have kept it; one that delivered nothing was never shown to anyone and is not kept. A failure to
 * store is only logged.
 */
async function markEnded(
  rt: JobRuntime,
  job: CompletionJob,
  status: 'failed' | 'cancelled',
  err: unknown,
  delivered?: DeliveredAnswer,
) {
  try {
    if (job.wire?.background === true) await rt.endResponse?.(job, status, toRelayError(err), delivered);
    else if (job.wire?.store && delivered)
      await rt.storeResponse?.(job, endedResponse(job, status, toRelayError(err), delivered));
  } catch (e) {
    rt.app.log.error({ requestId: job.id, err: e }, 'could not store the end of the response');
  }
}

/**
 * A job the queue gave up on: its workers died more often than the queue re-runs a job (BullMQ's
 * maxStalledCount), so no worker will run it again. Its client is told (`worker_stalled`, or
 * `worker_interrupted` after part of an answer) and what it was sent is billed, instead of waiting
 * for its silence limit.
 */
export async function endAbandoned(rt: JobRuntime, job: CompletionJob): Promise<JobOutcome> {
  const { app } = rt;
  const target = relayTarget(app.config.redis.prefix, job.relayTo, job.id);
  const claimed = { accountId: job.accountId, stream: job.stream, resumableFor: undefined };
  const claim = await claimRequest(app.redis, target, rt.workerId, runningTtlSeconds(app.config), claimed, true);
  if (claim.recorded) return 'declined';
  const log = await readRelayLog(app.redis, target.logKey);
  return (await takeOver(rt, job, target, log, { stalled: claim.stalled, takeovers: Infinity })) ?? 'failed';
}

/** The job's provider, or why none can answer it (an unknown model, parameters it refuses). */
function providerFor(rt: JobRuntime, job: CompletionJob): { provider?: Provider; refused?: unknown } {
  try {
    const provider = rt.app.providers.for({ ...job.model, provider: job.model.provider as never });
    provider.check(job.params);
    return { provider };
  } catch (err) {
    return { refused: err };
  }
}

/**
 * How long a worker must have gone without writing its liveness key, by Redis's clock, before its
 * jobs are taken over: four TTLs (the key missing for three). A worker cut off from Redis for a few
 * seconds, or whose key a Redis restart lost, writes it again as soon as it reconnects and keeps its
 * jobs; a dead one never does. Counted from its last write rather than from the claim, the wait for
 * the lock (two TTLs) and the stalled-job check (QUEUE_STALLED_INTERVAL_MS) is part of it: at the
 * defaults a dead worker's jobs are taken over about 8 s after its death whatever the timers'
 * phases, and a worker cut off for up to about 7 s keeps its jobs.
 */
export const takeOverSilenceMs = (config: Pick<Config, 'queue'>): number => 4 * config.queue.livenessTtlMs;

/**
 * Where the time of the worker's last write is not known (it expired, or Redis lost it), the key
 * must stay missing this long from the claim instead: two TTLs.
 */
export const takeOverGraceMs = (config: Pick<Config, 'queue'>): number => 2 * config.queue.livenessTtlMs;

/** Whether the worker that holds a job shows it is alive before it has been silent for the take-over's wait. */
async function ownerComesBack(rt: JobRuntime, owner: string): Promise<boolean> {
  const { config } = rt.app;
  const every = Math.max(50, Math.floor(config.queue.livenessTtlMs / 8));
  const until = performance.now() + takeOverGraceMs(config);
  for (;;) {
    const seen = await rt.workerSeen(owner);
    if (seen.alive) return true;
    const gone = seen.silentMs === undefined ? performance.now() >= until : seen.silentMs >= takeOverSilenceMs(config);
    if (gone) return false;
    await sleep(every);
  }
}

/**
 * Step one: the claim. A job fetched just before Redis went away is claimed once it is back
 * (bounded, like the record). A request another worker holds is left alone while that worker
 * lives ('declined'), and taken over once it is known dead.
 */
export async function claimJob(
  rt: JobRuntime,
  job: CompletionJob,
  target: RelayTarget,
  running: RunningJob,
): Promise<Claim | 'declined'> {
  const { app } = rt;
  const deadline = performance.now() + app.config.queue.redisOutageMaxMs;
  const claimed = {
    accountId: job.accountId,
    stream: job.stream,
    resumableFor: running.resumable ? job.relayTo : undefined,
  };
  const ttl = runningTtlSeconds(app.config);
  const claimOnce = (force = false) =>
    retry(() => claimRequest(app.redis, target, rt.workerId, ttl, claimed, force), {
      retryable: isDependencyDown,
      pauseMs: 250,
      deadline,
      onRetry: (err) => app.outages.redis.failure('claim', err),
    });
  try {
    const claim = await claimOnce();
    if (claim.recorded) return 'declined';
    if (claim.taken) return claim;
    if (await ownerComesBack(rt, claim.previousOwner)) return 'declined';
    const forced = await claimOnce(true);
    return forced.recorded ? 'declined' : forced;
  } catch (err) {
    running.controller.abort('claim_failed');
    throw err;
  }
}

/**
 * A job handed out again with no trace of an earlier run, admitted longer ago than any client
 * still waits and any state is kept: its request ended long ago and its state has expired (every
 * worker was down for minutes between its end and the queue's record of it). Running it again
 * would cost an upstream call and settle its quota twice; its client, if one were still there, is
 * told to retry.
 */
function expired(rt: JobRuntime, job: CompletionJob, claim: Claim, mayBeRerun: boolean): boolean {
  return (
    mayBeRerun &&
    claim.previousOwner === '' &&
    rt.app.clock.now().getTime() - job.created * 1000 > rt.app.config.queue.rerunHorizonMs
  );
}

/** Settles a request that gets no answer: the error to its client, nothing produced billed. */
async function endUnanswered(
  rt: JobRuntime,
  job: CompletionJob,
  target: RelayTarget,
  start: { seq: number; eventId: number },
  err: unknown,
  status: 'failed' | 'cancelled',
): Promise<void> {
  await markEnded(rt, job, status, err);
  await finishRecording(
    { ...runnerDeps(rt, job), publisher: new RelayPublisher(rt.batch, target, start) },
    job,
    'error',
    JSON.stringify(toRelayError(err)),
    usageOf(job, status, NOTHING),
  );
}

/** Calls the upstream and relays its answer (runCompletion frames, relays and settles it). */
async function callUpstream(
  rt: JobRuntime,
  job: CompletionJob,
  target: RelayTarget,
  running: RunningJob,
  start: { seq: number; eventId: number },
  provider: Provider,
  first: Pick<RunnerDeps, 'firstAttempt' | 'firstAttemptStartedAt'>,
): Promise<JobOutcome> {
  const publisher = new RelayPublisher(rt.batch, target, start, () => running.controller.abort('relay_backlog'));
  running.publisher = publisher;
  if (running.detached) publisher.stopPublishing();
  const outcome = await runCompletion(job, {
    ...runnerDeps(rt, job),
    provider,
    publisher,
    signal: running.controller.signal,
    ...first,
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
}

function decline(running: RunningJob): JobOutcome {
  running.controller.abort('declined');
  return 'declined';
}

function runnerDeps(rt: JobRuntime, job: CompletionJob) {
  return {
    app: rt.app,
    record: (usage: UsageEvent) => rt.record(job, usage),
    recordDirectly: rt.recordDirectly,
    storeResponse: rt.storeResponse,
  };
}

/** The tokens a whole answer's body bills: chat's `usage` names, or the Responses API's. */
function usageInAnswer(body: string, job: CompletionJob): TokenUsage {
  const { usage } = JSON.parse(body) as { usage: Parameters<typeof countsOfAnswerUsage>[0] };
  // The body does not say which cache writes had the 1-hour TTL: a request that marked one is
  // billed them all at that price, the most they can cost (its reservation's own assumption).
  const counts = countsOfAnswerUsage(usage);
  return longestCacheTtl(job.params) === '1h'
    ? { ...counts, cache_write_1h_tokens: counts.cache_write_tokens }
    : counts;
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
  claim: Pick<Claim, 'stalled' | 'takeovers'>,
): Promise<JobOutcome | undefined> {
  const { app } = rt;
  if (log.some((e) => e.kind === 'done' || e.kind === 'error')) return 'declined';
  const lastSeq = Math.max(0, ...log.map((e) => e.seq));
  const publisher = new RelayPublisher(rt.batch, target, { seq: lastSeq + 1, eventId: lastEventIdOf(log) });
  const deps = { ...runnerDeps(rt, job), publisher };
  const answer = log.find((e) => e.kind === 'final');
  if (answer) {
    // A whole answer sent ahead of its record (answerBeforeRecord), its worker dead before the
    // record: billed if the web process acknowledged it (handed it to its client), else nothing.
    const acked = await publisher.webAcked();
    const usage = usageInAnswer(answer.payload, job);
    const taken = acked !== undefined && acked >= answer.seq;
    app.log.warn({ requestId: job.id, taken }, 'job re-run after its worker stopped between the answer and its record');
    publisher.endedWith(answer);
    await finishRecording(
      deps,
      job,
      'final',
      answer.payload,
      taken ? usageOf(job, 'completed', usage) : usageOf(job, 'cancelled', NOTHING),
    );
    return taken ? 'completed' : 'cancelled';
  }
  const logged = log.find((e) => e.kind === 'usage');
  if (logged) {
    // The whole answer was relayed; only the end was missing.
    const { usage, done, cache_write_1h_tokens: oneHour } = JSON.parse(logged.payload) as LoggedUsage;
    app.log.warn(
      { requestId: job.id },
      'job re-run after its worker stopped between the answer and its record; closing the stream',
    );
    // Its worker died before storing the Response its end carries (a background one's client
    // reads nothing else): stored now, before the end is published, as the runner does.
    if (job.wire?.format === 'responses') await storeAnswer(deps, job, responseInEnd(done));
    await finishRecording(deps, job, 'done', done, usageOf(job, 'completed', countsOfAnswerUsage(usage, oneHour)));
    return 'completed';
  }
  const delivered = deliveredChoices(log, job.params.n ?? 1);
  const anyDelivered = delivered.some((c) => c.text !== '' || c.calls.length > 0);
  // A fresh answer once at most: a job whose worker stalled, or died again after answering it
  // afresh, would likely stall the next worker too.
  if (claim.stalled || (!anyDelivered && claim.takeovers > 1)) {
    app.log.warn(
      { requestId: job.id, stalled: claim.stalled, takeovers: claim.takeovers },
      'job re-run after its worker stalled or died again; ending it as failed instead of running it again',
    );
    const err = new AppError(
      'upstream',
      claim.stalled
        ? 'The worker running this completion stalled on it and was stopped; it is not run again. Please retry, or change the request if it happens again.'
        : 'The workers running this completion stopped more than once before it could be answered; it is not run again. Please retry.',
      { code: 'worker_stalled' },
    );
    const usage = anyDelivered
      ? usageOf(job, 'failed', { prompt_tokens: job.promptTokens, completion_tokens: countChoices(delivered) })
      : usageOf(job, 'failed', NOTHING);
    await markEnded(
      rt,
      job,
      'failed',
      err,
      anyDelivered ? { choices: delivered, usage: answerUsage(usage) } : undefined,
    );
    await finishRecording(deps, job, 'error', JSON.stringify(toRelayError(err)), usage);
    return 'failed';
  }
  if (!anyDelivered) return undefined;
  // Part of an answer was relayed: resuming it is not possible, repeating it would garble it.
  app.log.warn(
    { requestId: job.id },
    'job re-run after its worker stopped mid-stream; ending the stream and billing what was delivered',
  );
  const completion = countChoices(delivered);
  const err = new AppError(
    'upstream',
    'The worker running this completion stopped before it finished; the partial answer cannot be resumed. Please retry.',
    { code: 'worker_interrupted' },
  );
  const usage = usageOf(job, 'failed', { prompt_tokens: job.promptTokens, completion_tokens: completion });
  // A background response's client reads this end back: it holds what was delivered and billed.
  await markEnded(rt, job, 'failed', err, { choices: delivered, usage: answerUsage(usage) });
  await finishRecording(deps, job, 'error', JSON.stringify(toRelayError(err)), usage);
  return 'interrupted';
}
