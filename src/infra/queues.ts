import { Queue, Worker, type Job, type Processor, type WorkerOptions } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Config } from '../config.js';

export const COMPLETIONS_QUEUE = 'completions';
/** Scheduled work (invoicing a month, reconciling with Stripe, auditing totals), enqueued by the scheduler, run by workers. */
export const SCHEDULED_QUEUE = 'scheduled';

/** BullMQ keys live under the deployment's prefix like every other key. */
export function bullPrefix(config: Config): string {
  return `${config.redis.prefix}:bull`;
}

/** The one queue factory: producers (the web tier, the scheduler) use this. */
export function createQueue<T = unknown>(config: Config, name: string, connection: Redis): Queue<T> {
  return new Queue<T>(name, {
    connection,
    prefix: bullPrefix(config),
    defaultJobOptions: { removeOnComplete: true, removeOnFail: { count: 1000 }, attempts: 1 },
  });
}

/** The one worker factory; `connection` must be a 'queue-worker' connection (maxRetriesPerRequest: null). */
export function createWorker<T = unknown, R = unknown>(
  config: Config,
  name: string,
  connection: Redis,
  processor: Processor<T, R>,
  opts: Partial<WorkerOptions> = {},
): Worker<T, R> {
  return new Worker<T, R>(name, processor, {
    connection,
    prefix: bullPrefix(config),
    stalledInterval: config.queue.stalledIntervalMs,
    maxStalledCount: 1,
    ...opts,
  });
}

export type { Job, Queue, Worker };
