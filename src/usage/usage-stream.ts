import type { Config } from '../config.js';
import { redisKey, replicated, shardTag, type RedisClient } from '../infra/redis.js';
import type { UsageEvent } from './usage-event.js';

// Usage travels from workers to Postgres through Redis streams: the worker appends a request's
// usage before it publishes the request's end (so the client never sees an end whose usage could
// be lost), and the metering consumers drain the streams into the ledger in batches. The ledger is
// keyed by request id, so an append repeated after a lost reply is counted once. There is one
// stream per shard (REDIS_SHARDS), the same shard as the request's completion queue, so on a
// Redis Cluster the appends spread over the masters.

export const METERING_GROUP = 'metering';

/** The usage stream of shard `shard`. */
export const usageStreamKey = (config: Pick<Config, 'redis'>, shard: number): string =>
  redisKey(config.redis.prefix, 'usage', shardTag(config.redis.prefix, shard, config.redis.shards));

/** Every shard's usage stream. */
export const usageStreamKeys = (config: Pick<Config, 'redis'>): string[] =>
  Array.from({ length: config.redis.shards }, (_, i) => usageStreamKey(config, i));

/** The shard a request's usage goes to (its completion queue's, when it has one). */
export const usageShardOf = (config: Pick<Config, 'redis'>, shard: number | undefined): number =>
  (shard ?? 0) % config.redis.shards;

/** How long an append waits for a replica of its master, and how many appends it makes at most. */
const REPLICA_WAIT_MS = 1000;
const APPENDS = 3;

/**
 * Appends a request's usage to its shard's stream. On a Redis Cluster whose masters have replicas
 * it also waits until a replica has the entry, appending again if none confirmed: replication is
 * asynchronous, and a failover just after the append would otherwise lose what the client was
 * told it used. A second copy is harmless (the ledger keeps one row per request).
 */
export async function appendUsage(
  redis: RedisClient,
  config: Pick<Config, 'redis'>,
  shard: number | undefined,
  event: UsageEvent,
): Promise<void> {
  const key = usageStreamKey(config, usageShardOf(config, shard));
  for (let append = 1; ; append++) {
    await redis.xadd(key, '*', 'e', JSON.stringify(event));
    if (append >= APPENDS || (await replicated(redis, key, REPLICA_WAIT_MS))) return;
  }
}

export function parseUsageEntry(fields: string[]): UsageEvent | undefined {
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (fields[i] === 'e') {
      try {
        return JSON.parse(fields[i + 1]!) as UsageEvent;
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}
