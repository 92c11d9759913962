import type { Tier, UsageStatus } from '../../db/schema/index.js';

/** One completion request's usage, as the worker records it and the ledger stores it. */
export interface UsageEvent {
  request_id: string;
  account_id: string;
  model: string;
  tier: Tier;
  status: UsageStatus;
  prompt_tokens: number;
  completion_tokens: number;
  /** Decimal strings, the catalog's prices at request time. */
  input_price_per_million: string;
  output_price_per_million: string;
  /** ISO time the request was admitted. */
  created_at: string;
  /** The request asked for a stream; absent in entries a worker appended before this was carried (false). */
  stream?: boolean;
}
