import { sleep } from '../clock.js';
import type { RedisClient } from './redis.js';

// The service's two ways to wait out a Redis outage: call again until the call goes through, or
// pause until the connection is back before trying again.

export interface RetryOptions {
  /** Whether a failure may pass with time (an outage); any other is thrown at once. */
  retryable: (err: unknown) => boolean;
  /** The pause before the next call. */
  pauseMs: number;
  /** performance.now() past which a failure is thrown instead (default: never). */
  deadline?: number;
  /** Hears of each failure that is retried. */
  onRetry?: (err: unknown) => void;
}

/** Calls `fn` until it resolves, pausing between calls, while its failures are retryable and the deadline is not past. */
export async function retry<T>(fn: () => Promise<T>, opts: RetryOptions): Promise<T> {
  const deadline = opts.deadline ?? Infinity;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (!opts.retryable(err) || performance.now() > deadline) throw err;
      opts.onRetry?.(err);
      await sleep(opts.pauseMs);
    }
  }
}

/**
 * Pauses `pauseMs`, then polls at that pace until the connection is ready or `deadline`
 * (performance.now()) is past. It always pauses once, since a Redis Cluster stays 'ready' while one
 * of its masters fails over, and polls because ready may come and go.
 */
export async function untilRedisReady(redis: RedisClient, pauseMs = 100, deadline = Infinity): Promise<void> {
  do await sleep(pauseMs);
  while (redis.status !== 'ready' && performance.now() <= deadline);
}
