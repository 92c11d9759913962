import { Queue, QueueEvents, RateLimitError, Worker, type Job, type Processor, type WorkerOptions } from 'bullmq';
import type { Config } from '../config.js';
import { hashTag, redisKey, shardTag, type RedisClient } from './redis.js';

export const COMPLETIONS_QUEUE = 'completions';
/** Scheduled work (invoicing a month, reconciling with Stripe, auditing totals), enqueued by the scheduler, run by workers. */
export const SCHEDULED_QUEUE = 'scheduled';

/** One job per account of a monthly invoicing run, taken by any worker. */
export const INVOICING_QUEUE = 'invoicing';

/** A queue by name, or one shard of a sharded queue (the completion queue has REDIS_SHARDS of them). */
export type QueueRef = string | { name: string; shard: number };

/**
 * BullMQ keys live under the deployment's prefix like every other key, with a hash tag in the
 * prefix (as BullMQ asks on a Redis Cluster): one queue's keys share a slot, and each queue or
 * shard has a slot of its own, so a sharded queue spreads over the cluster's masters.
 */
export function bullPrefix(config: Pick<Config, 'redis'>, queue: QueueRef): string {
  const tag =
    typeof queue === 'string'
      ? hashTag(config.redis.prefix, `q.${queue}`)
      : shardTag(config.redis.prefix, queue.shard, config.redis.shards);
  return redisKey(config.redis.prefix, 'bull', tag);
}

function nameOf(queue: QueueRef): string {
  // The completion queue exists only as shards: by its bare name it would be another, empty queue.
  if (queue === COMPLETIONS_QUEUE)
    throw new TypeError(
      `the ${COMPLETIONS_QUEUE} queue is sharded: name a shard ({ name, shard }, see completionShards)`,
    );
  return typeof queue === 'string' ? queue : queue.name;
}

/**
 * The one queue factory: producers (the web tier, the scheduler) use this. Nothing reads a
 * completion shard's event stream (a request hears of its job through the relay), so BullMQ keeps
 * it trimmed to almost nothing there instead of 10,000 events per shard; the invoicing run waits on
 * its queue's events (QueueEvents), which keep BullMQ's default.
 */
export function createQueue<T = unknown>(config: Config, queue: QueueRef, connection: RedisClient): Queue<T> {
  const completions = typeof queue !== 'string' && queue.name === COMPLETIONS_QUEUE;
  return new Queue<T>(nameOf(queue), {
    connection,
    prefix: bullPrefix(config, queue),
    defaultJobOptions: { removeOnComplete: true, removeOnFail: { count: 1000 }, attempts: 1 },
    ...(completions ? { streams: { events: { maxLen: 0 } } } : {}),
  });
}

/** The one worker factory; `connection` must be a 'queue-worker' connection (maxRetriesPerRequest: null). */
export function createWorker<T = unknown, R = unknown>(
  config: Config,
  queue: QueueRef,
  connection: RedisClient,
  processor: Processor<T, R>,
  opts: Partial<WorkerOptions> = {},
): Worker<T, R> {
  return new Worker<T, R>(nameOf(queue), processor, {
    connection,
    prefix: bullPrefix(config, queue),
    stalledInterval: config.queue.stalledIntervalMs,
    // A dead worker's job is found stalled once its lock lapses (config.ts says how soon).
    lockDuration: config.queue.lockDurationMs,
    maxStalledCount: 1,
    ...opts,
  });
}

/**
 * A queue's event stream, read over `connection`, which it blocks on: a connection of its own of
 * the 'queue-worker' role. Its owner closes both.
 */
export function createQueueEvents(
  config: Pick<Config, 'redis'>,
  queue: QueueRef,
  connection: RedisClient,
): QueueEvents {
  return new QueueEvents(nameOf(queue), { connection, prefix: bullPrefix(config, queue), autorun: true });
}

/**
 * Thrown by a job that met an outside rate limit after calling worker.rateLimit(ms): BullMQ puts
 * the job back without spending an attempt, and every worker of the queue waits out the pause.
 */
export const rateLimited = (): Error => new RateLimitError();

/** The completion queue's shards: 0 … REDIS_SHARDS − 1. */
export const completionShards = (config: Pick<Config, 'redis'>): { name: string; shard: number }[] =>
  Array.from({ length: config.redis.shards }, (_, shard) => ({ name: COMPLETIONS_QUEUE, shard }));

/** A queue the service uses, as an operator sees it (the queue dashboard). */
export interface QueueListing {
  ref: QueueRef;
  /** Unique across the service: a shard is `name.shard` (completions.0), since every shard has the queue's name. */
  label: string;
  purpose: string;
}

/** Every queue the service uses, each shard of a sharded queue on its own: add a new queue here too. */
export function everyQueue(config: Pick<Config, 'redis'>): QueueListing[] {
  const shards = completionShards(config);
  return [
    ...shards.map((ref) => ({
      ref,
      label: `${ref.name}.${ref.shard}`,
      purpose: `Chat completion requests from the web tier, run by the workers (shard ${ref.shard + 1} of ${shards.length})`,
    })),
    {
      ref: SCHEDULED_QUEUE,
      label: SCHEDULED_QUEUE,
      purpose: 'Scheduled work the scheduler enqueues: invoicing a month, reconciling with Stripe, the usage roll-up',
    },
    { ref: INVOICING_QUEUE, label: INVOICING_QUEUE, purpose: 'One job per account of a monthly invoicing run' },
  ];
}

export type { Job, Queue, QueueEvents, Worker };
