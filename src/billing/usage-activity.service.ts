import type { Clock } from '../clock.js';
import { AppError, validationError } from '../errors.js';
import type { Db } from '../infra/db.js';
import type { UsageStatus } from '../../db/schema/index.js';
import { accountRequests, usageByDayAndModel } from '../usage/ledger.service.js';
import { normalizeDecimal, sumDecimals, toSafeInteger } from './money.js';
import { addDays, dayKey, monthOf, parseDay, unixSeconds } from '../calendar.js';

// What the console's usage page reads: usage per UTC day and model (from the trigger-kept daily
// totals, never a scan of the ledger), and the account's requests one page at a time.

/** The longest period the daily endpoint answers for, in days (both ends counted). */
export const MAX_DAILY_USAGE_DAYS = 366;

export interface DailyFigures {
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** Exact USD cost of paid-tier requests (free-tier requests cost nothing), as a decimal string. */
  cost_usd: string;
}

export interface DailyUsage {
  object: 'list';
  timezone: 'UTC';
  start_date: string;
  end_date: string;
  /** One entry per day and model with usage, by day then model. */
  data: ({ date: string; model: string } & DailyFigures)[];
  totals: DailyFigures;
}

export interface DailyUsageQuery {
  start_date?: string;
  end_date?: string;
}

/**
 * GET /v1/billing/usage/daily. UTC days, both inclusive; defaults: end_date today, start_date the
 * 1st of end_date's month (the current month to date). An end before the start, or a period of
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
  const rows = await usageByDayAndModel(app.db, accountId, startDate, endDate);
  const totals = { requests: 0, prompt_tokens: 0, completion_tokens: 0 };
  const data = rows.map((r) => {
    const entry = {
      date: r.date,
      model: r.model,
      requests: toSafeInteger(r.requests),
      prompt_tokens: toSafeInteger(r.prompt_tokens),
      completion_tokens: toSafeInteger(r.completion_tokens),
      total_tokens: 0,
      cost_usd: normalizeDecimal(r.cost_usd),
    };
    entry.total_tokens = toSafeInteger(entry.prompt_tokens + entry.completion_tokens);
    totals.requests += entry.requests;
    totals.prompt_tokens += entry.prompt_tokens;
    totals.completion_tokens += entry.completion_tokens;
    return entry;
  });
  return {
    object: 'list',
    timezone: 'UTC',
    start_date: startDate,
    end_date: endDate,
    data,
    totals: {
      requests: toSafeInteger(totals.requests),
      prompt_tokens: toSafeInteger(totals.prompt_tokens),
      completion_tokens: toSafeInteger(totals.completion_tokens),
      total_tokens: toSafeInteger(totals.prompt_tokens + totals.completion_tokens),
      cost_usd: sumDecimals(rows.map((r) => r.cost_usd)),
    },
  };
}

export interface RecentRequest {
  /** The completion's id as its client saw it (chatcmpl-…): the ledger's request id. */
  id: string;
  /** Unix seconds, the completion's `created`. */
  created: number;
  model: string;
  stream: boolean;
  status: UsageStatus;
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** What it cost, exact; "0" on the free tier. */
  cost_usd: string;
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
  return {
    object: 'list',
    data: rows.slice(0, limit).map((r) => ({
      id: r.request_id,
      created: unixSeconds(r.created_at),
      model: r.model,
      stream: r.stream,
      status: r.status,
      prompt_tokens: r.prompt_tokens,
      completion_tokens: r.completion_tokens,
      total_tokens: r.prompt_tokens + r.completion_tokens,
      cost_usd: r.tier === 'paid' ? normalizeDecimal(r.cost_usd) : '0',
    })),
    has_more: rows.length > limit,
  };
}
