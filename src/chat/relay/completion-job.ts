import type { Tier, UsageStatus } from '../../../db/schema/index.js';
import type { UsageEvent } from '../../usage/usage-event.js';
import type { CompletionParams, TokenUsage } from '../../providers/types.js';
import type { TraceCarrier } from '../../infra/tracing.js';
import type { SettleInput } from '../../limits/limiter.service.js';
import { requestCostNanoUsd, usageParts } from '../../usage/usage-cost.js';

/** On a job: frame the answer as the Responses API's Response and stream events (see chat/stream/presenters/). */
export interface ResponsesWire {
  format: 'responses';
  /**
   * The request's settings as the Response echoes them, in OpenAI's names and with its defaults
   * (the tools are echoed from the job's own, not carried twice).
   */
  echo: Record<string, unknown>;
  /** store: true (the default): the worker keeps the answer with `input`, for retrieval and follow-ups. */
  store: boolean;
  /** The request's own input as stored items, each with an id (only when it is stored). */
  input?: Record<string, unknown>[];
  /**
   * background: true: the web answers at once (status queued) and leaves the job to run to its end
   * with nobody attached; it is always stored and streamed into its relay log, so GET
   * /v1/responses/{id} (and ?stream=true) follow it and POST …/cancel stops it.
   */
  background?: boolean;
}

/** What the web tier queues for a worker: everything needed to run and bill the request. */
export interface CompletionJob {
  /** chatcmpl-… (resp_… for the Responses API): the completion id, the job id and the usage ledger's request id. */
  id: string;
  /** The web process whose channel receives this request's relay messages. */
  relayTo: string;
  /** The completion queue shard it was queued on; its usage goes to the same shard's stream. */
  shard: number;
  accountId: string;
  /** The API key that made the request (api_keys.id): usage and the key's own spending limit count it. */
  keyId?: string;
  /** The tier the request was admitted under; billing uses it. */
  tier: Tier;
  model: {
    id: string;
    provider: string;
    upstream_model: string;
    input_price_per_million: string;
    output_price_per_million: string;
    /** The cache prices; absent from jobs queued by a web process that predates them (then the input price). */
    cached_input_price_per_million?: string;
    cache_write_price_per_million?: string;
    cache_write_1h_price_per_million?: string;
  };
  params: CompletionParams;
  stream: boolean;
  includeUsage: boolean;
  /** stream_options.resumable: a disconnect leaves it running for the grace period instead of cancelling it. */
  resumable: boolean;
  /**
   * The web process acknowledges what it hands to the client (relay/acks.ts), so a job stopped for
   * its death bills by that. Absent from jobs of web processes that do not (an older version
   * during a rolling deploy): those are billed what their subscription took.
   */
  acks?: boolean;
  /** Unix seconds, the `created` field of every chunk. */
  created: number;
  /** Prompt tokens counted at admission (the reservation), used when the upstream reports none. */
  promptTokens: number;
  /** Tokens reserved in the daily quota at admission, settled when the request ends. */
  reservedTokens: number;
  /** The wire format to frame the answer in when it is not chat completions' (chat/stream/presenters/). */
  wire?: ResponsesWire;
  /** The web request's trace context, when tracing is on: the worker's spans join its trace. */
  trace?: TraceCarrier;
}

/** A job as the web tier prepares it, before the dispatcher picks its queue shard. */
export type PreparedJob = Omit<CompletionJob, 'shard'>;

/** The ledger entry for a job: prices as admitted, time as admitted, tokens as counted at its end. */
export function usageOf(job: CompletionJob, status: UsageStatus, counts: TokenUsage): UsageEvent {
  return {
    request_id: job.id,
    account_id: job.accountId,
    model: job.model.id,
    tier: job.tier,
    status,
    prompt_tokens: counts.prompt_tokens,
    completion_tokens: counts.completion_tokens,
    ...usageParts(counts),
    ...pricesOf(job.model),
    created_at: new Date(job.created * 1000).toISOString(),
    stream: job.stream,
    api: job.wire?.format === 'responses' ? 'responses' : 'chat.completions',
    ...(job.keyId ? { key_id: job.keyId } : {}),
  };
}

/** A job's prices as the ledger records them (the cache prices only when the job carries them). */
export function pricesOf(
  model: CompletionJob['model'],
): Pick<
  UsageEvent,
  | 'input_price_per_million'
  | 'output_price_per_million'
  | 'cached_input_price_per_million'
  | 'cache_write_price_per_million'
  | 'cache_write_1h_price_per_million'
> {
  return {
    input_price_per_million: model.input_price_per_million,
    output_price_per_million: model.output_price_per_million,
    ...(model.cached_input_price_per_million !== undefined
      ? { cached_input_price_per_million: model.cached_input_price_per_million }
      : {}),
    ...(model.cache_write_price_per_million !== undefined
      ? { cache_write_price_per_million: model.cache_write_price_per_million }
      : {}),
    ...(model.cache_write_1h_price_per_million !== undefined
      ? { cache_write_1h_price_per_million: model.cache_write_1h_price_per_million }
      : {}),
  };
}

/**
 * How a job's reservations are settled: with the tokens and cost of its usage, or with nothing
 * when it never ran (withdrawn from the queue). The month is the one it was admitted in, as in the ledger.
 */
export function settlementOf(
  job: Pick<CompletionJob, 'id' | 'accountId' | 'created' | 'keyId'>,
  usage?: UsageEvent,
): SettleInput {
  return {
    accountId: job.accountId,
    ...(job.keyId ? { keyId: job.keyId } : {}),
    requestId: job.id,
    actualTokens: usage ? usage.prompt_tokens + usage.completion_tokens : 0,
    spend: { costNanoUsd: usage ? requestCostNanoUsd(usage) : 0n, admittedAt: job.created * 1000 },
  };
}
