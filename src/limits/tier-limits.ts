import type { Config, TierLimits } from '../config.js';
import type { Tier } from '../../db/schema/index.js';

/** Fixed by the interface ("Limits: Free tier rate limits"); deliberately not configurable. */
export const FREE_TIER_LIMITS: TierLimits = Object.freeze({
  requestsPerMinute: 20,
  requestsPerHour: 100,
  requestsPerDay: 500,
  tokensPerDay: 100_000,
});

/** The limits an account on `tier` gets; paid limits come from configuration (PAID_* variables). */
export function limitsForTier(config: Pick<Config, 'limits'>, tier: Tier): TierLimits {
  return tier === 'paid' ? config.limits.paid : FREE_TIER_LIMITS;
}
