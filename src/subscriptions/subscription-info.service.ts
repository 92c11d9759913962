import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Db } from '../infra/db.js';
import type { Limiter } from '../limits/limiter.service.js';
import { spendLimitView, type SpendLimitView } from '../billing/spend-limit.service.js';
import type { Catalog } from '../catalog/catalog.js';
import { limitsForTier } from '../limits/tier-limits.js';
import { windowsRemaining, type WindowsRemaining } from '../limits/limits-remaining.service.js';
import type { RedisClient } from '../infra/redis.js';
import { getAccount } from '../accounts/accounts.service.js';
import type { Tier } from '../../db/schema/accounts.js';
import type { PaymentMethodOnFile } from './stripe-customer.service.js';
import { paymentMethodOf } from './subscription-result.presenter.js';

/** What the info endpoint reads: our own records, the catalog, the tiers' limits, their counters and the spending limit's figures (never Stripe). */
export interface SubscriptionInfoDeps {
  db: Db;
  redis: RedisClient;
  clock: Clock;
  config: Pick<Config, 'limits' | 'redis'>;
  catalog: Catalog;
  limiter: Limiter;
}

export interface SubscriptionInfo {
  tier: Tier;
  subscription_id: string | null;
  subscription_status: string | null;
  payment_method: PaymentMethodOnFile | null;
  checkout_pending: boolean;
  models: { id: string; provider: string; input_price_per_million: string; output_price_per_million: string }[];
  limits: {
    requests_per_minute: number;
    requests_per_hour: number;
    requests_per_day: number;
    tokens_per_day: number;
    /** What is left of each window now (null when the counters cannot be read). */
    remaining: WindowsRemaining['remaining'] | null;
    resets_at: WindowsRemaining['resets_at'] | null;
  };
  /** The monthly spending limit and what is left of it this month. */
  spend_limit: SpendLimitView;
  /** When the key may be regenerated next (null: now, or the counter cannot be read). */
  api_key: { next_regeneration_at: string | null };
}

/** GET /v1/subscription/info: from our own records only, so it works without Stripe configured. */
export async function subscriptionInfo(app: SubscriptionInfoDeps, accountId: string): Promise<SubscriptionInfo> {
  const account = await getAccount(app, accountId);
  const limits = limitsForTier(app.config, account.tier);
  // The page stays useful while Redis is away: only what is left of the windows is unknown then.
  const windows = await windowsRemaining(app, account.id, account.tier).catch(() => null);
  return {
    tier: account.tier,
    subscription_id: account.stripe_subscription_id,
    subscription_status: account.subscription_status,
    payment_method: paymentMethodOf(account),
    checkout_pending: account.tier === 'free' && account.checkout_session_id !== null,
    models: app.catalog.forTier(account.tier).map((m) => ({
      id: m.id,
      provider: m.provider,
      input_price_per_million: m.input_price_per_million,
      output_price_per_million: m.output_price_per_million,
    })),
    limits: {
      requests_per_minute: limits.requestsPerMinute,
      requests_per_hour: limits.requestsPerHour,
      requests_per_day: limits.requestsPerDay,
      tokens_per_day: limits.tokensPerDay,
      remaining: windows?.remaining ?? null,
      resets_at: windows?.resets_at ?? null,
    },
    spend_limit: await spendLimitView(app, account),
    api_key: {
      next_regeneration_at:
        (await app.limiter.nextKeyRegeneration(account.id).catch(() => undefined))?.toISOString() ?? null,
    },
  };
}
