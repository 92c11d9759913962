import { sql } from 'kysely';
import type { Db, Trx } from '../infra/db.js';
import { apiOf, type UsageEvent } from './usage-event.js';
import { ledgerCostUsd, usageParts } from './usage-cost.js';
import type { UsageApi } from '../../db/schema/index.js';

// The one repository of the usage ledger (usage_events) and of the monthly and daily totals its
// statement triggers keep current (usage_monthly_totals, usage_daily_totals): metering writes here,
// and billing reads, reserves rows for invoices and audits the totals here, so every query on the
// ledger sits in one place.

/**
 * Inserts ledger rows, ignoring request ids already recorded (a redelivered stream entry or a
 * re-run job never counts twice). Cost is ledgerCostUsd's exact decimal (each part of the prompt
 * at its own price), the same figure the answer's usage.cost and the spending limit's settlement
 * use, stored in numeric: never a float. Returns the events that were new.
 */
export async function insertUsageEvents(db: Db, events: UsageEvent[]): Promise<UsageEvent[]> {
  if (events.length === 0) return [];
  const rows = await db
    .insertInto('usage_events')
    .values(
      events.map((e) => ({
        request_id: e.request_id,
        account_id: e.account_id,
        model: e.model,
        tier: e.tier,
        status: e.status,
        prompt_tokens: e.prompt_tokens,
        completion_tokens: e.completion_tokens,
        ...usageParts(e),
        input_price_per_million: e.input_price_per_million,
        output_price_per_million: e.output_price_per_million,
        cached_input_price_per_million: e.cached_input_price_per_million ?? null,
        cache_write_price_per_million: e.cache_write_price_per_million ?? null,
        cache_write_1h_price_per_million: e.cache_write_1h_price_per_million ?? null,
        cost_usd: ledgerCostUsd(e),
        created_at: new Date(e.created_at),
        stream: e.stream === true,
        api: apiOf(e),
        key_id: e.key_id ?? null,
      })),
    )
    .onConflict((oc) => oc.column('request_id').doNothing())
    .returning('request_id')
    .execute();
  const inserted = new Set(rows.map((r) => r.request_id));
  // A batch may hold one request twice (an append repeated after a lost reply): it was inserted once.
  return events.filter((e) => inserted.delete(e.request_id));
}

// ---------------------------------------------------------------------------------------------
// Usage reads (from the trigger-maintained monthly totals)

/** The prompt cache's and reasoning's parts of a usage aggregate, as the reads return them. */
export interface UsagePartsRow {
  cached_tokens: string;
  cache_write_tokens: string;
  reasoning_tokens: string;
  /** Exact sum of what the prompt cache saved on paid-tier requests (negative when writes cost more). */
  cache_savings_usd: string;
}

/** The parts summed over daily totals (whose savings are the paid tier's already). */
const DAILY_PARTS = sql`sum(cached_tokens)::text as cached_tokens, sum(cache_write_tokens)::text as cache_write_tokens,
  sum(reasoning_tokens)::text as reasoning_tokens, sum(cache_savings_usd)::text as cache_savings_usd`;

export interface ModelUsageRow extends UsagePartsRow {
  model: string;
  requests: string;
  prompt_tokens: string;
  completion_tokens: string;
  /** Exact sum of paid-tier cost (free-tier usage costs nothing). */
  cost_usd: string;
  /** cost_usd rounded half up to the cent: what an invoice line for it would bill. */
  cost_cents: string;
  paid_requests: string;
}

/** One month of an account's usage per model (month = first day, UTC). */
export async function monthUsageByModel(db: Db, accountId: string, month: Date): Promise<ModelUsageRow[]> {
  const r = await sql<ModelUsageRow>`
    select model,
           sum(requests)::text as requests,
           sum(prompt_tokens)::text as prompt_tokens,
           sum(completion_tokens)::text as completion_tokens,
           coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)::text as cost_usd,
           round(coalesce(sum(cost_usd) filter (where tier = 'paid'), 0) * 100)::bigint::text as cost_cents,
           coalesce(sum(requests) filter (where tier = 'paid'), 0)::text as paid_requests,
           ${DAILY_PARTS}
      from usage_monthly_totals
     where account_id = ${accountId} and month = ${month.toISOString().slice(0, 10)}::date
     group by model
     order by model`.execute(db);
  return r.rows;
}

/**
 * The account's paid-tier spend in one month from the trigger-kept totals, in nano-USD rounded up
 * (the spending limit's unit, see usage-cost.ts), as a decimal integer string.
 */
export async function monthPaidCostNanoUsd(db: Db, accountId: string, month: Date): Promise<string> {
  const r = await sql<{ nano: string }>`
    select ceil(coalesce(sum(cost_usd), 0) * 1000000000)::bigint::text as nano
      from usage_monthly_totals
     where account_id = ${accountId} and month = ${month.toISOString().slice(0, 10)}::date and tier = 'paid'`.execute(
    db,
  );
  return r.rows[0]?.nano ?? '0';
}

/**
 * One API key's paid spend in a UTC month, in nano-USD rounded up, from the daily totals (which
 * hold paid cost only): at most 31 rows of the account's index range per model and API.
 */
export async function keyMonthPaidCostNanoUsd(
  db: Db,
  accountId: string,
  keyId: string,
  month: { start: Date; end: Date },
): Promise<string> {
  const r = await sql<{ nano: string }>`
    select ceil(coalesce(sum(cost_usd), 0) * 1000000000)::bigint::text as nano
      from usage_daily_totals
     where account_id = ${accountId} and key_id = ${keyId}
       and day >= ${month.start.toISOString().slice(0, 10)}::date and day < ${month.end.toISOString().slice(0, 10)}::date`.execute(
    db,
  );
  return r.rows[0]?.nano ?? '0';
}

export interface MonthUsageRow extends UsagePartsRow {
  month: string;
  requests: string;
  prompt_tokens: string;
  completion_tokens: string;
  cost_usd: string;
  /** Sum over models of each model's paid cost rounded to the cent (the invoice-line rule). */
  cost_cents: string;
}

/** Monthly totals of an account for the months from `from` to `to` inclusive (first days, UTC). */
export async function usageByMonth(db: Db, accountId: string, from: Date, to: Date): Promise<MonthUsageRow[]> {
  const r = await sql<MonthUsageRow>`
    with per_model as (
      select month, model,
             sum(requests) as requests,
             sum(prompt_tokens) as prompt_tokens,
             sum(completion_tokens) as completion_tokens,
             coalesce(sum(cost_usd) filter (where tier = 'paid'), 0) as cost_usd,
             sum(cached_tokens) as cached_tokens,
             sum(cache_write_tokens) as cache_write_tokens,
             sum(reasoning_tokens) as reasoning_tokens,
             sum(cache_savings_usd) as cache_savings_usd
        from usage_monthly_totals
       where account_id = ${accountId}
         and month between ${from.toISOString().slice(0, 10)}::date and ${to.toISOString().slice(0, 10)}::date
       group by month, model
    )
    select to_char(month, 'YYYY-MM') as month,
           sum(requests)::text as requests,
           sum(prompt_tokens)::text as prompt_tokens,
           sum(completion_tokens)::text as completion_tokens,
           sum(cost_usd)::text as cost_usd,
           sum(round(cost_usd * 100))::bigint::text as cost_cents,
           ${DAILY_PARTS}
      from per_model
     group by month
     order by month`.execute(db);
  return r.rows;
}

export interface KeyUsageRow extends UsagePartsRow {
  /** The API key (api_keys.id); null for usage recorded before keys were. */
  key_id: string | null;
  requests: string;
  /** Requests made on the paid tier. */
  paid_requests: string;
  prompt_tokens: string;
  completion_tokens: string;
  /** Exact sum of paid-tier cost (free-tier usage costs nothing). */
  cost_usd: string;
  /** cost_usd rounded half up to the cent. */
  cost_cents: string;
}

/**
 * An account's usage per API key over the UTC days [fromDay, toDay) (YYYY-MM-DD), from the daily
 * totals: the costliest key first, then the busiest, the usage of no recorded key last among equals.
 */
export async function usageByKey(db: Db, accountId: string, fromDay: string, toDay: string): Promise<KeyUsageRow[]> {
  const r = await sql<KeyUsageRow>`
    select key_id,
           sum(requests)::text as requests,
           sum(paid_requests)::text as paid_requests,
           sum(prompt_tokens)::text as prompt_tokens,
           sum(completion_tokens)::text as completion_tokens,
           sum(cost_usd)::text as cost_usd,
           round(sum(cost_usd) * 100)::bigint::text as cost_cents,
           ${DAILY_PARTS}
      from usage_daily_totals
     where account_id = ${accountId} and day >= ${fromDay}::date and day < ${toDay}::date
     group by key_id
     order by sum(cost_usd) desc, sum(requests) desc, key_id nulls last`.execute(db);
  return r.rows;
}

/** How the daily endpoint's entries are split: per day and model, and further per API or per key. */
export type DailyGrouping = 'model' | 'api' | 'key';

export interface DailyUsageRow extends UsagePartsRow {
  /** Which sum the row is: an entry of the period's days (`day`), or a period total of one API or one key. */
  set: 'day' | 'api' | 'key';
  /** YYYY-MM-DD, UTC; null in the period totals. */
  date: string | null;
  model: string | null;
  /** Set in a day entry split per API and in an API's total. */
  api: UsageApi | null;
  /** Set in a day entry split per key and in a key's total (null there too for usage of no recorded key). */
  key_id: string | null;
  requests: string;
  prompt_tokens: string;
  completion_tokens: string;
  /** Exact sum of paid-tier cost (free-tier usage costs nothing). */
  cost_usd: string;
}

/**
 * An account's usage over the UTC days [fromDay, toDay] (YYYY-MM-DD) from the daily totals, in one
 * read: per day and model (and API or key, by `grouping`), by day, model, then API or key (the
 * no-key entry last); then each API's totals, by API; then each key's, the costliest first, then
 * the busiest. Summed in Postgres, so a key more or less costs a few rows of work, not of transfer.
 */
export async function dailyUsage(
  db: Db,
  accountId: string,
  fromDay: string,
  toDay: string,
  grouping: DailyGrouping,
): Promise<DailyUsageRow[]> {
  const split = grouping === 'api' ? sql`, api` : grouping === 'key' ? sql`, key_id` : sql``;
  // grouping(day, api) is 0 or 1 in a day entry (api in it or not), 2 in an API's total, 3 in a key's.
  const r = await sql<DailyUsageRow>`
    select case grouping(day, api) when 2 then 'api' when 3 then 'key' else 'day' end as set,
           to_char(day, 'YYYY-MM-DD') as date, model, api, key_id,
           sum(requests)::text as requests,
           sum(prompt_tokens)::text as prompt_tokens,
           sum(completion_tokens)::text as completion_tokens,
           sum(cost_usd)::text as cost_usd,
           ${DAILY_PARTS}
      from usage_daily_totals
     where account_id = ${accountId} and day between ${fromDay}::date and ${toDay}::date
     group by grouping sets ((day, model${split}), (api), (key_id))
     order by grouping(day), grouping(api), day, model, api,
              case grouping(day, api) when 3 then sum(cost_usd) end desc,
              case grouping(day, api) when 3 then sum(requests) end desc,
              key_id nulls last`.execute(db);
  return r.rows;
}

// ---------------------------------------------------------------------------------------------
// The account's requests, newest first (keyset paging on usage_events_account_recent)

export interface LedgerRequestRow {
  request_id: string;
  created_at: Date;
  model: string;
  tier: 'free' | 'paid';
  stream: boolean;
  api: UsageApi;
  status: 'completed' | 'cancelled' | 'failed';
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  cache_write_tokens: number;
  reasoning_tokens: number;
  cost_usd: string;
  /** The API key that made it; null on rows recorded before keys were. */
  key_id: string | null;
}

/** The ledger row of one of the account's requests, by request id: where a page after it starts. */
export async function findLedgerRowId(db: Db, accountId: string, requestId: string): Promise<string | undefined> {
  const row = await db
    .selectFrom('usage_events')
    .select('id')
    .where('request_id', '=', requestId)
    .where('account_id', '=', accountId)
    .executeTakeFirst();
  return row?.id;
}

/**
 * Up to `limit` of the account's requests, newest first (created_at, then ledger id), after the
 * row `afterId` when given. A keyset on the index, never OFFSET: every page costs the same.
 */
export async function recentLedgerRows(
  db: Db,
  accountId: string,
  afterId: string | null,
  limit: number,
): Promise<LedgerRequestRow[]> {
  let q = db
    .selectFrom('usage_events')
    .select([
      'request_id',
      'created_at',
      'model',
      'tier',
      'stream',
      'api',
      'status',
      'prompt_tokens',
      'completion_tokens',
      'cached_tokens',
      'cache_write_tokens',
      'reasoning_tokens',
      'cost_usd',
      'key_id',
    ])
    .where('account_id', '=', accountId);
  if (afterId !== null) {
    q = q.where(
      sql<boolean>`(created_at, id) < (select c.created_at, c.id from usage_events c where c.id = ${afterId})`,
    );
  }
  return q.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).execute();
}

// ---------------------------------------------------------------------------------------------
// Rows reserved for an invoice (usage_events.invoice_id)

/**
 * Marks the account's unbilled paid-tier rows created in [from, to) (from = null: everything
 * before `to`) as belonging to the invoice. Rows of free-tier requests are never billable.
 */
export async function reserveUsage(
  trx: Trx,
  invoiceId: string,
  accountId: string,
  from: Date | null,
  to: Date,
): Promise<number> {
  let q = trx
    .updateTable('usage_events')
    .set({ invoice_id: invoiceId })
    .where('account_id', '=', accountId)
    .where('tier', '=', 'paid')
    .where('invoice_id', 'is', null)
    .where('created_at', '<', to);
  if (from !== null) q = q.where('created_at', '>=', from);
  const r = await q.executeTakeFirst();
  return Number(r.numUpdatedRows);
}

export interface LineAggregate {
  model: string;
  requests: number;
  prompt_tokens: string;
  completion_tokens: string;
  cost_usd: string;
  amount_cents: string;
}

/**
 * The invoice's lines, one per model, from the rows it reserved. THE rounding rule: each line is
 * its exact numeric sum rounded to the cent, half up (Postgres round() on a non-negative numeric
 * rounds halves away from zero, i.e. up); the invoice total is the sum of the rounded lines.
 */
export async function aggregateReservedUsage(trx: Trx, invoiceId: string): Promise<LineAggregate[]> {
  const r = await sql<LineAggregate>`
    select model,
           count(*)::int as requests,
           sum(prompt_tokens)::text as prompt_tokens,
           sum(completion_tokens)::text as completion_tokens,
           sum(cost_usd)::text as cost_usd,
           round(sum(cost_usd) * 100)::bigint::text as amount_cents
      from usage_events
     where invoice_id = ${invoiceId}
     group by model
     order by model`.execute(trx);
  return r.rows;
}

/** Gives rows of these models back to the unbilled pool (lines that would bill zero cents). */
export async function releaseUsage(trx: Trx, invoiceId: string, models: string[]): Promise<void> {
  if (models.length === 0) return;
  await trx
    .updateTable('usage_events')
    .set({ invoice_id: null })
    .where('invoice_id', '=', invoiceId)
    .where('model', 'in', models)
    .execute();
}

// ---------------------------------------------------------------------------------------------
// Usage totals audit

/** What paid rows saved through the prompt cache: at the input and output prices, less their cost (as the triggers sum it). */
const CACHE_SAVINGS = sql`coalesce(sum((prompt_tokens * input_price_per_million + completion_tokens * output_price_per_million) / 1000000 - cost_usd) filter (where tier = 'paid'), 0)`;

/**
 * Re-derives one month's totals from the ledger and replaces them where they differ. The table
 * lock makes concurrent inserts (whose trigger writes totals) wait, so no row is counted twice or
 * missed while the month is rebuilt. Returns the number of (account, model, tier) totals that differed.
 */
export async function rebuildMonthTotals(trx: Trx, monthStart: Date, monthEnd: Date): Promise<number> {
  await sql`lock table usage_monthly_totals in share row exclusive mode`.execute(trx);
  const month = monthStart.toISOString().slice(0, 10);
  const truth = sql`
    select account_id, ${month}::date as month, model, tier, count(*)::bigint as requests,
           sum(prompt_tokens)::bigint as prompt_tokens, sum(completion_tokens)::bigint as completion_tokens,
           sum(cost_usd) as cost_usd, sum(cached_tokens)::bigint as cached_tokens,
           sum(cache_write_tokens)::bigint as cache_write_tokens, sum(reasoning_tokens)::bigint as reasoning_tokens,
           ${CACHE_SAVINGS} as cache_savings_usd
      from usage_events
     where created_at >= ${monthStart} and created_at < ${monthEnd}
     group by account_id, model, tier`;
  const drift = await sql<{ n: string }>`
    with truth as (${truth}), kept as (
      select * from usage_monthly_totals where month = ${month}::date
    )
    select count(*)::text as n
      from truth t full join kept k using (account_id, model, tier)
     where (t.requests, t.prompt_tokens, t.completion_tokens, t.cost_usd, t.cached_tokens, t.cache_write_tokens,
            t.reasoning_tokens, t.cache_savings_usd)
           is distinct from (k.requests, k.prompt_tokens, k.completion_tokens, k.cost_usd, k.cached_tokens,
                             k.cache_write_tokens, k.reasoning_tokens, k.cache_savings_usd)`.execute(trx);
  const n = Number(drift.rows[0]?.n ?? 0);
  if (n > 0) {
    await sql`delete from usage_monthly_totals where month = ${month}::date`.execute(trx);
    await sql`
      insert into usage_monthly_totals (account_id, month, model, tier, requests, prompt_tokens, completion_tokens,
                                        cost_usd, cached_tokens, cache_write_tokens, reasoning_tokens, cache_savings_usd)
      ${truth}`.execute(trx);
  }
  return n;
}

/**
 * Re-derives the daily totals of the days in [monthStart, monthEnd) from the ledger and replaces
 * them where they differ, under the same lock discipline as rebuildMonthTotals. Returns the number
 * of (account, day, model, API, key) totals that differed.
 */
export async function rebuildDayTotals(trx: Trx, monthStart: Date, monthEnd: Date): Promise<number> {
  await sql`lock table usage_daily_totals in share row exclusive mode`.execute(trx);
  const from = monthStart.toISOString().slice(0, 10);
  const to = monthEnd.toISOString().slice(0, 10);
  const truth = sql`
    select account_id, (created_at at time zone 'UTC')::date as day, model, api, key_id, count(*)::bigint as requests,
           count(*) filter (where tier = 'paid')::bigint as paid_requests, sum(prompt_tokens)::bigint as prompt_tokens,
           sum(completion_tokens)::bigint as completion_tokens,
           coalesce(sum(cost_usd) filter (where tier = 'paid'), 0) as cost_usd,
           sum(cached_tokens)::bigint as cached_tokens, sum(cache_write_tokens)::bigint as cache_write_tokens,
           sum(reasoning_tokens)::bigint as reasoning_tokens, ${CACHE_SAVINGS} as cache_savings_usd
      from usage_events
     where created_at >= ${monthStart} and created_at < ${monthEnd}
     group by 1, 2, 3, 4, 5`;
  const drift = await sql<{ n: string }>`
    with truth as (select *, coalesce(key_id::text, '') as key from (${truth}) l), kept as (
      select *, coalesce(key_id::text, '') as key
        from usage_daily_totals where day >= ${from}::date and day < ${to}::date
    )
    select count(*)::text as n
      -- A full join needs an equality: the no-key rows meet as ''.
      from truth t full join kept k using (account_id, day, model, api, key)
     where (t.requests, t.paid_requests, t.prompt_tokens, t.completion_tokens, t.cost_usd, t.cached_tokens,
            t.cache_write_tokens, t.reasoning_tokens, t.cache_savings_usd)
           is distinct from (k.requests, k.paid_requests, k.prompt_tokens, k.completion_tokens, k.cost_usd,
                             k.cached_tokens, k.cache_write_tokens, k.reasoning_tokens, k.cache_savings_usd)`.execute(
    trx,
  );
  const n = Number(drift.rows[0]?.n ?? 0);
  if (n > 0) {
    await sql`delete from usage_daily_totals where day >= ${from}::date and day < ${to}::date`.execute(trx);
    await sql`
      insert into usage_daily_totals (account_id, day, model, api, key_id, requests, paid_requests, prompt_tokens,
                                      completion_tokens, cost_usd, cached_tokens, cache_write_tokens, reasoning_tokens,
                                      cache_savings_usd)
      ${truth}`.execute(trx);
  }
  return n;
}
