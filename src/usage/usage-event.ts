import type { Tier, UsageApi, UsageStatus } from '../../db/schema/index.js';

/** One completion request's usage, as the worker records it and the ledger stores it. */
export interface UsageEvent {
  request_id: string;
  account_id: string;
  model: string;
  tier: Tier;
  status: UsageStatus;
  /** Every prompt token, cached and cache-written ones included (OpenAI's meaning). */
  prompt_tokens: number;
  /** Every completion token, reasoning included. */
  completion_tokens: number;
  /**
   * The parts of those counts the provider reported (TokenUsage): prompt tokens read from and
   * written to its prompt cache, the written ones with the 1-hour TTL, and reasoning tokens.
   * Absent (0) in entries a worker appended before they were carried.
   */
  cached_tokens?: number;
  cache_write_tokens?: number;
  cache_write_1h_tokens?: number;
  reasoning_tokens?: number;
  /** Decimal strings, the catalog's prices at request time. */
  input_price_per_million: string;
  output_price_per_million: string;
  /** The cache prices at request time; absent, the input price (entries without cached or written tokens). */
  cached_input_price_per_million?: string;
  cache_write_price_per_million?: string;
  cache_write_1h_price_per_million?: string;
  /** ISO time the request was admitted. */
  created_at: string;
  /** The request asked for a stream; absent in entries a worker appended before this was carried (false). */
  stream?: boolean;
  /** The API the request came through; absent in entries a worker appended before this was carried (see apiOf). */
  api?: UsageApi;
  /** The API key that made the request (api_keys.id); absent in entries a worker appended before this was carried. */
  key_id?: string;
}

/**
 * The API an event's request came through. An entry without it is from a worker that predates it:
 * a Responses request's id is `resp_…` (chat/relay/protocol.ts), any other is a chat completion.
 */
export const apiOf = (e: Pick<UsageEvent, 'api' | 'request_id'>): UsageApi =>
  e.api ?? (e.request_id.startsWith('resp_') ? 'responses' : 'chat.completions');
