import { type Kysely, sql } from 'kysely';

// Append-only: never edit a migration that has landed; add a new one.

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('accounts')
    .addColumn('id', 'uuid', (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('name', 'text', (c) => c.notNull())
    .addColumn('email', 'text', (c) => c.notNull())
    .addColumn('organization', 'text', (c) => c.notNull())
    .addColumn('tier', 'text', (c) =>
      c
        .notNull()
        .defaultTo('free')
        .check(sql`tier in ('free', 'paid')`),
    )
    .addColumn('verified_at', 'timestamptz')
    .addColumn('stripe_customer_id', 'text', (c) => c.unique())
    .addColumn('stripe_subscription_id', 'text')
    .addColumn('subscription_status', 'text')
    .addColumn('default_payment_method_id', 'text')
    .addColumn('payment_method_brand', 'text')
    .addColumn('payment_method_last4', 'text')
    .addColumn('checkout_session_id', 'text')
    .addColumn('tier_changed_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  // Addresses compare case-insensitively.
  await sql`create unique index accounts_email_lower_key on accounts (lower(email))`.execute(db);

  await db.schema
    .createTable('tier_changes')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
    .addColumn('from_tier', 'text', (c) => c.notNull())
    .addColumn('to_tier', 'text', (c) => c.notNull())
    .addColumn('reason', 'text', (c) => c.notNull())
    .addColumn('at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await db.schema.createIndex('tier_changes_account_at').on('tier_changes').columns(['account_id', 'at']).execute();

  await db.schema
    .createTable('api_keys')
    .addColumn('id', 'uuid', (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
    .addColumn('key_hash', 'text', (c) => c.notNull().unique())
    .addColumn('display_prefix', 'text', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('revoked_at', 'timestamptz')
    .execute();
  // One active key per account.
  await sql`create unique index api_keys_one_active_per_account on api_keys (account_id) where revoked_at is null`.execute(
    db,
  );

  await db.schema
    .createTable('email_verification_tokens')
    .addColumn('id', 'uuid', (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('used_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable('invoices')
    .addColumn('id', 'uuid', (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('restrict'))
    .addColumn('kind', 'text', (c) => c.notNull().check(sql`kind in ('monthly', 'on_demand')`))
    .addColumn('period_start', 'timestamptz', (c) => c.notNull())
    .addColumn('period_end', 'timestamptz', (c) => c.notNull())
    .addColumn('idempotency_key', 'text', (c) => c.notNull().unique())
    .addColumn('stripe_invoice_id', 'text', (c) => c.unique())
    .addColumn('status', 'text', (c) => c.notNull())
    .addColumn('currency', 'text', (c) => c.notNull())
    .addColumn('amount_cents', 'bigint', (c) => c.notNull().check(sql`amount_cents >= 0`))
    .addColumn('hosted_invoice_url', 'text')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('finalized_at', 'timestamptz')
    .execute();
  await db.schema
    .createIndex('invoices_account_period')
    .on('invoices')
    .columns(['account_id', 'period_start'])
    .execute();

  await db.schema
    .createTable('invoice_lines')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('invoice_id', 'uuid', (c) => c.notNull().references('invoices.id').onDelete('cascade'))
    .addColumn('model', 'text', (c) => c.notNull())
    .addColumn('requests', 'integer', (c) => c.notNull())
    .addColumn('prompt_tokens', 'bigint', (c) => c.notNull())
    .addColumn('completion_tokens', 'bigint', (c) => c.notNull())
    .addColumn('cost_usd', 'numeric', (c) => c.notNull())
    .addColumn('amount_cents', 'bigint', (c) => c.notNull())
    .addColumn('stripe_invoice_item_id', 'text')
    .addUniqueConstraint('invoice_lines_invoice_model_key', ['invoice_id', 'model'])
    .execute();

  await db.schema
    .createTable('usage_events')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('request_id', 'text', (c) => c.notNull().unique())
    .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('restrict'))
    .addColumn('model', 'text', (c) => c.notNull())
    .addColumn('tier', 'text', (c) => c.notNull().check(sql`tier in ('free', 'paid')`))
    .addColumn('status', 'text', (c) => c.notNull().check(sql`status in ('completed', 'cancelled', 'failed')`))
    .addColumn('prompt_tokens', 'integer', (c) => c.notNull().check(sql`prompt_tokens >= 0`))
    .addColumn('completion_tokens', 'integer', (c) => c.notNull().check(sql`completion_tokens >= 0`))
    .addColumn('input_price_per_million', 'numeric', (c) => c.notNull())
    .addColumn('output_price_per_million', 'numeric', (c) => c.notNull())
    .addColumn('cost_usd', 'numeric', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull())
    .addColumn('recorded_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('invoice_id', 'uuid', (c) => c.references('invoices.id').onDelete('set null'))
    .execute();
  await db.schema
    .createIndex('usage_events_account_created')
    .on('usage_events')
    .columns(['account_id', 'created_at'])
    .execute();
  await sql`create index usage_events_unbilled on usage_events (account_id, created_at) where invoice_id is null and tier = 'paid'`.execute(
    db,
  );

  await db.schema
    .createTable('processed_webhook_events')
    .addColumn('event_id', 'text', (c) => c.primaryKey())
    .addColumn('type', 'text', (c) => c.notNull())
    .addColumn('received_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable('email_outbox')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('to_address', 'text', (c) => c.notNull())
    .addColumn('subject', 'text', (c) => c.notNull())
    .addColumn('text_body', 'text', (c) => c.notNull())
    .addColumn('html_body', 'text', (c) => c.notNull())
    .addColumn('kind', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) =>
      c
        .notNull()
        .defaultTo('pending')
        .check(sql`status in ('pending', 'sent', 'failed')`),
    )
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('next_attempt_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('last_error', 'text')
    .addColumn('provider_message_id', 'text')
    .addColumn('sent_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();
  await sql`create index email_outbox_due on email_outbox (next_attempt_at) where status = 'pending'`.execute(db);

  await db.schema
    .createTable('scheduler_runs')
    .addColumn('id', 'bigserial', (c) => c.primaryKey())
    .addColumn('job', 'text', (c) => c.notNull())
    .addColumn('period_key', 'text', (c) => c.notNull())
    .addColumn('status', 'text', (c) => c.notNull().check(sql`status in ('running', 'succeeded', 'failed')`))
    .addColumn('started_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addColumn('finished_at', 'timestamptz')
    .addColumn('details', 'jsonb')
    .addUniqueConstraint('scheduler_runs_job_period_key', ['job', 'period_key'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  for (const t of [
    'scheduler_runs',
    'email_outbox',
    'processed_webhook_events',
    'usage_events',
    'invoice_lines',
    'invoices',
    'email_verification_tokens',
    'api_keys',
    'tier_changes',
    'accounts',
  ]) {
    await db.schema.dropTable(t).ifExists().execute();
  }
}
