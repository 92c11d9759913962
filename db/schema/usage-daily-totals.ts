import type { ColumnType } from 'kysely';

type BigintColumn = ColumnType<string, string | number | bigint, string | number | bigint>;

/** Per account, UTC day and model: totals of the ledger, maintained by a trigger on usage_events. */
export interface UsageDailyTotalsTable {
  account_id: string;
  /** The UTC day of the requests' created_at. */
  day: ColumnType<Date, Date | string, Date | string>;
  model: string;
  requests: BigintColumn;
  prompt_tokens: BigintColumn;
  completion_tokens: BigintColumn;
  /** Exact numeric sum of the paid-tier rows' cost_usd (free-tier usage is never billed). */
  cost_usd: string;
}
