import { sql, type Kysely } from 'kysely';

// Monthly usage totals per account, model and tier, kept current by a statement-level trigger on
// the ledger. The billing reads (current-month usage, history) then cost one row per model, not a
// scan of every request of the month. The trigger sees only rows actually inserted (ON CONFLICT
// DO NOTHING skips replays), so totals match the ledger exactly; the rollup job re-derives a
// month from the ledger to prove it.

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('usage_monthly_totals')
    .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
    .addColumn('month', 'date', (c) => c.notNull())
    .addColumn('model', 'text', (c) => c.notNull())
    .addColumn('tier', 'text', (c) => c.notNull().check(sql`tier in ('free', 'paid')`))
    .addColumn('requests', 'bigint', (c) => c.notNull())
    .addColumn('prompt_tokens', 'bigint', (c) => c.notNull())
    .addColumn('completion_tokens', 'bigint', (c) => c.notNull())
    .addColumn('cost_usd', 'numeric', (c) => c.notNull())
    .addPrimaryKeyConstraint('usage_monthly_totals_pkey', ['account_id', 'month', 'model', 'tier'])
    .execute();

  // Rows are upserted in key order, so two concurrent metering batches touching the same totals
  // take their row locks in the same order and cannot deadlock.
  await sql`
    create function usage_monthly_totals_add() returns trigger language plpgsql as $$
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
    create trigger usage_events_monthly_totals
      after insert on usage_events
      referencing new table as inserted_usage
      for each statement execute function usage_monthly_totals_add()`.execute(db);

  await sql`
    insert into usage_monthly_totals (account_id, month, model, tier, requests, prompt_tokens, completion_tokens, cost_usd)
    select account_id, date_trunc('month', created_at at time zone 'UTC')::date, model, tier,
           count(*), sum(prompt_tokens), sum(completion_tokens), sum(cost_usd)
      from usage_events
     group by 1, 2, 3, 4`.execute(db);

  // The invoice job finds accounts owing usage with this (the existing partial index covers
  // unbilled rows); history and resumption read invoices by account and status.
  await db.schema.createIndex('invoices_account_status').on('invoices').columns(['account_id', 'status']).execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropIndex('invoices_account_status').ifExists().execute();
  await sql`drop trigger if exists usage_events_monthly_totals on usage_events`.execute(db);
  await sql`drop function if exists usage_monthly_totals_add()`.execute(db);
  await db.schema.dropTable('usage_monthly_totals').ifExists().execute();
}
