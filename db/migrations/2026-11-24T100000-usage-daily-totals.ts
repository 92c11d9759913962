import { sql, type Kysely } from 'kysely';

// What the console reads: usage per UTC day, and the account's recent requests.
// - usage_daily_totals (account, UTC day, model) is kept by a statement trigger on the ledger
//   exactly as usage_monthly_totals is: it sees only rows actually inserted (ON CONFLICT DO NOTHING
//   skips replays), so the daily figures equal the ledger's; the rollup audit re-derives them.
//   Unlike the monthly totals it is not split by tier: its cost is the paid tier's (what is billed),
//   so a year of an account is one row per day and model, read as it is stored, with no aggregation.
// - usage_events.stream: whether the request was streamed (false for rows recorded before it existed).
// - The recent-requests list pages by keyset on (account_id, created_at desc, id desc); that index
//   also serves every (account_id, created_at) range the old one did, so the old one goes.
// - invoices.invoice_pdf: Stripe's PDF link beside its hosted page.

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('usage_events')
    .addColumn('stream', 'boolean', (c) => c.notNull().defaultTo(false))
    .execute();
  await sql`create index usage_events_account_recent on usage_events (account_id, created_at desc, id desc)`.execute(
    db,
  );
  await db.schema.dropIndex('usage_events_account_created').execute();

  await db.schema.alterTable('invoices').addColumn('invoice_pdf', 'text').execute();

  await db.schema
    .createTable('usage_daily_totals')
    .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
    .addColumn('day', 'date', (c) => c.notNull())
    .addColumn('model', 'text', (c) => c.notNull())
    .addColumn('requests', 'bigint', (c) => c.notNull())
    .addColumn('prompt_tokens', 'bigint', (c) => c.notNull())
    .addColumn('completion_tokens', 'bigint', (c) => c.notNull())
    .addColumn('cost_usd', 'numeric', (c) => c.notNull())
    .addPrimaryKeyConstraint('usage_daily_totals_pkey', ['account_id', 'day', 'model'])
    .execute();

  // Upserted in key order, like the monthly totals, so concurrent metering batches cannot deadlock.
  await sql`
    create function usage_daily_totals_add() returns trigger language plpgsql as $$
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
  await sql`
    create trigger usage_events_daily_totals
      after insert on usage_events
      referencing new table as inserted_usage
      for each statement execute function usage_daily_totals_add()`.execute(db);

  await sql`
    insert into usage_daily_totals (account_id, day, model, requests, prompt_tokens, completion_tokens, cost_usd)
    select account_id, (created_at at time zone 'UTC')::date, model,
           count(*), sum(prompt_tokens), sum(completion_tokens), coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)
      from usage_events
     group by 1, 2, 3`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop trigger if exists usage_events_daily_totals on usage_events`.execute(db);
  await sql`drop function if exists usage_daily_totals_add()`.execute(db);
  await db.schema.dropTable('usage_daily_totals').ifExists().execute();
  await db.schema.alterTable('invoices').dropColumn('invoice_pdf').execute();
  await db.schema
    .createIndex('usage_events_account_created')
    .on('usage_events')
    .columns(['account_id', 'created_at'])
    .execute();
  await db.schema.dropIndex('usage_events_account_recent').ifExists().execute();
  await db.schema.alterTable('usage_events').dropColumn('stream').execute();
}
