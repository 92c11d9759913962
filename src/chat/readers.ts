import type { RedisClient } from '../infra/redis.js';
import { webAliveKey } from './liveness.js';
import { cancelChannel, detachNotice, READER_FIELD_PREFIX, readerField } from './relay-protocol.js';

// Who reads a request, kept in its state hash (so in its web process's slot, beside its relay log)
// as one counter per web process (`r.<instance>`). A resumable request starts with its client's
// connection counted on the web process that took it; a resumed stream counts itself on the
// process that serves it. When a reader leaves, the worker is told, and after the grace period it
// cancels the request unless a counter is above zero on a web process that is still alive (a
// process that died with readers open is not waited for).

/**
 * Checks the caller may read the request and, for a resumable one still running, counts the
 * reader in. Reply: nil when the request is unknown, expired or another account's; otherwise
 * { stream '0'|'1', counted 0|1 }.
 */
const ATTACH_LUA = `
local f = redis.call('HMGET', KEYS[1], 'account', 'stream', 'recorded', 'resumable')
if f[1] ~= ARGV[1] then return false end
local counted = 0
if f[4] == '1' and f[3] ~= '1' then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  counted = 1
end
return { f[2] or '0', counted }
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

type ReadersRedis = RedisClient & {
  readersAttach(stateKey: string, accountId: string, field: string): Promise<[string, number] | null>;
  readersLeave(stateKey: string, field: string, ttlSeconds: number): Promise<string>;
};

function scripts(redis: RedisClient): ReadersRedis {
  const r = redis as ReadersRedis;
  if (typeof r.readersAttach !== 'function') {
    r.defineCommand('readersAttach', { numberOfKeys: 1, lua: ATTACH_LUA });
    r.defineCommand('readersLeave', { numberOfKeys: 1, lua: LEAVE_LUA });
  }
  return r;
}

export interface Attached {
  /** The request streams (a non-streaming one has no events to resume). */
  stream: boolean;
  /** The reader was counted in, and must be counted out when it leaves. */
  counted: boolean;
}

/** Undefined when the request is unknown, expired or belongs to another account. One round trip. */
export async function attachReader(
  redis: RedisClient,
  stateKey: string,
  accountId: string,
  instance: string,
): Promise<Attached | undefined> {
  const reply = await scripts(redis).readersAttach(stateKey, accountId, readerField(instance));
  if (!reply) return undefined;
  return { stream: reply[0] === '1', counted: Number(reply[1]) === 1 };
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
  const worker = await scripts(redis).readersLeave(stateKey, readerField(instance), ttlSeconds);
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
