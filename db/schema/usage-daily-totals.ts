import type { ColumnType } from 'kysely';
import type { UsageApi } from './usage-events.js';

type BigintColumn = ColumnType<string, string | number | bigint, string | number | bigint>;
type AddedBigintColumn = ColumnType<string, string | number | bigint | undefined, string | number | bigint>;

/** Per account, UTC day, model, API and key: totals of the ledger, maintained by a trigger on usage_events. */
export interface UsageDailyTotalsTable {
  account_id: string;
  /** The UTC day of the requests' created_at. */
  day: ColumnType<Date, Date | string, Date | string>;
  model: string;
  api: UsageApi;
  /** The API key (api_keys.id); null for usage recorded before keys were (NULLS NOT DISTINCT in its key). */
  key_id: string | null;
  requests: BigintColumn;
  /** How many of the requests ran on the paid tier (the billable ones). */
  paid_requests: ColumnType<string, string | number | bigint | undefined, string | number | bigint>;
  prompt_tokens: BigintColumn;
  completion_tokens: BigintColumn;
  /** Sums of the ledger's cached_tokens, cache_write_tokens and reasoning_tokens. */
  cached_tokens: AddedBigintColumn;
  cache_write_tokens: AddedBigintColumn;
  reasoning_tokens: AddedBigintColumn;
  /** What the paid rows would have cost with every prompt token at the input price, less their cost (numeric). */
  cache_savings_usd: ColumnType<string, string | undefined, string>;
  /** Exact numeric sum of the paid-tier rows' cost_usd (free-tier usage is never billed). */
  cost_usd: string;
}
