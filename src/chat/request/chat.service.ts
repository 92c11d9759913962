import type { Account } from '../../accounts/account.js';
import { assertModelAllowed, type ApiKeyGrant } from '../../accounts/key-grant.js';
import type { Catalog, CatalogModel } from '../../catalog/catalog.js';
import type { Clock } from '../../clock.js';
import type { Config } from '../../config.js';
import type { ProviderRegistry } from '../../providers/registry.js';
import { AppError, validationError } from '../../errors.js';
import {
  countPromptTokens,
  IMAGE_TOKENS,
  INLINE_TOKENIZE_MAX_CHARS,
  jsonSize,
  promptChars,
} from '../../providers/tokenizer.js';
import { imagesOf, textOf } from '../../providers/messages.js';
import { longestCacheTtl } from '../../providers/cache-control.js';
import type { CompletionParams, Provider } from '../../providers/types.js';
import { UNSUPPORTED_OPENAI_FIELDS, type ChatCompletionRequest } from './chat.schema.js';
import { pricesOf, type PreparedJob } from '../relay/completion-job.js';
import type { SpendCheck } from '../../limits/limiter.service.js';
import { nanoUsdOf, requestCostNanoUsd } from '../../usage/usage-cost.js';
import { completionId, responseId } from '../relay/protocol.js';
import type { ResponsesWire } from '../relay/completion-job.js';
import { completionParamsOf } from './request-forms.js';

/**
 * A prompt too large to tokenize on the web tier's event loop (INLINE_TOKENIZE_MAX_CHARS) is
 * estimated as UTF-8 bytes / 3, generous on purpose for the reservation; the worker settles to the
 * real count.
 */
function estimatePromptTokens(params: CompletionParams): number {
  const { messages, tools, response_format } = params;
  if (promptChars(messages, params, INLINE_TOKENIZE_MAX_CHARS) <= INLINE_TOKENIZE_MAX_CHARS)
    return countPromptTokens(messages, params);
  // Tool calls, tool definitions and a json_schema count by their JSON text, measured without
  // writing it; images by IMAGE_TOKENS each.
  const utf8 = (text: string) => Buffer.byteLength(text);
  let bytes = 0;
  for (const m of messages)
    bytes += utf8(textOf(m.content)) + (m.tool_calls ? jsonSize(m.tool_calls, Infinity, utf8) : 0);
  if (tools) bytes += jsonSize(tools, Infinity, utf8);
  if (response_format) bytes += jsonSize(response_format, Infinity, utf8);
  let images = 0;
  for (const m of messages) images += imagesOf(m.content).length;
  return Math.ceil(bytes / 3) + 4 * messages.length + images * IMAGE_TOKENS;
}

/** A null value means "not set" in OpenAI's API, so only a set value is refused. */
function refuseUnsupportedFields(req: ChatCompletionRequest): void {
  const body = req as unknown as Record<string, unknown>;
  const issues = Object.entries(UNSUPPORTED_OPENAI_FIELDS)
    .filter(([field, rule]) => body[field] !== undefined && body[field] !== null && rule.refuse(body[field]))
    .map(([field, rule]) => ({ loc: ['body', field], msg: rule.msg, type: 'extra_forbidden' }));
  if (issues.length > 0) throw validationError(issues);
}

/** What preparing a request works with: the catalog, the providers' rules, the reservation default, the clock. */
export interface PrepareDeps {
  catalog: Catalog;
  providers: ProviderRegistry;
  clock: Clock;
  config: Pick<Config, 'limits'>;
}

/**
 * Everything decided before a request is queued: no OpenAI parameter the service cannot honour
 * (422), the model exists (404), the tier may use it (403) and so may the API key (403
 * model_not_allowed), the persona exists (422), the
 * provider can honour every field (422) and is configured (503), and how many tokens to reserve
 * in the daily quota.
 */
export function prepareCompletion(
  app: PrepareDeps,
  account: Account,
  req: ChatCompletionRequest,
  relayTo: string,
  wire?: ResponsesWire,
  /** The API key's own settings, when an API key made the request: its allow-list is checked here. */
  key?: ApiKeyGrant,
): PreparedJob {
  refuseUnsupportedFields(req);
  const resumable = resumableOf(req);
  const model = modelFor(app.catalog, account, req, key);
  const persona = personaOf(app.catalog, req);

  const params = completionParamsOf(req, model);
  // The local model's prompt cache is the account's own (OpenAI's is per organisation).
  params.cache_scope = account.id;

  // Checked before the persona's system prompt goes in, so an error names the client's own message index.
  const provider = app.providers.for(model);
  provider.check(params);
  if (persona !== undefined) params.messages.unshift({ role: 'system', content: persona });

  const { promptTokens, reservedTokens } = reservationOf(params, provider, app.config);
  return {
    id: wire ? responseId(relayTo) : completionId(relayTo),
    relayTo,
    accountId: account.id,
    ...(key ? { keyId: key.id } : {}),
    tier: account.tier,
    model: jobModelOf(model),
    params,
    stream: req.stream === true,
    includeUsage: req.stream === true && req.stream_options?.include_usage === true,
    resumable,
    created: Math.floor(app.clock.now().getTime() / 1000),
    promptTokens,
    reservedTokens,
    ...(wire ? { wire } : {}),
  };
}

/** Whether the client may resume the stream: only a stream can be. */
function resumableOf(req: ChatCompletionRequest): boolean {
  const resumable = req.stream_options?.resumable === true;
  if (resumable && req.stream !== true) {
    throw validationError([
      {
        loc: ['body', 'stream_options', 'resumable'],
        msg: 'Only a stream can be resumed: set stream to true, or leave resumable out',
        type: 'value_error',
      },
    ]);
  }
  return resumable;
}

/** The model asked for, if it exists and both the account's tier and the API key may use it. */
function modelFor(catalog: Catalog, account: Account, req: ChatCompletionRequest, key?: ApiKeyGrant): CatalogModel {
  const model = catalog.find(req.model);
  if (!model) {
    throw new AppError(
      'not_found',
      `The model \`${req.model}\` does not exist or you do not have access to it. GET /v1/models lists the models your tier may use.`,
      {
        code: 'model_not_found',
        param: 'model',
      },
    );
  }
  if (!model.tiers.includes(account.tier)) {
    throw new AppError(
      'permission',
      `The model \`${model.id}\` needs the paid tier. Upgrade with POST /v1/subscription/upgrade.`,
      {
        code: 'model_requires_paid_tier',
        param: 'model',
      },
    );
  }
  assertModelAllowed(key, model.id);
  return model;
}

/** The system prompt of the persona asked for, if any. */
function personaOf(catalog: Catalog, req: ChatCompletionRequest): string | undefined {
  if (req.persona == null) return undefined;
  const persona = catalog.persona(req.persona);
  if (persona === undefined) {
    const known = Object.keys(catalog.personas);
    throw validationError([
      {
        loc: ['body', 'persona'],
        msg: `Unknown persona '${req.persona}'; available: ${known.join(', ') || 'none'}`,
        type: 'value_error',
      },
    ]);
  }
  return persona;
}

/** The tokens reserved in the daily quota: the prompt's estimate and the completion budget of every choice. */
function reservationOf(
  params: CompletionParams,
  provider: Pick<Provider, 'maxChoices'>,
  config: Pick<Config, 'limits'>,
): { promptTokens: number; reservedTokens: number } {
  // Where a provider makes fewer choices per call than n, each of the n calls bills the prompt.
  const n = params.n ?? 1;
  const calls = n > (provider.maxChoices ?? n) ? n : 1;
  const promptTokens = estimatePromptTokens(params) * calls;
  const completionBudget = (params.max_tokens ?? config.limits.defaultCompletionReservation) * n;
  return { promptTokens, reservedTokens: promptTokens + completionBudget };
}

/** The model as the job carries it: where it is served and its prices as they were at admission. */
function jobModelOf(model: CatalogModel): PreparedJob['model'] {
  return {
    id: model.id,
    provider: model.provider,
    upstream_model: model.upstream_model,
    input_price_per_million: model.input_price_per_million,
    output_price_per_million: model.output_price_per_million,
    cached_input_price_per_million: model.cached_input_price_per_million,
    cache_write_price_per_million: model.cache_write_price_per_million,
    cache_write_1h_price_per_million: model.cache_write_1h_price_per_million,
  };
}

/**
 * The spending limits a request is admitted against: the account's own and its API key's, on the
 * paid tier (free requests cost nothing), reserving the most the request can cost: its prompt
 * tokens and its completion budget (max_tokens, or the default reservation, for each of n
 * choices) at the model's prices, in the ledger's arithmetic.
 */
export function spendCheckOf(
  account: Pick<Account, 'tier' | 'monthly_spend_limit_usd'>,
  job: PreparedJob,
  key?: Pick<ApiKeyGrant, 'monthly_spend_limit_usd'>,
): SpendCheck | undefined {
  const accountLimit = account.monthly_spend_limit_usd;
  if (account.tier !== 'paid' || (accountLimit === null && (key?.monthly_spend_limit_usd ?? null) === null))
    return undefined;
  // A prompt marked for caching may be written to the cache whole, at the write price of its TTL,
  // which is never below the input price (the catalog's rule); cache reads only cost less.
  const ttl = longestCacheTtl(job.params);
  const reserveNanoUsd = requestCostNanoUsd({
    tier: job.tier,
    prompt_tokens: job.promptTokens,
    completion_tokens: job.reservedTokens - job.promptTokens,
    cache_write_tokens: ttl ? job.promptTokens : 0,
    cache_write_1h_tokens: ttl === '1h' ? job.promptTokens : 0,
    ...pricesOf(job.model),
  });
  return {
    limitNanoUsd: accountLimit === null ? null : nanoUsdOf(accountLimit),
    reserveNanoUsd,
    admittedAt: job.created * 1000,
  };
}
