import { sleep } from '../../clock.js';
import type { Config } from '../../config.js';
import type { RedisClient } from '../../infra/redis.js';
import { isDependencyDown, type OutageLog } from '../../infra/outage.js';
import { retry } from '../../infra/retry.js';
import type { CompletionJob } from '../relay/completion-job.js';
import { claimRequest, type Claim } from '../relay/claim.js';
import type { WorkerSeen } from '../relay/liveness.js';
import { runningTtlSeconds, type RelayTarget } from '../relay/protocol.js';

/** What the claim uses: Redis, this worker's id, and how to read another worker's liveness. */
export interface ClaimDeps {
  redis: RedisClient;
  config: Pick<Config, 'providers' | 'queue'>;
  outages: { redis: Pick<OutageLog, 'failure'> };
  workerId: string;
  /** Whether a worker's liveness key is there, and since when it is not, read once the connection is known to be settled. */
  workerSeen: (workerId: string) => Promise<WorkerSeen>;
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

/**
 * Step one: the claim. A job fetched just before Redis went away is claimed once it is back
 * (bounded, like the record). A request another worker holds is left alone while that worker
 * lives ('declined'), and taken over once it is known dead.
 */
export async function claimJob(
  deps: ClaimDeps,
  job: CompletionJob,
  target: RelayTarget,
  running: { controller: AbortController; resumable: boolean },
): Promise<Claim | 'declined'> {
  const { config } = deps;
  const deadline = performance.now() + config.queue.redisOutageMaxMs;
  const claimed = {
    accountId: job.accountId,
    stream: job.stream,
    resumableFor: running.resumable ? job.relayTo : undefined,
  };
  const ttl = runningTtlSeconds(config);
  const claimOnce = (force = false) =>
    retry(() => claimRequest(deps.redis, target, deps.workerId, ttl, claimed, force), {
      retryable: isDependencyDown,
      pauseMs: 250,
      deadline,
      onRetry: (err) => deps.outages.redis.failure('claim', err),
    });
  try {
    const claim = await claimOnce();
    if (claim.recorded) return 'declined';
    if (claim.taken) return claim;
    // Another worker holds it: left alone if that worker shows it is alive before it has been
    // silent for the take-over's wait.
    const every = Math.max(50, Math.floor(config.queue.livenessTtlMs / 8));
    const until = performance.now() + takeOverGraceMs(config);
    for (;;) {
      const seen = await deps.workerSeen(claim.previousOwner);
      if (seen.alive) return 'declined';
      if (seen.silentMs === undefined ? performance.now() >= until : seen.silentMs >= takeOverSilenceMs(config)) break;
      await sleep(every);
    }
    const forced = await claimOnce(true);
    return forced.recorded ? 'declined' : forced;
  } catch (err) {
    running.controller.abort('claim_failed');
    throw err;
  }
}
