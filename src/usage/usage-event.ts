import type { Tier, UsageApi, UsageStatus } from '../../db/schema/index.js';

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
  /** The API the request came through; absent in entries a worker appended before this was carried (see apiOf). */
  api?: UsageApi;
  /** The API key that made the request (api_keys.id); absent in entries a worker appended before this was carried. */
  key_id?: string;
}

/**
 * The API an event's request came through. An entry without it is from a worker that predates it:
 * a Responses request's id is `resp_…` (relay-protocol.ts), any other is a chat completion.
 */
export const apiOf = (e: Pick<UsageEvent, 'api' | 'request_id'>): UsageApi =>
  e.api ?? (e.request_id.startsWith('resp_') ? 'responses' : 'chat.completions');
