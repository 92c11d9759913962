import type { RedisClient } from '../../infra/redis.js';
import { redisScript, runScript } from '../../infra/redis-scripts.js';
import { cancelChannel } from './protocol.js';

// A cancel is recorded with the request, in its state hash, before the worker holding it is told:
// a message on a worker's channel reaches only that worker, and only if it is listening, while a
// request may be queued, between a dead worker and the one taking it over, or claimed a moment
// later. Whoever claims the request next reads the mark (see the claim in relay/publisher.ts).

/**
 * Marks the request cancelled unless it has ended, and replies with the worker holding it ('' when
 * none does or it has ended). A state created here (the client left before any claim) gets the
 * running request's lifetime, as the claim would give it.
 */
const CANCEL = redisScript(
  'request-cancel',
  `
if redis.call('HGET', KEYS[1], 'recorded') == '1' then return '' end
redis.call('HSET', KEYS[1], 'cancelled', '1')
if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return redis.call('HGET', KEYS[1], 'worker') or ''
`,
);

/** Records that the request's client left, and tells the worker holding it to stop now. */
export async function cancelRequest(
  redis: RedisClient,
  prefix: string,
  stateKey: string,
  requestId: string,
  ttlSeconds: number,
): Promise<void> {
  const worker = (await runScript(redis, CANCEL, [stateKey], [ttlSeconds])) as string;
  if (worker) await redis.spublish(cancelChannel(prefix, worker), requestId);
}
