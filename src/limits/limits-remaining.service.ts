import type { Config } from '../config.js';
import type { Clock } from '../clock.js';
import type { Tier } from '../../db/schema/index.js';
import type { RedisClient } from '../infra/redis.js';
import { redisScript, runScript } from '../infra/redis-scripts.js';
import { scriptNow, usageKeys } from './limiter.service.js';
import { REMAINING_LUA } from './limits-remaining.scripts.js';
import { limitsForTier } from './tier-limits.js';

// What is left of an account's rate-limit windows and token quota, from the counters the
// admission script keeps and the X-RateLimit-* headers report, read in one round trip on the
// account's keys (one hash slot) without spending anything.

type Windows<T> = { requests_per_minute: T; requests_per_hour: T; requests_per_day: T; tokens_per_day: T };

export interface WindowsRemaining {
  remaining: Windows<number>;
  /** When each window starts again (UTC, ISO 8601): the end of the minute, hour and day. */
  resets_at: Windows<string>;
}

const REMAINING = redisScript('limits-remaining', REMAINING_LUA);

/** The account's windows under its tier's limits, as the next admission would see them. Throws when Redis cannot answer. */
export async function windowsRemaining(
  app: { redis: RedisClient; clock: Clock; config: Pick<Config, 'redis' | 'limits'> },
  accountId: string,
  tier: Tier,
): Promise<WindowsRemaining> {
  const limits = limitsForTier(app.config, tier);
  const reply = (
    (await runScript(app.redis, REMAINING, usageKeys(app.config, accountId), [scriptNow(app)])) as (number | string)[]
  ).map(Number);
  const [minute, hour, day, tokens, minuteEnd, hourEnd, dayEnd] = reply as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const left = (limit: number, used: number) => Math.max(0, limit - used);
  const at = (ms: number) => new Date(ms).toISOString();
  return {
    remaining: {
      requests_per_minute: left(limits.requestsPerMinute, minute),
      requests_per_hour: left(limits.requestsPerHour, hour),
      requests_per_day: left(limits.requestsPerDay, day),
      tokens_per_day: left(limits.tokensPerDay, tokens),
    },
    resets_at: {
      requests_per_minute: at(minuteEnd),
      requests_per_hour: at(hourEnd),
      requests_per_day: at(dayEnd),
      tokens_per_day: at(dayEnd),
    },
  };
}
