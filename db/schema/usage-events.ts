import type { ColumnType, Generated } from 'kysely';
import type { Tier } from './accounts.js';

export type UsageStatus = 'completed' | 'cancelled' | 'failed';

/** The public API a request came through: POST /v1/chat/completions or POST /v1/responses. */
export type UsageApi = 'chat.completions' | 'responses';

/** The usage ledger: one row per completion request, idempotent on request_id. */
export interface UsageEventsTable {
  id: Generated<string>;
  request_id: string;
  account_id: string;
  model: string;
  /** The tier the request ran under; only paid-tier rows are billable. */
  tier: Tier;
  status: UsageStatus;
  prompt_tokens: number;
  completion_tokens: number;
  /** USD per 1M tokens at request time, exact decimal (numeric) carried as a string. */
  input_price_per_million: string;
  output_price_per_million: string;
  /** Parts of prompt_tokens: read from the provider's prompt cache, written to it (of which with the 1-hour TTL). */
  cached_tokens: ColumnType<number, number | undefined, number>;
  cache_write_tokens: ColumnType<number, number | undefined, number>;
  cache_write_1h_tokens: ColumnType<number, number | undefined, number>;
  /** Part of completion_tokens: what the model spent thinking. */
  reasoning_tokens: ColumnType<number, number | undefined, number>;
  /** The cache prices at request time; null on rows without them (recorded before they were kept). */
  cached_input_price_per_million: ColumnType<string | null, string | null | undefined, string | null>;
  cache_write_price_per_million: ColumnType<string | null, string | null | undefined, string | null>;
  cache_write_1h_price_per_million: ColumnType<string | null, string | null | undefined, string | null>;
  /** Exact USD cost of the request (numeric, unrounded); rounding happens per invoice line. */
  cost_usd: string;
  /** The request asked for a stream (false on rows recorded before this was kept). */
  stream: ColumnType<boolean, boolean | undefined, boolean>;
  /** Which API the request came through ('chat.completions' on rows recorded before this was kept, except `resp_…` ids). */
  api: ColumnType<UsageApi, UsageApi | undefined, UsageApi>;
  /** The API key that made the request (api_keys.id); null on rows recorded before it was kept. */
  key_id: ColumnType<string | null, string | null | undefined, string | null>;
  created_at: Date;
  recorded_at: ColumnType<Date, Date | undefined, never>;
  invoice_id: string | null;
}
