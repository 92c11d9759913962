import { sql, type Kysely } from 'kysely';

// The prompt cache and reasoning in the ledger, as the providers count them:
// - usage_events: cached_tokens (read from the cache), cache_write_tokens (written to it, of which
//   cache_write_1h_tokens with the 1-hour TTL) and reasoning_tokens, all parts of prompt_tokens and
//   completion_tokens, never added to them; and the cache prices the request was billed at.
// - both totals tables sum the three counts, and cache_savings_usd: what the paid rows would have
//   cost with every prompt token at the input price, less what they cost.
// Existing rows get zeros, which is what they are: their cost was prompt × input price, so their
// savings are exactly 0 and every total stays as it was. Adding a column with a constant default
// rewrites nothing (Postgres 11+).

const TRIGGERS_LOCK = sql`lock table usage_events in share row exclusive mode`;

export async function up(db: Kysely<unknown>): Promise<void> {
  await TRIGGERS_LOCK.execute(db);
  let events = db.schema.alterTable('usage_events');
  for (const c of ['cached_tokens', 'cache_write_tokens', 'cache_write_1h_tokens', 'reasoning_tokens'])
    await events
      .addColumn(c, 'integer', (col) =>
        col
          .notNull()
          .defaultTo(0)
          .check(sql`${sql.ref(c)} >= 0`),
      )
      .execute();
  events = db.schema.alterTable('usage_events');
  for (const c of [
    'cached_input_price_per_million',
    'cache_write_price_per_million',
    'cache_write_1h_price_per_million',
  ])
    await events.addColumn(c, 'numeric').execute();
  for (const table of ['usage_monthly_totals', 'usage_daily_totals']) {
    for (const c of ['cached_tokens', 'cache_write_tokens', 'reasoning_tokens'])
      await db.schema
        .alterTable(table)
        .addColumn(c, 'bigint', (col) => col.notNull().defaultTo(0))
        .execute();
    await db.schema
      .alterTable(table)
      .addColumn('cache_savings_usd', 'numeric', (col) => col.notNull().defaultTo(0))
      .execute();
  }
  // What a paid row saved: its prompt and completion at the input and output prices, less its cost.
  const saved = `coalesce(sum((prompt_tokens * input_price_per_million + completion_tokens * output_price_per_million) / 1000000 - cost_usd) filter (where tier = 'paid'), 0)`;
  await sql`
    create or replace function usage_monthly_totals_add() returns trigger language plpgsql as $$
    begin
      insert into usage_monthly_totals as t (account_id, month, model, tier, requests, prompt_tokens, completion_tokens,
                                             cost_usd, cached_tokens, cache_write_tokens, reasoning_tokens, cache_savings_usd)
      select account_id, date_trunc('month', created_at at time zone 'UTC')::date, model, tier,
             count(*), sum(prompt_tokens), sum(completion_tokens), sum(cost_usd),
             sum(cached_tokens), sum(cache_write_tokens), sum(reasoning_tokens), ${sql.raw(saved)}
        from inserted_usage
       group by 1, 2, 3, 4
       order by 1, 2, 3, 4
      on conflict (account_id, month, model, tier) do update
         set requests = t.requests + excluded.requests,
             prompt_tokens = t.prompt_tokens + excluded.prompt_tokens,
             completion_tokens = t.completion_tokens + excluded.completion_tokens,
             cost_usd = t.cost_usd + excluded.cost_usd,
             cached_tokens = t.cached_tokens + excluded.cached_tokens,
             cache_write_tokens = t.cache_write_tokens + excluded.cache_write_tokens,
             reasoning_tokens = t.reasoning_tokens + excluded.reasoning_tokens,
             cache_savings_usd = t.cache_savings_usd + excluded.cache_savings_usd;
      return null;
    end
    $$`.execute(db);
  await sql`
    create or replace function usage_daily_totals_add() returns trigger language plpgsql as $$
    begin
      insert into usage_daily_totals as t (account_id, day, model, api, key_id, requests, paid_requests,
                                           prompt_tokens, completion_tokens, cost_usd,
                                           cached_tokens, cache_write_tokens, reasoning_tokens, cache_savings_usd)
      select account_id, (created_at at time zone 'UTC')::date, model, api, key_id,
             count(*), count(*) filter (where tier = 'paid'), sum(prompt_tokens), sum(completion_tokens),
             coalesce(sum(cost_usd) filter (where tier = 'paid'), 0),
             sum(cached_tokens), sum(cache_write_tokens), sum(reasoning_tokens), ${sql.raw(saved)}
        from inserted_usage
       group by 1, 2, 3, 4, 5
       order by 1, 2, 3, 4, 5
      on conflict (account_id, day, model, api, key_id) do update
         set requests = t.requests + excluded.requests,
             paid_requests = t.paid_requests + excluded.paid_requests,
             prompt_tokens = t.prompt_tokens + excluded.prompt_tokens,
             completion_tokens = t.completion_tokens + excluded.completion_tokens,
             cost_usd = t.cost_usd + excluded.cost_usd,
             cached_tokens = t.cached_tokens + excluded.cached_tokens,
             cache_write_tokens = t.cache_write_tokens + excluded.cache_write_tokens,
             reasoning_tokens = t.reasoning_tokens + excluded.reasoning_tokens,
             cache_savings_usd = t.cache_savings_usd + excluded.cache_savings_usd;
      return null;
    end
    $$`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await TRIGGERS_LOCK.execute(db);
  await sql`
    create or replace function usage_monthly_totals_add() returns trigger language plpgsql as $$
    begin
      insert into usage_monthly_totals as t (account_id, month, model, tier, requests, prompt_tokens, completion_tokens, cost_usd)
      select account_id, date_trunc('month', created_at at time zone 'UTC')::date, model, tier,
             count(*), sum(prompt_tokens), sum(completion_tokens), sum(cost_usd)
        from inserted_usage
       group by 1, 2, 3, 4
       order by 1, 2, 3, 4
      on conflict (account_id, month, model, tier) do update
         set requests = t.requests + excluded.requests,
             prompt_tokens = t.prompt_tokens + excluded.prompt_tokens,
             completion_tokens = t.completion_tokens + excluded.completion_tokens,
             cost_usd = t.cost_usd + excluded.cost_usd;
      return null;
    end
    $$`.execute(db);
  await sql`
    create or replace function usage_daily_totals_add() returns trigger language plpgsql as $$
    begin
      insert into usage_daily_totals as t (account_id, day, model, api, key_id, requests, paid_requests,
                                           prompt_tokens, completion_tokens, cost_usd)
      select account_id, (created_at at time zone 'UTC')::date, model, api, key_id,
             count(*), count(*) filter (where tier = 'paid'), sum(prompt_tokens), sum(completion_tokens),
             coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)
        from inserted_usage
       group by 1, 2, 3, 4, 5
       order by 1, 2, 3, 4, 5
      on conflict (account_id, day, model, api, key_id) do update
         set requests = t.requests + excluded.requests,
             paid_requests = t.paid_requests + excluded.paid_requests,
             prompt_tokens = t.prompt_tokens + excluded.prompt_tokens,
             completion_tokens = t.completion_tokens + excluded.completion_tokens,
             cost_usd = t.cost_usd + excluded.cost_usd;
      return null;
    end
    $$`.execute(db);
  for (const table of ['usage_monthly_totals', 'usage_daily_totals'])
    for (const c of ['cached_tokens', 'cache_write_tokens', 'reasoning_tokens', 'cache_savings_usd'])
      await db.schema.alterTable(table).dropColumn(c).execute();
  for (const c of [
    'cached_tokens',
    'cache_write_tokens',
    'cache_write_1h_tokens',
    'reasoning_tokens',
    'cached_input_price_per_million',
    'cache_write_price_per_million',
    'cache_write_1h_price_per_million',
  ])
    await db.schema.alterTable('usage_events').dropColumn(c).execute();
}
