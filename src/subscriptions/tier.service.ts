import type { RedisClient } from '../infra/redis.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { onCommit, type Trx } from '../infra/db.js';
import { invalidateAccountKeys } from '../accounts/auth.service.js';
import type { Tier } from '../../db/schema/accounts.js';
import { lockAccount, recordTierChange } from '../accounts/account-billing.service.js';

/** What a tier change uses besides the caller's transaction: what tells every web process once it has committed. */
export interface TierDeps {
  redis: RedisClient;
  config: Pick<Config, 'redis'>;
  log: Logger;
}

export interface TierChange {
  changed: boolean;
  from: Tier;
  to: Tier;
}

/**
 * The one way an account's tier ever changes (upgrade and downgrade paths, webhooks, and the
 * billing feature's reconciliation all come here). It locks the account row, writes tier and
 * tier_changed_at, and leaves an audit row in tier_changes saying why. Asking for the tier the
 * account already has changes nothing and writes no audit row, so replays are harmless.
 * Model access and rate limits read the tier through the API key cache, which the change
 * invalidates once committed, so it applies to the account's next request.
 */
export async function changeTier(
  app: TierDeps,
  trx: Trx,
  accountId: string,
  to: Tier,
  reason: string,
  at: Date,
): Promise<TierChange> {
  const account = await lockAccount(trx, accountId);
  if (!account) throw new Error(`changeTier: no account ${accountId}`);
  if (account.tier === to) return { changed: false, from: account.tier, to };
  await recordTierChange(trx, { accountId, from: account.tier, to, reason, at });
  onCommit(trx, () => invalidateAccountKeys(app, accountId));
  return { changed: true, from: account.tier, to };
}
