import type { Tier } from '../../db/schema/index.js';
import type { CompletionParams } from '../providers/types.js';

/** What the web tier queues for a worker: everything needed to run and bill the request. */
export interface CompletionJob {
  /** chatcmpl-…: the completion id, the job id and the usage ledger's request id. */
  id: string;
  /** The web process whose pattern subscription receives this request's relay messages. */
  relayTo: string;
  accountId: string;
  /** The tier the request was admitted under; billing uses it. */
  tier: Tier;
  model: {
    id: string;
    provider: string;
    upstream_model: string;
    input_price_per_million: string;
    output_price_per_million: string;
  };
  params: CompletionParams;
  stream: boolean;
  includeUsage: boolean;
  /** Unix seconds, the `created` field of every chunk. */
  created: number;
  /** Prompt tokens counted at admission (the reservation), used when the upstream reports none. */
  promptTokens: number;
  /** Tokens reserved in the daily quota at admission, settled when the request ends. */
  reservedTokens: number;
}
