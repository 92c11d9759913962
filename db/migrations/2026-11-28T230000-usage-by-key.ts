import { sql, type Kysely } from 'kysely';

// Which API key made each request, so usage can be read per key:
// - usage_events.key_id: the api_keys row whose key authenticated the request. Rows recorded
//   before it was kept have none (null), and read as "no key recorded".
// - usage_daily_totals gains key_id in its key (null included: NULLS NOT DISTINCT), and its
//   trigger groups by it. Existing totals keep a null key_id, so they stay exactly what they were.
// No foreign key: the ledger outlives the rows it names (an erased account's keys), and a
// constraint check on every ledger insert would cost the metering path for nothing it uses.

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('usage_events').addColumn('key_id', 'uuid').execute();
  await db.schema.alterTable('usage_daily_totals').addColumn('key_id', 'uuid').execute();
  await db.schema.alterTable('usage_daily_totals').dropConstraint('usage_daily_totals_pkey').execute();
  await sql`create unique index usage_daily_totals_key on usage_daily_totals (account_id, day, model, api, key_id) nulls not distinct`.execute(
    db,
  );
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
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`lock table usage_events in share row exclusive mode`.execute(db);
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
  // Folds every key's totals into one per account, day, model and API.
  await sql`
    create temp table folded on commit drop as
    select account_id, day, model, api, sum(requests) as requests, sum(prompt_tokens) as prompt_tokens,
           sum(completion_tokens) as completion_tokens, sum(cost_usd) as cost_usd
      from usage_daily_totals group by 1, 2, 3, 4`.execute(db);
  await sql`delete from usage_daily_totals`.execute(db);
  await sql`drop index usage_daily_totals_key`.execute(db);
  await db.schema.alterTable('usage_daily_totals').dropColumn('key_id').execute();
  await sql`
    insert into usage_daily_totals (account_id, day, model, api, requests, prompt_tokens, completion_tokens, cost_usd)
    select account_id, day, model, api, requests, prompt_tokens, completion_tokens, cost_usd from folded`.execute(db);
  await db.schema
    .alterTable('usage_daily_totals')
    .addPrimaryKeyConstraint('usage_daily_totals_pkey', ['account_id', 'day', 'model', 'api'])
    .execute();
  await db.schema.alterTable('usage_events').dropColumn('key_id').execute();
}
