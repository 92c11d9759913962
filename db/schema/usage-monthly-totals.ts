import type { ColumnType } from 'kysely';
import type { Tier } from './accounts.js';

type BigintColumn = ColumnType<string, string | number | bigint, string | number | bigint>;

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
  /** Exact numeric sum of the rows' cost_usd. */
  cost_usd: string;
}
