import { randomUUID } from 'node:crypto';
import { realTimers, type Timers } from '../../clock.js';
import type { RedisClient } from '../../infra/redis.js';
import { redisScript, runScript } from '../../infra/redis-scripts.js';
import { NOW } from '../../limits/limiter.scripts.js';
import { webAliveKey } from './liveness.js';
import { cancelChannel, detachNotice, READER_FIELD_PREFIX, readerField } from './protocol.js';

// Who reads a request, kept in its state hash (so in its web process's slot, beside its relay log)
// as one counter per web process (`r.<instance>`). A resumable request starts with its client's
// connection counted on the web process that took it; a resumed stream counts itself on the
// process that serves it. When a reader leaves, the worker is told, and after the grace period it
// cancels the request unless a counter is above zero on a web process that is still alive (a
// process that died with readers open is not waited for).
//
// Resumed streams of one request are also capped (RESUME_MAX_READERS), on every web process
// together: each holds a lease in a sorted set beside the state (member: the reader, score: when
// its lease ends), renewed while it reads and removed when it ends. A web process that dies
// leaves leases that lapse within READER_LEASE_MS, so it cannot hold slots for ever.

/** How long a resumed reader's slot is held without renewal; its web process renews it three times as often. */
export const READER_LEASE_MS = 30_000;

/**
 * Checks the caller may read the request and, for a stream, takes a reader's lease if the cap
 * allows; a resumable request still running also counts the reader in. KEYS: the request's state,
 * its reader leases. ARGV: now ('' = Redis's TIME), account, reader field, the cap, lease ms, the
 * reader's lease id. Reply: nil when the request is unknown, expired or another account's;
 * otherwise { stream '0'|'1', counted 0|1, leased 1 | 0 (not a stream) | -1 (the cap is reached) }.
 */
const ATTACH_LUA = `${NOW}
local f = redis.call('HMGET', KEYS[1], 'account', 'stream', 'recorded', 'resumable')
if f[1] ~= ARGV[2] then return false end
if f[2] ~= '1' then return { '0', 0, 0 } end
local lease = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', int(now))
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return { '1', 0, -1 } end
redis.call('ZADD', KEYS[2], int(now + lease), ARGV[6])
redis.call('PEXPIRE', KEYS[2], lease)
local counted = 0
if f[4] == '1' and f[3] ~= '1' then
  redis.call('HINCRBY', KEYS[1], ARGV[3], 1)
  counted = 1
end
return { '1', counted, 1 }
`;

/** Renews a reader's lease while it is held. KEYS: the leases. ARGV: now, lease ms, the lease id. */
const RENEW_LUA = `${NOW}
if not redis.call('ZSCORE', KEYS[1], ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], int(now + tonumber(ARGV[2])), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`;

/**
 * Counts a reader out; replies with the worker to tell ('' when the request has ended). The state
 * may not exist yet (a client that left before a worker claimed its request): it is then created
 * with the running request's TTL, and the claim finds the client already gone.
 */
const LEAVE_LUA = `
redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
if redis.call('HGET', KEYS[1], 'recorded') == '1' then return '' end
return redis.call('HGET', KEYS[1], 'worker') or ''
`;

const ATTACH = redisScript('readers-attach', ATTACH_LUA);
const RENEW = redisScript('readers-renew', RENEW_LUA);
const LEAVE = redisScript('readers-leave', LEAVE_LUA);

export interface Attached {
  /** The request streams (a non-streaming one has no events to resume, and takes no lease). */
  stream: boolean;
  /** The reader was counted in, and must be counted out when it leaves. */
  counted: boolean;
  /** The reader's lease, for a stream: undefined when RESUME_MAX_READERS readers already hold one. */
  lease?: ReaderLease;
}

export interface AttachInput {
  stateKey: string;
  leasesKey: string;
  accountId: string;
  instance: string;
  /** RESUME_MAX_READERS. */
  maxReaders: number;
  /** The time the lease scripts use (epoch ms as a string; '' = Redis's own TIME). */
  now: () => string;
  timers?: Timers;
}

/** Undefined when the request is unknown, expired or belongs to another account. One round trip. */
export async function attachReader(redis: RedisClient, input: AttachInput): Promise<Attached | undefined> {
  const leaseId = randomUUID();
  const reply = (await runScript(
    redis,
    ATTACH,
    [input.stateKey, input.leasesKey],
    [input.now(), input.accountId, readerField(input.instance), input.maxReaders, READER_LEASE_MS, leaseId],
  )) as [string, number, number] | null;
  if (!reply) return undefined;
  const attached: Attached = { stream: reply[0] === '1', counted: Number(reply[1]) === 1 };
  if (Number(reply[2]) === 1) attached.lease = new ReaderLease(redis, input.leasesKey, leaseId, input);
  return attached;
}

/**
 * A resumed reader's slot, renewed until released. A renewal that fails (Redis away) is tried
 * again at the next turn; the lease lapses by itself if none gets through.
 */
export class ReaderLease {
  private timer: unknown;
  private released = false;
  private readonly timers: Timers;

  constructor(
    private readonly redis: RedisClient,
    private readonly key: string,
    private readonly id: string,
    private readonly clock: Pick<AttachInput, 'now' | 'timers'>,
  ) {
    this.timers = clock.timers ?? realTimers;
    this.schedule();
  }

  private schedule(): void {
    this.timer = this.timers.setTimeout(() => {
      void runScript(this.redis, RENEW, [this.key], [this.clock.now(), READER_LEASE_MS, this.id])
        .catch(() => undefined)
        .finally(() => {
          if (!this.released) this.schedule();
        });
    }, READER_LEASE_MS / 3);
  }

  /** Frees the slot at once (once); a failure leaves it to lapse. */
  release(): void {
    if (this.released) return;
    this.released = true;
    this.timers.clearTimeout(this.timer);
    void this.redis.zrem(this.key, this.id).catch(() => undefined);
  }
}

/**
 * Counts a reader of a resumable request out and tells the worker running it, which starts the
 * grace period (or lets one already running decide).
 */
export async function leaveReader(
  redis: RedisClient,
  prefix: string,
  stateKey: string,
  requestId: string,
  instance: string,
  ttlSeconds: number,
): Promise<void> {
  const worker = (await runScript(redis, LEAVE, [stateKey], [readerField(instance), ttlSeconds])) as string;
  if (worker) await redis.spublish(cancelChannel(prefix, worker), detachNotice(requestId));
}

/** True when a web process still alive counts a reader of the request. Two round trips. */
export async function readersAlive(redis: RedisClient, prefix: string, stateKey: string): Promise<boolean> {
  const state = await redis.hgetall(stateKey);
  const instances = Object.entries(state)
    .filter(([field, count]) => field.startsWith(READER_FIELD_PREFIX) && Number(count) > 0)
    .map(([field]) => field.slice(READER_FIELD_PREFIX.length));
  if (instances.length === 0) return false;
  const alive = await redis.mget(...instances.map((i) => webAliveKey(prefix, i)));
  return alive.some((v) => v !== null);
}
