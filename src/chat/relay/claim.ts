import type { RedisClient } from '../../infra/redis.js';
import { redisScript, runScript } from '../../infra/redis-scripts.js';
import { encodeRelay, readerField, STALLED_FIELD, type RelayTarget } from './protocol.js';

// The claim, in one round trip: take the request if nobody holds it (a first run) or if told to
// (a re-run taking over from a dead worker), log and announce `picked`, and say who held it before.
// A first run also writes who may read the request back (its account) and how (a stream, a
// resumable one); a resumable request counts its client's connection as a reader, unless that
// client left before the claim (its web process already counted it out, leaving the field at 0).
// A request already recorded is left as it is: its state keeps the ended lifetime (a job BullMQ
// handed out again after a Redis restart must not give it back the running one). The web process
// marks a request whose client left `cancelled`, so whoever claims it, first or on a take-over,
// honours the cancel. The channel is passed as a key: on a cluster it must hash to the script's
// slot, as it does. A worker's watchdog marks the requests of a worker it ends for a stalled event
// loop `stalled`; a take-over counts itself in `takeovers`: the claim reads both for the take-over.
// Reply: { taken 0|1, previous owner ('' if none), recorded '0'|'1', left before the claim 0|1, cancelled 0|1,
// stalled 0|1, take-overs so far, this one included }.
const CLAIM_LUA = `
local owner = redis.call('HGET', KEYS[1], 'worker')
local recorded = redis.call('HGET', KEYS[1], 'recorded') or '0'
local cancelled = redis.call('HGET', KEYS[1], 'cancelled') == '1' and 1 or 0
local stalled = redis.call('HGET', KEYS[1], '${STALLED_FIELD}') == '1' and 1 or 0
if recorded == '1' or (owner and owner ~= ARGV[1] and ARGV[4] ~= '1') then return { 0, owner or '', recorded, 0, cancelled, stalled, 0 } end
redis.call('HSET', KEYS[1], 'worker', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
local takeovers = 0
if owner and owner ~= ARGV[1] then takeovers = redis.call('HINCRBY', KEYS[1], 'takeovers', 1) end
local left = 0
if not owner then
  redis.call('HSET', KEYS[1], 'account', ARGV[5], 'stream', ARGV[6], 'resumable', ARGV[7] == '' and '0' or '1')
  if ARGV[7] ~= '' and redis.call('HSETNX', KEYS[1], ARGV[7], 1) == 0 then left = 1 end
  redis.call('XADD', KEYS[2], '1-0', 'k', 'p', 'p', '')
  redis.call('EXPIRE', KEYS[2], ARGV[3])
  redis.call('SPUBLISH', KEYS[3], ARGV[2])
end
return { 1, owner or '', recorded, left, cancelled, stalled, takeovers }
`;

const CLAIM = redisScript('relay-claim', CLAIM_LUA);

export interface Claim {
  /** This worker holds the request now. */
  taken: boolean;
  /** Who held it before ('' for a first run). */
  previousOwner: string;
  /** Its usage is recorded: nothing is left to do. */
  recorded: boolean;
  /** A resumable request whose client left before this first claim: its grace period starts now. */
  leftBeforeClaim: boolean;
  /** Its client left (a web process marked it): nothing more is to be produced for it. */
  cancelled: boolean;
  /** A worker running it was ended for a stalled event loop: running it again may stall the next. */
  stalled: boolean;
  /** How many times it has been taken over from a dead worker, this claim included. */
  takeovers: number;
}

/** What a first claim records about the request, for those who read it back. */
export interface ClaimedRequest {
  accountId: string;
  stream: boolean;
  /** The web process whose client counts as the first reader of a resumable request; undefined when not resumable. */
  resumableFor: string | undefined;
}

/**
 * A worker's first step with a job. A first run takes the request and announces `picked` (seq 0).
 * A job someone else holds is taken only with `force` (its owner is known to be dead).
 */
export async function claimRequest(
  redis: RedisClient,
  target: RelayTarget,
  workerId: string,
  ttlSeconds: number,
  request: ClaimedRequest,
  force = false,
): Promise<Claim> {
  const reader = request.resumableFor === undefined ? '' : readerField(request.resumableFor);
  const [taken, owner, recorded, left, cancelled, stalled, takeovers] = (await runScript(
    redis,
    CLAIM,
    [target.stateKey, target.logKey, target.channel],
    [
      workerId,
      encodeRelay(target.requestId, 0, 'picked'),
      ttlSeconds,
      force ? '1' : '0',
      request.accountId,
      request.stream ? '1' : '0',
      reader,
    ],
  )) as [number, string, string, number, number, number, number];
  // This worker as the previous owner: a retried claim whose first reply was lost (it had taken the
  // request then). That is still a first run, not a take-over.
  return {
    taken: Number(taken) === 1,
    previousOwner: owner === workerId ? '' : owner,
    recorded: recorded === '1',
    leftBeforeClaim: Number(left) === 1,
    cancelled: Number(cancelled) === 1,
    stalled: Number(stalled) === 1,
    takeovers: Number(takeovers),
  };
}
