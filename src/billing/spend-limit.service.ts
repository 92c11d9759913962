import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { AppError, validationError } from '../errors.js';
import { onCommit, transaction, type Db } from '../infra/db.js';
import type { RedisClient } from '../infra/redis.js';
import type { Account } from '../accounts/account.js';
import { lockAccount, setMonthlySpendLimit } from '../accounts/account-billing.service.js';
import { invalidateAccountKeys } from '../accounts/auth.service.js';
import type { Limiter } from '../limits/limiter.service.js';
import { ledgerSpendNanoUsd } from '../usage/month-spend.service.js';
import { nanoUsdOf, usdOfNano } from '../usage/usage-cost.js';
import { monthOf } from '../calendar.js';
import { MAX_MONTHLY_LIMIT_USD } from './spend-limit.schema.js';

/** What reading the limit works with: the account's limit, the limiter's month figures, the ledger behind them. */
export interface SpendLimitReadDeps {
  db: Db;
  clock: Clock;
  limiter: Limiter;
}

/** What changing it works with besides: what tells every web process the account changed. */
export interface SpendLimitDeps extends SpendLimitReadDeps {
  redis: RedisClient;
  config: Pick<Config, 'redis'>;
  log: Logger;
}

export interface SpendLimitView {
  object: 'billing.spend_limit';
  monthly_limit_usd: string | null;
  enforced: boolean;
  month: string;
  spent_usd: string;
  reserved_usd: string;
  remaining_usd: string | null;
  resets_at: string;
}

/**
 * The limit and this month's figures as the limiter counts them (settled spend and live
 * reservations, from Redis), or, when Redis has no figure for the month (no limited request yet,
 * or Redis is out of reach), the ledger's spend and nothing reserved.
 */
export async function spendLimitView(
  app: SpendLimitReadDeps,
  account: Pick<Account, 'id' | 'tier' | 'monthly_spend_limit_usd'>,
): Promise<SpendLimitView> {
  const month = monthOf(app.clock.now());
  const held = await app.limiter.monthSpend(account.id, month).catch(() => undefined);
  const spent = held?.spentNanoUsd ?? (await ledgerSpendNanoUsd(app.db, account.id, month));
  const reserved = held?.heldNanoUsd ?? 0n;
  const limit = account.monthly_spend_limit_usd;
  let remaining: string | null = null;
  if (limit !== null) {
    const left = nanoUsdOf(limit) - spent - reserved;
    remaining = usdOfNano(left > 0n ? left : 0n);
  }
  return {
    object: 'billing.spend_limit',
    monthly_limit_usd: limit,
    enforced: limit !== null && account.tier === 'paid',
    month: month.key,
    spent_usd: usdOfNano(spent),
    reserved_usd: usdOfNano(reserved),
    remaining_usd: remaining,
    resets_at: month.end.toISOString(),
  };
}

/** 0.01 to MAX_MONTHLY_LIMIT_USD; the schema has already checked the form (digits, two decimals at most). */
function checkRange(limitUsd: string): void {
  const nano = nanoUsdOf(limitUsd);
  const loc = ['body', 'monthly_limit_usd'];
  if (nano < nanoUsdOf('0.01'))
    throw validationError([{ loc, msg: 'Input should be greater than or equal to 0.01', type: 'greater_than_equal' }]);
  if (nano > nanoUsdOf(String(MAX_MONTHLY_LIMIT_USD)))
    throw validationError([
      { loc, msg: `Input should be less than or equal to ${MAX_MONTHLY_LIMIT_USD}`, type: 'less_than_equal' },
    ]);
}

/**
 * Sets or removes the limit under the account's row lock, so a concurrent downgrade cannot slip
 * between the tier check and the write; once committed, every web process re-reads the account
 * (its version is bumped) and admits the next request against the new limit.
 */
async function writeLimit(app: SpendLimitDeps, accountId: string, limitUsd: string | null): Promise<Account> {
  return transaction(app.db, async (trx) => {
    const account = await lockAccount(trx, accountId);
    if (!account) throw new AppError('not_found', 'Account not found', { code: 'account_not_found' });
    if (limitUsd !== null && account.tier !== 'paid') {
      throw new AppError(
        'permission',
        'A spending limit is for the paid tier: free-tier usage costs nothing. Upgrade with POST /v1/subscription/upgrade first.',
        {
          code: 'spend_limit_requires_paid_tier',
          param: 'monthly_limit_usd',
        },
      );
    }
    const updated = await setMonthlySpendLimit(trx, accountId, limitUsd, app.clock.now());
    onCommit(trx, () => invalidateAccountKeys(app, accountId));
    return updated;
  });
}

/** PUT /v1/billing/spend-limit: 422 out of range, 403 on the free tier. */
export async function setSpendLimit(
  app: SpendLimitDeps,
  accountId: string,
  body: { monthly_limit_usd: string },
): Promise<SpendLimitView> {
  checkRange(body.monthly_limit_usd);
  return spendLimitView(app, await writeLimit(app, accountId, body.monthly_limit_usd));
}

/** DELETE /v1/billing/spend-limit: no limit from the next request on (allowed on either tier). */
export async function removeSpendLimit(app: SpendLimitDeps, accountId: string): Promise<SpendLimitView> {
  return spendLimitView(app, await writeLimit(app, accountId, null));
}
