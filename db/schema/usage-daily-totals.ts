import type { ColumnType } from 'kysely';
import type { UsageApi } from './usage-events.js';

type BigintColumn = ColumnType<string, string | number | bigint, string | number | bigint>;

/** Per account, UTC day, model and API: totals of the ledger, maintained by a trigger on usage_events. */
export interface UsageDailyTotalsTable {
  account_id: string;
  /** The UTC day of the requests' created_at. */
  day: ColumnType<Date, Date | string, Date | string>;
  model: string;
  api: UsageApi;
  requests: BigintColumn;
  prompt_tokens: BigintColumn;
  completion_tokens: BigintColumn;
  /** Exact numeric sum of the paid-tier rows' cost_usd (free-tier usage is never billed). */
  cost_usd: string;
}
