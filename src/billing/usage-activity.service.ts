import type { Clock } from '../clock.js';
import { AppError, validationError } from '../errors.js';
import type { Db } from '../infra/db.js';
import type { UsageApi, UsageStatus } from '../../db/schema/index.js';
import { accountRequests, dailyUsage as dailyUsageRows } from '../usage/ledger.service.js';
import type { DailyUsageRow } from '../usage/usage.repository.js';
import { keyLabels, type KeyLabel } from '../accounts/keys.service.js';
import { normalizeDecimal, sumDecimals, toSafeInteger } from './money.js';
import { partsOf, type UsageParts } from './usage-parts.js';
import { addDays, dayKey, monthOf, parseDay, unixSeconds } from '../calendar.js';

// What the console's usage page reads: usage per UTC day and model, in all, per API and per key
// (from the trigger-kept daily totals, never a scan of the ledger), and the account's requests one
// page at a time, each naming its key.

/** Every API the ledger knows, in the order by_api lists them. */
export const USAGE_APIS: readonly UsageApi[] = ['chat.completions', 'responses'];

/** The longest period the daily endpoint answers for, in days (both ends counted). */
export const MAX_DAILY_USAGE_DAYS = 366;

export interface DailyFigures extends UsageParts {
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** Exact USD cost of paid-tier requests (free-tier requests cost nothing), as a decimal string. */
  cost_usd: string;
}

export type DayModelFigures = { date: string; model: string; api?: UsageApi; key_id?: string | null } & DailyFigures;

export interface DailyUsage {
  object: 'list';
  timezone: 'UTC';
  start_date: string;
  end_date: string;
  /**
   * One entry per day and model with usage (every API and key together), by day then model; with
   * group_by=api, one per day, model and API, each naming its API; with group_by=key, one per day,
   * model and key, each naming its key_id.
   */
  data: DayModelFigures[];
  totals: DailyFigures;
  /** The period's totals of each API, every API listed (USAGE_APIS order) even without usage. */
  by_api: ({ api: UsageApi } & DailyFigures)[];
  /** The period's totals of each key used in it, the costliest first, then the busiest. */
  by_key: (KeyLabel & DailyFigures)[];
}

export interface DailyUsageQuery {
  start_date?: string;
  end_date?: string;
  group_by?: 'api' | 'key';
}

/**
 * GET /v1/billing/usage/daily. UTC days, both inclusive; defaults: end_date today, start_date the
 * 1st of end_date's month (the current month to date). Rows per API or per key only when asked
 * (group_by): a reader of rows per day and model gets them as it always did, no larger. An end before the start, or a period of
 * more than MAX_DAILY_USAGE_DAYS days, is a 422.
 */
export async function dailyUsage(
  app: { db: Db; clock: Clock },
  accountId: string,
  q: DailyUsageQuery,
): Promise<DailyUsage> {
  const endDate = q.end_date ?? dayKey(app.clock.now());
  const startDate = q.start_date ?? dayKey(monthOf(parseDay(endDate)).start);
  if (endDate < startDate) {
    throw validationError([
      {
        loc: ['query', 'end_date'],
        msg: `end_date (${endDate}) must be on or after start_date (${startDate})`,
        type: 'value_error',
      },
    ]);
  }
  if (addDays(parseDay(startDate), MAX_DAILY_USAGE_DAYS) <= parseDay(endDate)) {
    throw validationError([
      {
        loc: ['query', 'start_date'],
        msg: `The period from ${startDate} to ${endDate} is longer than the ${MAX_DAILY_USAGE_DAYS} days allowed: ask at most ${MAX_DAILY_USAGE_DAYS} days at a time`,
        type: 'value_error',
      },
    ]);
  }
  const rows = await dailyUsageRows(app.db, accountId, startDate, endDate, q.group_by ?? 'model');
  const days = rows.filter((r) => r.set === 'day');
  const keys = rows.filter((r) => r.set === 'key');
  const labelOf = await keyLabels(
    app,
    accountId,
    keys.map((r) => r.key_id),
  );
  return {
    object: 'list',
    timezone: 'UTC',
    start_date: startDate,
    end_date: endDate,
    data: days.map((r) => ({
      date: r.date!,
      model: r.model!,
      ...(q.group_by === 'api' ? { api: r.api! } : q.group_by === 'key' ? { key_id: r.key_id } : {}),
      ...figuresOf([r]),
    })),
    totals: figuresOf(days),
    by_api: USAGE_APIS.map((api) => ({ api, ...figuresOf(rows.filter((r) => r.set === 'api' && r.api === api)) })),
    by_key: keys.map((r) => ({ ...labelOf(r.key_id), ...figuresOf([r]) })),
  };
}

/** The sums of some daily usage rows: integers checked to be exact in JSON, cost as an exact decimal. */
function figuresOf(rows: DailyUsageRow[]): DailyFigures {
  const sum = (pick: (r: DailyUsageRow) => string) =>
    toSafeInteger(rows.reduce((total, r) => total + BigInt(pick(r)), 0n));
  const prompt = sum((r) => r.prompt_tokens);
  const completion = sum((r) => r.completion_tokens);
  return {
    requests: sum((r) => r.requests),
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: toSafeInteger(prompt + completion),
    ...partsOf(rows),
    cost_usd: sumDecimals(rows.map((r) => r.cost_usd)),
  };
}

export interface RecentRequest {
  /** The id its client saw (chatcmpl-…, resp_… for the Responses API): the ledger's request id. */
  id: string;
  /** Unix seconds, the completion's `created`. */
  created: number;
  model: string;
  /** The API it came through. */
  api: UsageApi;
  stream: boolean;
  status: UsageStatus;
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** Of its prompt tokens, read from and written to a prompt cache; of its completion tokens, reasoning. */
  cached_tokens: number;
  cache_write_tokens: number;
  reasoning_tokens: number;
  /** What it cost, exact; "0" on the free tier. */
  cost_usd: string;
  /** The API key that made it, and that key's name (a revoked key keeps its name); null when none was recorded. */
  key_id: string | null;
  key_name: string | null;
}

export interface RecentRequests {
  object: 'list';
  data: RecentRequest[];
  has_more: boolean;
}

export interface RecentRequestsQuery {
  /** 1 to 100, as the query string carries it. */
  limit?: string;
  starting_after?: string;
}

export const DEFAULT_REQUESTS_PAGE = 20;

/**
 * GET /v1/billing/requests: the account's requests as the ledger has them, newest first, a page
 * at a time; `starting_after` is the last id of the previous page (404 when it is not one of the
 * account's requests).
 */
export async function recentRequests(
  app: { db: Db },
  accountId: string,
  q: RecentRequestsQuery,
): Promise<RecentRequests> {
  const limit = q.limit === undefined ? DEFAULT_REQUESTS_PAGE : Number(q.limit);
  const rows = await accountRequests(app.db, accountId, q.starting_after, limit + 1);
  if (rows === undefined) {
    throw new AppError('not_found', `No request ${q.starting_after} of this account is in the usage ledger.`, {
      code: 'request_not_found',
      param: 'starting_after',
    });
  }
  const page = rows.slice(0, limit);
  const labelOf = await keyLabels(
    app,
    accountId,
    page.map((r) => r.key_id),
  );
  return {
    object: 'list',
    data: page.map((r) => ({
      id: r.request_id,
      created: unixSeconds(r.created_at),
      model: r.model,
      api: r.api,
      stream: r.stream,
      status: r.status,
      prompt_tokens: r.prompt_tokens,
      completion_tokens: r.completion_tokens,
      total_tokens: r.prompt_tokens + r.completion_tokens,
      cached_tokens: r.cached_tokens,
      cache_write_tokens: r.cache_write_tokens,
      reasoning_tokens: r.reasoning_tokens,
      cost_usd: r.tier === 'paid' ? normalizeDecimal(r.cost_usd) : '0',
      key_id: r.key_id,
      key_name: labelOf(r.key_id).name,
    })),
    has_more: rows.length > limit,
  };
}
