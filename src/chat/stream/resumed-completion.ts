import type { Clock } from '../../clock.js';
import type { Config } from '../../config.js';
import { AppError, retryAdvice } from '../../errors.js';
import { IN_FLIGHT_RETRY_MS, scriptNow } from '../../limits/limiter.service.js';
import type { RedisClient } from '../../infra/redis.js';
import { dependencyDown, type OutageLog } from '../../infra/outage.js';
import { lostRelay, relayFailure, silenceError } from './completion-errors.js';
import { CompletionStream } from './completion-stream.js';
import { attachReader, leaveReader, type Attached } from '../relay/readers.js';
import { followRelayLog, type FollowDeps } from '../relay/follower.js';
import type { RelayLogTails } from '../relay/log-tail.js';
import { originOf, readerLeasesKey, relayLogKey, requestStateKey, runningTtlSeconds } from '../relay/protocol.js';

// A completion read again by its id, on any web process, while its relay log is kept: the same
// stream as a live one, fed by the log (what it holds, then what its worker writes, to the end).

/** What resuming works with: Redis (the replay, the reader count), the live tails, this web process's instance. */
export interface ResumeDeps {
  redis: RedisClient;
  relayLogTails: RelayLogTails;
  relayHub: { readonly instance: string };
  config: Pick<Config, 'redis' | 'queue' | 'providers' | 'limits'>;
  /** The time reader leases are measured in (Redis's own with the system clock). */
  clock: Clock;
  outages: { redis: Pick<OutageLog, 'failure'> };
  log: { warn(obj: object, msg: string): void };
  /** Tests move time by hand. */
  timers?: FollowDeps['timers'];
}

export const completionNotFound = (config: Pick<Config, 'queue'>, id: string): AppError =>
  new AppError(
    'not_found',
    `No completion found with id '${id}'. A completion can be read back by the account that made it, until ${config.queue.relayLogTtlSeconds} s after it ended.`,
    {
      code: 'completion_not_found',
      param: 'completion_id',
    },
  );

/**
 * The stream of completion `id` after event `after`: what its relay log holds, then what its
 * worker writes, to [DONE]. A reader of a resumable request that is still running is counted in
 * until the stream ends, so the request is not cancelled for want of one. Every reader holds a
 * lease on one of the completion's RESUME_MAX_READERS slots until its stream ends. Throws 404 for
 * a completion that is not the account's (or no longer kept), 400 for one that did not stream,
 * 429 `too_many_readers` when every slot is held, 503 when Redis cannot be reached.
 */
export async function resumeCompletion(
  deps: ResumeDeps,
  accountId: string,
  id: string,
  after: number,
): Promise<CompletionStream> {
  const prefix = deps.config.redis.prefix;
  const origin = originOf(id);
  if (origin === undefined) throw completionNotFound(deps.config, id);
  const stateKey = requestStateKey(prefix, origin, id);
  const instance = deps.relayHub.instance;
  const maxReaders = deps.config.limits.completionReads.maxReadersPerCompletion;
  let attached: Attached | undefined;
  try {
    attached = await attachReader(deps.redis, {
      stateKey,
      leasesKey: readerLeasesKey(prefix, origin, id),
      accountId,
      instance,
      maxReaders,
      now: () => scriptNow(deps),
      timers: deps.timers,
    });
  } catch (err) {
    throw dependencyDown(err, { log: deps.outages.redis, source: 'resumed stream' });
  }
  if (!attached) throw completionNotFound(deps.config, id);
  if (!attached.stream) {
    throw new AppError(
      'invalid_request',
      `The completion '${id}' was not streamed, so it has no events to resume: read it with GET /v1/chat/completions/${id}.`,
      {
        code: 'completion_not_streamed',
        param: 'completion_id',
      },
    );
  }
  const { counted, lease } = attached;
  if (!lease) {
    throw new AppError(
      'rate_limited',
      `The completion '${id}' already has ${maxReaders} resumed streams following it, the most one completion may have at once. Close one of them, or try again once one has ended.`,
      { code: 'too_many_readers', param: 'completion_id', headers: retryAdvice(IN_FLIGHT_RETRY_MS) },
    );
  }
  const gone = new AbortController();
  const stream = new CompletionStream(
    id,
    undefined,
    {
      reading() {
        const follow = { redis: deps.redis, tails: deps.relayLogTails, config: deps.config, timers: deps.timers };
        void feedFromLog(deps, stream, followRelayLog(follow, relayLogKey(prefix, origin, id), after, gone.signal));
      },
      ended(reason) {
        gone.abort();
        lease.release();
        // A reader that saw the end has nothing to count out: the request is over (its end is
        // published only once its usage is recorded).
        if (counted && reason !== 'completed' && reason !== 'failed') {
          void leaveReader(deps.redis, prefix, stateKey, id, instance, runningTtlSeconds(deps.config)).catch(
            () => undefined,
          );
        }
      },
    },
    'running',
  );
  return stream;
}

/** The log's events into the stream, each page once the reader has taken the one before. */
async function feedFromLog(
  deps: Pick<ResumeDeps, 'log'>,
  stream: CompletionStream,
  log: ReturnType<typeof followRelayLog>,
): Promise<void> {
  // Once the reader has been sent anything, a failure can only be told as an error event.
  let shown = false;
  try {
    for await (const e of log) {
      if (stream.state === 'ended') return;
      switch (e.kind) {
        case 'sse':
          await new Promise<void>((taken) => stream.push({ kind: 'events', payload: e.payload }, taken));
          shown = true;
          break;
        case 'live':
          await new Promise<void>((taken) => stream.push({ kind: 'caught_up' }, taken));
          shown = true;
          break;
        case 'done':
          return stream.end('completed', { kind: 'done', payload: e.payload, lastEventId: e.lastEventId });
        case 'error':
          // A stream that had started ends with the error event, as it did; one that failed
          // before its first event answered with the error's status, and so does this.
          return stream.end('failed', {
            kind: 'error',
            error: relayFailure(e.error),
            lastEventId: e.lastEventId,
            started: e.started,
          });
        case 'silence':
          return stream.end('silence', {
            kind: 'error',
            error: silenceError(),
            lastEventId: e.lastEventId,
            started: false,
          });
      }
    }
  } catch (err) {
    if (stream.state === 'ended') return;
    deps.log.warn({ requestId: stream.requestId, err }, 'a resumed stream could not read its relay log');
    stream.end('redis_down', {
      kind: 'error',
      error: shown ? lostRelay() : dependencyDown(err),
      lastEventId: 0,
      started: false,
    });
  }
}
