import type { Clock } from '../../clock.js';
import type { Config } from '../../config.js';
import type { RedisClient } from '../../infra/redis.js';
import type { Logger } from '../../logger.js';
import type { CompletionJob } from '../relay/completion-job.js';
import type { Claim } from '../relay/claim.js';
import { deliveredChoices, lastEventIdOf, readRelayLog, type LogEntry } from '../relay/log.js';
import type { RelayTarget } from '../relay/protocol.js';
import { RelayPublisher } from '../relay/publisher.js';
import type { RelayBatch } from '../relay/relay-batch.js';
import { loggedEnd, usageInBody } from '../stream/presenters/answer-end.presenter.js';
import { responseInEnd } from '../stream/presenters/response.presenter.js';
import { countChoices, NOTHING } from './billable.js';
import { expiredError, interruptedError, stalledError, stoppedError, toRelayError, unanswered } from './job-errors.js';
import type { JobEnd } from './settle.js';

/** What the step after the claim uses. */
export interface PreviousRunDeps {
  redis: RedisClient;
  batch: RelayBatch;
  log: Logger;
  clock: Clock;
  config: Pick<Config, 'queue'>;
}

/** The job's relay, and its end when what came before this run ends it. */
export interface Continued {
  publisher: RelayPublisher;
  end?: JobEnd | 'declined';
}

/**
 * Step two, after the claim: what came before this run. A job handed out again with no trace of
 * an earlier run and long after its request has expired; a re-run takes over from a dead worker,
 * what its relay log shows its client was sent deciding how it ends; a request whose client left
 * before this claim ends unanswered. Returns the job's one relay, numbering on from what the log
 * holds, and the job's end if it ends here (else it is answered afresh).
 */
export async function previousRun(
  deps: PreviousRunDeps,
  job: CompletionJob,
  {
    target,
    claim,
    running,
    mayBeRerun,
  }: {
    target: RelayTarget;
    claim: Claim;
    running: { controller: AbortController };
    mayBeRerun: boolean;
  },
): Promise<Continued> {
  // Told on this worker's channel since the job arrived, or found recorded by the claim.
  const cancelled = claim.cancelled || running.controller.signal.reason === 'client_cancelled';
  const rerun = claim.previousOwner !== '';
  // A re-run's upstream request, if one went out early, is dropped: the log decides whether it is answered again.
  if (rerun) running.controller.abort('rerun');
  const log = rerun ? await readRelayLog(deps.redis, target.logKey) : [];
  const start = numberingAfter(log);
  const publisher = new RelayPublisher(deps.batch, target, start, () => running.controller.abort('relay_backlog'));
  if (expired(deps, job, claim, mayBeRerun)) {
    running.controller.abort('expired');
    deps.log.warn({ requestId: job.id }, 'job handed out again long after its request; not running it');
    return { publisher, end: { ...unanswered('failed', expiredError()), outcome: 'expired' } };
  }
  if (rerun) {
    const end = await takeOver({ log: deps.log, publisher }, job, log, claim);
    if (end !== undefined) return { publisher, end };
    // Nothing the client could see: answered afresh.
    running.controller = new AbortController();
  }
  if (!cancelled) return { publisher };
  // Its client left before this claim (queued, or between a dead worker and this take-over):
  // nothing is produced for it, and nothing is billed but what an earlier run delivered.
  running.controller.abort('client_cancelled');
  const run = { signal: running.controller.signal, answerAhead: false, cause: 'client_cancelled' };
  return { publisher, end: { ...unanswered('cancelled', stoppedError()), run } };
}

/** Where a run's relay messages and SSE events are numbered from: after what the log holds. */
export function numberingAfter(log: readonly LogEntry[]): { seq: number; eventId: number } {
  return { seq: Math.max(0, ...log.map((e) => e.seq)) + 1, eventId: lastEventIdOf(log) };
}

/**
 * A job handed out again with no trace of an earlier run, admitted longer ago than any client
 * still waits and any state is kept: its request ended long ago and its state has expired (every
 * worker was down for minutes between its end and the queue's record of it). Running it again
 * would cost an upstream call and settle its quota twice; its client, if one were still there, is
 * told to retry.
 */
function expired(deps: PreviousRunDeps, job: CompletionJob, claim: Claim, mayBeRerun: boolean): boolean {
  const age = deps.clock.now().getTime() - job.created * 1000;
  return mayBeRerun && claim.previousOwner === '' && age > deps.config.queue.rerunHorizonMs;
}

/**
 * A re-run after the worker that held the request died: what its client was sent, read from the
 * relay log, decides how it ends. 'declined' when its end was published already; undefined when
 * the client saw nothing, so the request is to be answered afresh.
 */
export async function takeOver(
  deps: { log: Logger; publisher: RelayPublisher },
  job: CompletionJob,
  log: readonly LogEntry[],
  claim: Pick<Claim, 'stalled' | 'takeovers'>,
): Promise<JobEnd | 'declined' | undefined> {
  if (log.some((e) => e.kind === 'done' || e.kind === 'error')) return 'declined';
  const answer = log.find((e) => e.kind === 'final');
  if (answer) return answeredBeforeRecord(deps, job, answer);
  const logged = log.find((e) => e.kind === 'usage');
  if (logged) {
    // The whole answer was relayed; only the end was missing.
    deps.log.warn(
      { requestId: job.id },
      'job re-run after its worker stopped between the answer and its record; closing the stream',
    );
    const { counts, done } = loggedEnd(logged.payload);
    return {
      status: 'completed',
      message: { kind: 'done', payload: done },
      produced: counts,
      delivered: 'all',
      // Its worker died before storing the Response its end carries (a background one's client
      // reads nothing else): stored now, before the end is published, as its worker would have.
      ...(job.wire?.format === 'responses' ? { response: { framed: responseInEnd(done) } } : {}),
    };
  }
  return cutShort(deps, job, log, claim);
}

/**
 * A whole answer sent ahead of its record (delivery.ts, sendAhead), its worker dead before the
 * record: billed if the web process acknowledged it (handed it to its client), else nothing.
 */
async function answeredBeforeRecord(
  deps: { log: Logger; publisher: RelayPublisher },
  job: CompletionJob,
  answer: LogEntry,
): Promise<JobEnd> {
  const { publisher } = deps;
  const acked = await publisher.webAcked();
  const taken = acked !== undefined && acked >= answer.seq;
  deps.log.warn({ requestId: job.id, taken }, 'job re-run after its worker stopped between the answer and its record');
  publisher.endedWith(answer);
  return {
    status: 'completed',
    message: { kind: 'final', payload: answer.payload },
    produced: usageInBody(answer.payload, job.params),
    delivered: taken ? 'all' : 'none',
  };
}

/**
 * A stream its worker left without an end. After part of an answer it ends with an error and the
 * delivered text is billed. A fresh answer once at most: a job whose worker stalled, or died again
 * after answering it afresh, would likely stall the next worker too, so it ends as failed.
 */
function cutShort(
  deps: { log: Logger },
  job: CompletionJob,
  log: readonly LogEntry[],
  claim: Pick<Claim, 'stalled' | 'takeovers'>,
): JobEnd | undefined {
  const choices = deliveredChoices(log, job.params.n ?? 1);
  const anyDelivered = choices.some((c) => c.text !== '' || c.calls.length > 0);
  const produced = { prompt_tokens: job.promptTokens, completion_tokens: countChoices(choices) };
  if (claim.stalled || (!anyDelivered && claim.takeovers > 1)) {
    deps.log.warn(
      { requestId: job.id, stalled: claim.stalled, takeovers: claim.takeovers },
      'job re-run after its worker stalled or died again; ending it as failed instead of running it again',
    );
    const error = toRelayError(stalledError(claim.stalled));
    return {
      status: 'failed',
      message: { kind: 'error', payload: JSON.stringify(error) },
      produced: anyDelivered ? produced : NOTHING,
      delivered: anyDelivered ? { choices } : 'none',
      response: { ended: 'failed', error },
    };
  }
  if (!anyDelivered) return undefined;
  // Part of an answer was relayed: resuming it is not possible, repeating it would garble it.
  deps.log.warn(
    { requestId: job.id },
    'job re-run after its worker stopped mid-stream; ending the stream and billing what was delivered',
  );
  const error = toRelayError(interruptedError());
  // A background response's client reads this end back: it holds what was delivered and billed.
  return {
    status: 'failed',
    outcome: 'interrupted',
    message: { kind: 'error', payload: JSON.stringify(error) },
    produced,
    delivered: { choices },
    response: { ended: 'failed', error },
  };
}
