import type { Clock } from '../../clock.js';
import type { Watchdog } from '../../infra/watchdog.js';
import type { Config } from '../../config.js';
import type { Logger } from '../../logger.js';
import type { CompletionMetrics } from '../../metrics.js';
import type { ProviderRegistry } from '../../providers/registry.js';
import type { UsageEvent } from '../../usage/usage-event.js';
import type { CompletionJob } from '../relay/completion-job.js';
import { traceJob } from '../relay/completion-tracing.js';
import { claimRequest } from '../relay/claim.js';
import { readRelayLog } from '../relay/log.js';
import { relayTarget, requestStateKey, runningTtlSeconds, STALLED_FIELD } from '../relay/protocol.js';
import { RelayPublisher } from '../relay/publisher.js';
import type { RelayBatch } from '../relay/relay-batch.js';
import type { GraceJob, ResumeGrace } from '../relay/resume-grace.js';
import { answer } from './answer.js';
import { claimJob, type ClaimDeps } from './claim-job.js';
import { settle, type JobOutcome, type StoredResponses } from './settle.js';
import { numberingAfter, previousRun, takeOver } from './take-over.js';
import { openUpstream } from './upstream-loop.js';

export type { JobOutcome } from './settle.js';

/** A job this worker is running, as its cancellation, its client's liveness and its grace period see it. */
export interface RunningJob extends GraceJob {
  controller: AbortController;
  /** The web process holding the client. */
  relayTo: string;
}

/** What a worker process gives every job it runs. */
export interface JobRuntime extends ClaimDeps {
  clock: Clock;
  log: Logger;
  config: Pick<Config, 'redis' | 'providers' | 'queue'>;
  providers: Pick<ProviderRegistry, 'for'>;
  batch: RelayBatch;
  running: Map<string, RunningJob>;
  /** Appends a request's usage to its stream and settles its quota (both safe to repeat). */
  record: (job: CompletionJob, usage: UsageEvent) => Promise<unknown>;
  recordDirectly: (usage: UsageEvent) => Promise<void>;
  responses?: StoredResponses;
  metrics: CompletionMetrics;
  /** Resumable requests whose client left run on for a grace period. */
  grace: ResumeGrace;
  /** Failpoint for crash tests: called after the upstream answered, before recording. */
  beforeRecord?: () => void;
  /** Failpoint for stall tests: called once a job is claimed, before its upstream call. */
  beforeUpstream?: (job: CompletionJob) => void;
}

/**
 * Runs one completion job, its steps each once and in order: claim it (claim-job.ts: or decline
 * it, held by a live worker), see what came before this run (take-over.ts: an expired job, a dead
 * worker's stream taken over, a client gone before the claim), answer it (answer.ts: the upstream
 * loop and the end framed in the job's wire format), and settle it (settle.ts: the one end of every
 * job, billed, recorded and published). The upstream request goes out while the job is claimed.
 */
export async function runJob(rt: JobRuntime, job: CompletionJob, mayBeRerun: boolean): Promise<JobOutcome> {
  // The same process took a job it is already running (its lock was lost in a Redis restart).
  if (rt.running.has(job.id)) return 'declined';
  const running: RunningJob = {
    controller: new AbortController(),
    relayTo: job.relayTo,
    resumable: job.resumable === true,
    background: job.wire?.background === true,
  };
  rt.running.set(job.id, running);
  rt.metrics.active.set(rt.running.size);
  try {
    const target = relayTarget(rt.config.redis.prefix, job.relayTo, job.id);
    const upstream = openUpstream(rt, job, running.controller.signal, mayBeRerun);
    const claim = await claimJob(rt, job, target, running);
    if (claim === 'declined') {
      running.controller.abort('declined');
      return 'declined';
    }
    if (claim.leftBeforeClaim) rt.grace.detached(job.id, running);
    const { publisher, end } = await previousRun(rt, job, { target, claim, running, mayBeRerun });
    if (end === 'declined') return 'declined';
    // A re-run's early request was dropped: answered afresh, it calls the upstream anew.
    const fresh = claim.previousOwner === '' ? upstream : { ...upstream, firstAttempt: undefined };
    const ended = end ?? (await answer(rt, job, running, publisher, fresh));
    return await settle({ ...rt, publisher }, job, ended);
  } finally {
    clearTimeout(running.graceTimer);
    rt.running.delete(job.id);
    rt.metrics.active.set(rt.running.size);
  }
}

/**
 * A job the queue gave up on: its workers died more often than the queue re-runs a job (BullMQ's
 * maxStalledCount), so no worker will run it again. Its client is told (`worker_stalled`, or
 * `worker_interrupted` after part of an answer) and what it was sent is billed, instead of waiting
 * for its silence limit.
 */
export async function endAbandoned(rt: JobRuntime, job: CompletionJob): Promise<JobOutcome> {
  const target = relayTarget(rt.config.redis.prefix, job.relayTo, job.id);
  const claimed = { accountId: job.accountId, stream: job.stream, resumableFor: undefined };
  const claim = await claimRequest(rt.redis, target, rt.workerId, runningTtlSeconds(rt.config), claimed, true);
  if (claim.recorded) return 'declined';
  const log = await readRelayLog(rt.redis, target.logKey);
  const publisher = new RelayPublisher(rt.batch, target, numberingAfter(log));
  const end = await takeOver({ log: rt.log, publisher }, job, log, { stalled: claim.stalled, takeovers: Infinity });
  if (end === 'declined') return 'declined';
  return end ? settle({ ...rt, publisher }, job, end) : 'failed';
}

/**
 * A worker's completion jobs: the queue's workers hand each job they fetch to `run` (as BullMQ's
 * Worker hands one to its processor), which runs it through runJob in its trace span; a job the
 * queue gave up on goes to `abandoned`.
 */
export class CompletionJobs {
  /** Runs so far: each has its own watchdog mark, as one request may come to this process twice (a lock lost in a Redis restart). */
  private runs = 0;

  constructor(
    private readonly rt: JobRuntime,
    private readonly watchdog: Pick<Watchdog, 'markOnStall' | 'unmarkOnStall'> | undefined,
    /** Stops the watch on the web processes and leaves the workers registry, once no job runs. */
    readonly stop: () => Promise<void>,
  ) {}

  /** Runs a job the queue handed out: `rerun` when it was started before, `waitedMs` its time in the queue. */
  async run(job: CompletionJob, { rerun, waitedMs }: { rerun: boolean; waitedMs?: number }): Promise<void> {
    const { rt, watchdog } = this;
    // A re-run's wait would count its first run's time as queueing.
    if (!rerun && waitedMs !== undefined) rt.metrics.queueWait.observe(waitedMs / 1000);
    // Should this process stall, its watchdog marks the jobs it holds: their take-over fails them
    // instead of handing them to the next worker.
    const mark = `${job.id}/${++this.runs}`;
    watchdog?.markOnStall(mark, requestStateKey(rt.config.redis.prefix, job.relayTo, job.id), STALLED_FIELD);
    try {
      const outcome = await traceJob(job, rerun, () => runJob(rt, job, rerun));
      rt.metrics.finished.inc({ outcome });
    } finally {
      watchdog?.unmarkOnStall(mark);
    }
  }

  /** Ends a job the queue gave up on (endAbandoned); a failure to is logged. */
  async abandoned(job: CompletionJob): Promise<void> {
    try {
      this.rt.metrics.finished.inc({ outcome: await endAbandoned(this.rt, job) });
    } catch (err) {
      this.rt.log.error({ jobId: job.id, err }, 'could not end a job the queue gave up on');
    }
  }
}
