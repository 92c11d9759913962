import { Redis, type RedisOptions } from 'ioredis';
import type { Config } from '../config.js';

/**
 * The roles a Redis connection plays. BullMQ's production guide asks for different settings:
 * a blocking worker connection must retry forever, while anything on a request path must fail
 * fast so a client gets a prompt 503 instead of a hung request.
 */
export type RedisRole = 'command' | 'subscriber' | 'queue-producer' | 'queue-worker';

/** The longest a connection waits between two reconnect attempts. */
export const RECONNECT_MAX_DELAY_MS = 1000;

export function createRedis(config: Config, role: RedisRole, name: string = role): Redis {
  const base: RedisOptions = {
    connectionName: `${config.redis.prefix}:${name}`,
    connectTimeout: 3000,
    // Reconnect forever, at least once a second: after a Redis restart every process is back
    // within RECONNECT_MAX_DELAY_MS, which is what liveness checks wait for (see liveness.ts).
    retryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 6), RECONNECT_MAX_DELAY_MS),
    lazyConnect: false,
  };
  const byRole: Record<RedisRole, RedisOptions> = {
    command: { maxRetriesPerRequest: 1, enableOfflineQueue: false, commandTimeout: 2000 },
    subscriber: { maxRetriesPerRequest: null, enableOfflineQueue: true },
    'queue-producer': { maxRetriesPerRequest: 1, enableOfflineQueue: false },
    'queue-worker': { maxRetriesPerRequest: null, enableOfflineQueue: true },
  };
  const client = new Redis(config.redis.url, { ...base, ...byRole[role] });
  // ioredis emits 'error' on every failed reconnect; without a listener Node would crash.
  client.on('error', () => {});
  return client;
}

/** Every key and channel the service uses goes through here, so one prefix isolates a deployment or a test run. */
export function redisKey(config: Pick<Config, 'redis'>, ...parts: (string | number)[]): string {
  return [config.redis.prefix, ...parts].join(':');
}
