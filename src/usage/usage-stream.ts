import type { ChainableCommander } from 'ioredis';
import type { Config } from '../config.js';
import { redisKey } from '../infra/redis.js';
import type { UsageEvent } from './usage-event.js';

// Usage travels from workers to Postgres through a Redis stream: the worker appends in the same
// MULTI that ends the request (one round trip, atomic with its other effects), and the metering
// worker drains the stream into the ledger in batches. A worker crash after the append loses
// nothing; the append itself is the durable record until the ledger has it.

export const METERING_GROUP = 'metering';

export const usageStreamKey = (config: Pick<Config, 'redis'>): string => redisKey(config, 'usage');

export function appendUsage(tx: ChainableCommander, config: Pick<Config, 'redis'>, event: UsageEvent): ChainableCommander {
  return tx.xadd(usageStreamKey(config), '*', 'e', JSON.stringify(event));
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
