import type { Db } from '../infra/db.js';
import type { Month } from '../calendar.js';
import { keyMonthPaidCostNanoUsd, monthPaidCostNanoUsd } from './usage.repository.js';

/**
 * What the ledger says an account spent in a month, in nano-USD: where the spending limit starts
 * a month from when Redis has no figure for it (the month's first limited request, or Redis lost
 * its data). It misses only requests whose usage is still on its way to the ledger. With `keyId`,
 * what that API key of the account spent, for the key's own limit.
 */
export async function ledgerSpendNanoUsd(db: Db, accountId: string, month: Month, keyId?: string): Promise<bigint> {
  return BigInt(
    keyId === undefined
      ? await monthPaidCostNanoUsd(db, accountId, month.start)
      : await keyMonthPaidCostNanoUsd(db, accountId, keyId, month),
  );
}
