import { sql, type Kysely } from 'kysely';

// Which public API a request came through, so usage can be read per API:
// - usage_events.api: 'chat.completions' or 'responses'. Rows recorded before it existed are
//   chat completions, except the Responses API's own, whose request ids are `resp_…`.
// - usage_daily_totals gains api in its key, and its trigger groups by it. Only the Responses
//   rows' share of the existing totals moves (out of the chat.completions total of the same
//   account, day and model), so totals stay exactly what they were in sum, drift and all.
// The first statement locks usage_events, so no insert (nor its trigger) runs until this commits.

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('usage_events')
    .addColumn('api', 'text', (c) =>
      c
        .notNull()
        .defaultTo('chat.completions')
        .check(sql`api in ('chat.completions', 'responses')`),
    )
    .execute();
  await sql`update usage_events set api = 'responses' where request_id like 'resp\\_%'`.execute(db);

  await db.schema
    .alterTable('usage_daily_totals')
    .addColumn('api', 'text', (c) => c.notNull().defaultTo('chat.completions'))
    .execute();
  await db.schema.alterTable('usage_daily_totals').dropConstraint('usage_daily_totals_pkey').execute();
  await db.schema
    .alterTable('usage_daily_totals')
    .addPrimaryKeyConstraint('usage_daily_totals_pkey', ['account_id', 'day', 'model', 'api'])
    .execute();

  // One statement: the update and the insert both read the Responses rows' sums from one snapshot.
  await sql`
    with moved as (
      select account_id, (created_at at time zone 'UTC')::date as day, model,
             count(*) as requests, sum(prompt_tokens) as prompt_tokens, sum(completion_tokens) as completion_tokens,
             coalesce(sum(cost_usd) filter (where tier = 'paid'), 0) as cost_usd
        from usage_events
       where api = 'responses'
       group by 1, 2, 3
    ), taken as (
      update usage_daily_totals t
         set requests = t.requests - m.requests,
             prompt_tokens = t.prompt_tokens - m.prompt_tokens,
             completion_tokens = t.completion_tokens - m.completion_tokens,
             cost_usd = t.cost_usd - m.cost_usd
        from moved m
       where (t.account_id, t.day, t.model, t.api) = (m.account_id, m.day, m.model, 'chat.completions')
    )
    insert into usage_daily_totals (account_id, day, model, api, requests, prompt_tokens, completion_tokens, cost_usd)
    select account_id, day, model, 'responses', requests, prompt_tokens, completion_tokens, cost_usd
      from moved`.execute(db);
  await sql`delete from usage_daily_totals where api = 'chat.completions' and requests <= 0`.execute(db);

  await sql`
    create or replace function usage_daily_totals_add() returns trigger language plpgsql as $$
    begin
      insert into usage_daily_totals as t (account_id, day, model, api, requests, prompt_tokens, completion_tokens, cost_usd)
      select account_id, (created_at at time zone 'UTC')::date, model, api,
             count(*), sum(prompt_tokens), sum(completion_tokens), coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)
        from inserted_usage
       group by 1, 2, 3, 4
       order by 1, 2, 3, 4
      on conflict (account_id, day, model, api) do update
         set requests = t.requests + excluded.requests,
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
      insert into usage_daily_totals as t (account_id, day, model, requests, prompt_tokens, completion_tokens, cost_usd)
      select account_id, (created_at at time zone 'UTC')::date, model,
             count(*), sum(prompt_tokens), sum(completion_tokens), coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)
        from inserted_usage
       group by 1, 2, 3
       order by 1, 2, 3
      on conflict (account_id, day, model) do update
         set requests = t.requests + excluded.requests,
             prompt_tokens = t.prompt_tokens + excluded.prompt_tokens,
             completion_tokens = t.completion_tokens + excluded.completion_tokens,
             cost_usd = t.cost_usd + excluded.cost_usd;
      return null;
    end
    $$`.execute(db);
  // Folds each Responses total into the chat.completions one of its account, day and model.
  await sql`
    update usage_daily_totals t
       set requests = t.requests + r.requests,
           prompt_tokens = t.prompt_tokens + r.prompt_tokens,
           completion_tokens = t.completion_tokens + r.completion_tokens,
           cost_usd = t.cost_usd + r.cost_usd
      from usage_daily_totals r
     where r.api = 'responses' and t.api = 'chat.completions'
       and (t.account_id, t.day, t.model) = (r.account_id, r.day, r.model)`.execute(db);
  await sql`
    delete from usage_daily_totals r
     where r.api = 'responses'
       and exists (select from usage_daily_totals t
                    where t.api = 'chat.completions' and (t.account_id, t.day, t.model) = (r.account_id, r.day, r.model))`.execute(
    db,
  );
  await db.schema.alterTable('usage_daily_totals').dropConstraint('usage_daily_totals_pkey').execute();
  await db.schema.alterTable('usage_daily_totals').dropColumn('api').execute();
  await db.schema
    .alterTable('usage_daily_totals')
    .addPrimaryKeyConstraint('usage_daily_totals_pkey', ['account_id', 'day', 'model'])
    .execute();
  await db.schema.alterTable('usage_events').dropColumn('api').execute();
}
