import { sql, type Kysely } from 'kysely';

// usage_daily_totals.paid_requests: how many of a row's requests ran on the paid tier, so usage
// per key (which only the daily totals hold) says how many were billable, as usage per model does
// from the monthly totals. Existing rows are filled from the ledger once, under a lock that holds
// metering's inserts back, so no request is counted twice or missed.

export async function up(db: Kysely<unknown>): Promise<void> {
  await sql`lock table usage_events in share row exclusive mode`.execute(db);
  await db.schema
    .alterTable('usage_daily_totals')
    .addColumn('paid_requests', 'bigint', (c) => c.notNull().defaultTo(0))
    .execute();
  // A missing key meets as the nil uuid on both sides, so the join stays a plain equality.
  await sql`
    update usage_daily_totals t
       set paid_requests = l.paid_requests
      from (select account_id, (created_at at time zone 'UTC')::date as day, model, api,
                   coalesce(key_id, '00000000-0000-0000-0000-000000000000') as key, count(*) as paid_requests
              from usage_events where tier = 'paid'
             group by 1, 2, 3, 4, 5) l
     where t.account_id = l.account_id and t.day = l.day and t.model = l.model and t.api = l.api
       and coalesce(t.key_id, '00000000-0000-0000-0000-000000000000') = l.key`.execute(db);
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
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`lock table usage_events in share row exclusive mode`.execute(db);
  await sql`
    create or replace function usage_daily_totals_add() returns trigger language plpgsql as $$
    begin
      insert into usage_daily_totals as t (account_id, day, model, api, key_id, requests, prompt_tokens, completion_tokens, cost_usd)
      select account_id, (created_at at time zone 'UTC')::date, model, api, key_id,
             count(*), sum(prompt_tokens), sum(completion_tokens), coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)
        from inserted_usage
       group by 1, 2, 3, 4, 5
       order by 1, 2, 3, 4, 5
      on conflict (account_id, day, model, api, key_id) do update
         set requests = t.requests + excluded.requests,
             prompt_tokens = t.prompt_tokens + excluded.prompt_tokens,
             completion_tokens = t.completion_tokens + excluded.completion_tokens,
             cost_usd = t.cost_usd + excluded.cost_usd;
      return null;
    end
    $$`.execute(db);
  await db.schema.alterTable('usage_daily_totals').dropColumn('paid_requests').execute();
}
