import type { Config } from '../../config.js';
import type { Logger } from '../../logger.js';
import type { CompletionMetrics } from '../../metrics.js';
import type { CompletionJob } from '../relay/completion-job.js';
import { WEB_PROCESS_GONE } from '../relay/liveness.js';
import type { RelayPublisher } from '../relay/publisher.js';
import type { GraceJob } from '../relay/resume-grace.js';
import { answerEnd, type AnswerOutcome } from '../stream/presenters/answer-end.presenter.js';
import { presenterFor } from '../stream/presenters/presenter-for.js';
import { startingResponse } from '../stream/presenters/response.presenter.js';
import { billable } from './billable.js';
import { deliveredOnReceipt } from './delivery.js';
import { stoppedError, toRelayError, unanswered } from './job-errors.js';
import type { JobEnd, StoredResponses } from './settle.js';
import { upstreamLoop, type Upstream } from './upstream-loop.js';

/** What answering a job uses. */
export interface AnswerDeps {
  log: Logger;
  config: Pick<Config, 'providers' | 'queue'>;
  metrics: CompletionMetrics;
  responses?: StoredResponses;
  /** Failpoint for stall tests: called once a job is claimed, before its upstream call. */
  beforeUpstream?: (job: CompletionJob) => void;
  /** Failpoint for crash tests: called after the upstream answered, before recording. */
  beforeRecord?: () => void;
}

/**
 * Step three: the answer. A request its provider refuses ends unanswered. Otherwise the upstream
 * loop relays a stream's pieces as they come, and the end is framed in the job's wire format, with
 * the usage billed for what was produced and, when its web process died, for what reached that
 * process (delivery.ts). The end itself is settle's to record and publish.
 */
export async function answer(
  deps: AnswerDeps,
  job: CompletionJob,
  running: GraceJob,
  publisher: RelayPublisher,
  upstream: Upstream,
): Promise<JobEnd> {
  deps.metrics.started.inc();
  if (running.background) await markStarted(deps, job);
  deps.beforeUpstream?.(job);
  if (!upstream.provider) return unanswered('failed', upstream.refused);
  const { provider, model } = upstream;
  running.publisher = publisher;
  if (running.detached) publisher.stopPublishing();
  const { signal } = running.controller;
  const present = presenterFor(job, provider, publisher);
  const labels = { provider: model.provider, model: model.id };
  const { status, failure, choices, produced } = await upstreamLoop(job, {
    provider,
    present,
    publisher,
    signal,
    log: deps.log,
    config: deps.config,
    firstAttempt: upstream.firstAttempt,
    firstAttemptStartedAt: upstream.firstAttemptStartedAt,
    onUpstreamTiming: ({ ttftSeconds, tokensPerSecond }) => {
      deps.metrics.upstreamTtft.observe(labels, ttftSeconds);
      if (tokensPerSecond !== undefined) deps.metrics.upstreamTokensPerSecond.observe(labels, tokensPerSecond);
    },
  });
  // Its web process died: only what a subscriber took reached anyone.
  const delivered =
    signal.aborted && signal.reason === WEB_PROCESS_GONE ? await deliveredOnReceipt(publisher, job) : 'all';
  const usage = billable(job, status, produced, delivered);
  const outcome: AnswerOutcome =
    status === 'completed'
      ? { status, choices, usage }
      : { status, choices, usage, error: toRelayError(status === 'failed' ? failure : stoppedError()) };
  if (outcome.status === 'failed') {
    const err = failure instanceof Error ? failure.message : String(failure);
    deps.log.warn({ requestId: job.id, status: outcome.error.status, err }, 'completion failed');
  }
  const end = answerEnd(present, job, outcome);
  if (end.logged !== undefined) {
    publisher.note('usage', end.logged);
    await publisher.flushNow();
  }
  deps.beforeRecord?.();
  return {
    status,
    message: { kind: end.kind, payload: end.payload },
    produced,
    delivered,
    response: { framed: present.finalObject() },
    run: { signal, answerAhead: end.kind === 'final' && job.acks === true },
  };
}

/** A background response's stored status says a worker runs it; a failure to say so is only logged. */
async function markStarted(deps: AnswerDeps, job: CompletionJob): Promise<void> {
  try {
    await deps.responses?.start(job, startingResponse(job, 'in_progress'));
  } catch (err) {
    deps.log.error({ requestId: job.id, err }, 'could not mark the background response in_progress');
  }
}
