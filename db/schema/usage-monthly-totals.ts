import type { ColumnType } from 'kysely';
import type { Tier } from './accounts.js';

type BigintColumn = ColumnType<string, string | number | bigint, string | number | bigint>;
type AddedBigintColumn = ColumnType<string, string | number | bigint | undefined, string | number | bigint>;

/** Per account, UTC month, model and tier: totals of the ledger, maintained by a trigger on usage_events. */
export interface UsageMonthlyTotalsTable {
  account_id: string;
  /** First day of the UTC month. */
  month: ColumnType<Date, Date | string, Date | string>;
  model: string;
  tier: Tier;
  requests: BigintColumn;
  prompt_tokens: BigintColumn;
  completion_tokens: BigintColumn;
  /** Sums of the ledger's cached_tokens, cache_write_tokens and reasoning_tokens. */
  cached_tokens: AddedBigintColumn;
  cache_write_tokens: AddedBigintColumn;
  reasoning_tokens: AddedBigintColumn;
  /** What the paid rows would have cost with every prompt token at the input price, less their cost (numeric). */
  cache_savings_usd: ColumnType<string, string | undefined, string>;
  /** Exact numeric sum of the rows' cost_usd. */
  cost_usd: string;
}
