import type { UsageStatus } from '../../../db/schema/index.js';
import type { Config } from '../../config.js';
import type { Logger } from '../../logger.js';
import type { CompletionMetrics } from '../../metrics.js';
import type { TokenUsage } from '../../providers/types.js';
import type { UsageEvent } from '../../usage/usage-event.js';
import type { CompletionJob } from '../relay/completion-job.js';
import { traceRecord } from '../relay/completion-tracing.js';
import type { RelayError } from '../relay/protocol.js';
import type { RelayPublisher } from '../relay/publisher.js';
import { answerUsage } from '../stream/presenters/answer-end.presenter.js';
import { endedResponse } from '../stream/presenters/response.presenter.js';
import { billable, type Delivered } from './billable.js';
import { sendAhead } from './delivery.js';

export type JobOutcome = 'completed' | 'cancelled' | 'failed' | 'interrupted' | 'declined' | 'expired';

/**
 * The Responses API's stored answers, as a worker writes the Responses it frames (src/responses
 * keeps them; a lower layer cannot import it, so the worker's entry lends them).
 */
export interface StoredResponses {
  /**
   * Keeps an answer its client asked to store (store: true), before its end is published, so a
   * follow-up's previous_response_id finds it as soon as the client has the end.
   */
  store(job: CompletionJob, response: Record<string, unknown>): Promise<void>;
  /** A background response a worker has started: in_progress, unless it was cancelled or has ended meanwhile. */
  start(job: CompletionJob, response: Record<string, unknown>): Promise<void>;
  /** A background response that ended with no answer framed (never started, or ended by a take-over), unless it has ended already. */
  end(job: CompletionJob, response: Record<string, unknown>): Promise<void>;
}

/** What a Responses API answer keeps at its end. */
export type ResponseEnd =
  /** The Response its presenter framed, kept if its client asked to store it. */
  | { framed: Record<string, unknown> | undefined }
  /** No answer was framed: the end of a background response, or of a stored stream with what it delivered. */
  | { ended: 'failed' | 'cancelled'; error: RelayError };

/** How a job ends, as the step that ended it tells it; settle stores, bills, records and publishes it. */
export interface JobEnd {
  /** The ledger's status of what was produced. */
  status: UsageStatus;
  /** The job's outcome where the status does not say it: a stream cut by a take-over, an expired job. */
  outcome?: 'interrupted' | 'expired';
  /** The last message its client gets. */
  message: { kind: 'done' | 'final' | 'error'; payload: string };
  produced: TokenUsage;
  delivered: Delivered;
  response?: ResponseEnd;
  /**
   * A job this worker ran (or stopped at its claim): its signal, and whether its whole answer goes
   * to its web process ahead of its record. A cancellation is counted under `cause`, or else the
   * signal's reason.
   */
  run?: { signal: AbortSignal; answerAhead: boolean; cause?: string };
}

export interface SettleDeps {
  publisher: RelayPublisher;
  log: Logger;
  config: Pick<Config, 'queue'>;
  /** Appends the request's usage to its stream and settles its quota reservation (both safe to repeat). */
  record: (job: CompletionJob, usage: UsageEvent) => Promise<unknown>;
  /** Writes a usage event straight into the ledger, when Redis stayed unreachable past the outage bound. */
  recordDirectly: (usage: UsageEvent) => Promise<void>;
  responses?: StoredResponses;
  metrics: Pick<CompletionMetrics, 'cancellations'>;
}

/**
 * Ends a job, whichever way it ends: keeps a Responses answer, bills what was produced and
 * delivered, then records the usage and publishes the end (finishRecording). A whole answer sent
 * ahead of its record is billed only if its web process took it.
 */
export async function settle(deps: SettleDeps, job: CompletionJob, end: JobEnd): Promise<JobOutcome> {
  let usage = billable(job, end.status, end.produced, end.delivered);
  await keepResponse(deps, job, end, usage);
  const { run } = end;
  if (run?.answerAhead) {
    const taken = await sendAhead(deps.publisher, end.message.payload, run.signal, deps.config.queue.livenessTtlMs);
    if (!taken) usage = billable(job, end.status, end.produced, 'none');
  }
  await finishRecording(deps, job, end.message, usage);
  const outcome = end.outcome ?? usage.status;
  if (outcome === 'cancelled' && run)
    deps.metrics.cancellations.inc({ cause: run.cause ?? String(run.signal.reason ?? 'client_cancelled') });
  return outcome;
}

/**
 * The usage record and quota settlement, then the last message (see RelayPublisher.finish). When
 * Redis stays out of reach longer than config.queue.redisOutageMaxMs the usage goes straight into
 * the ledger instead (idempotent by request id), so it is never lost.
 */
async function finishRecording(
  deps: SettleDeps,
  job: CompletionJob,
  message: JobEnd['message'],
  usage: UsageEvent,
): Promise<void> {
  const { publisher } = deps;
  await traceRecord(job, usage.status, async () => {
    try {
      await publisher.finish(
        message.kind,
        message.payload,
        () => deps.record(job, usage),
        performance.now() + deps.config.queue.redisOutageMaxMs,
      );
    } catch (err) {
      deps.log.warn(
        { requestId: job.id, reason: err instanceof Error ? err.message : String(err) },
        'Redis stayed unreachable; recording the usage straight into the ledger',
      );
      await deps.recordDirectly(usage);
    }
  });
}

/**
 * Keeps a Responses API answer, before its end is published. A framed answer is stored if its
 * client asked for it (store: true). One that ends with no answer framed: a background one's stored
 * status must not stay queued or in_progress, the only place its client looks; a stored stream
 * ended by a take-over after part of its answer is kept as failed with what it delivered, as its
 * worker would have kept it; one that delivered nothing was never shown to anyone and is not kept.
 * A failure to store is logged and the answer still ends: the client has its answer; only a later
 * retrieve or previous_response_id of it would find nothing.
 */
async function keepResponse(deps: SettleDeps, job: CompletionJob, end: JobEnd, usage: UsageEvent): Promise<void> {
  const { response } = end;
  const store = deps.responses;
  if (!response || !store) return;
  if ('framed' in response) {
    if (!response.framed || !job.wire?.store) return;
    try {
      await store.store(job, response.framed);
    } catch (err) {
      deps.log.error({ requestId: job.id, err }, 'could not store the response; it ends unstored');
    }
    return;
  }
  const delivered =
    typeof end.delivered === 'object' ? { choices: end.delivered.choices, usage: answerUsage(usage) } : undefined;
  try {
    if (job.wire?.background === true)
      await store.end(job, endedResponse(job, response.ended, response.error, delivered));
    else if (job.wire?.store && delivered)
      await store.store(job, endedResponse(job, response.ended, response.error, delivered));
  } catch (err) {
    deps.log.error({ requestId: job.id, err }, 'could not store the end of the response');
  }
}
