import { sql, type Kysely } from 'kysely';

// A paid account's monthly spending limit, and the alerts sent as its spend nears and reaches it.
// The limit sits on the account row so it travels with the account every request is decided on
// (and with its cached copy, which the account version keeps current). An alert row is unique per
// account, month and threshold: inserting it with ON CONFLICT DO NOTHING in the transaction that
// queues its email is what makes each email go exactly once a month, whichever process sees the
// threshold first and however often it looks.

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('accounts')
    .addColumn('monthly_spend_limit_usd', sql`numeric(9, 2)`, (c) =>
      c.check(sql`monthly_spend_limit_usd > 0 and monthly_spend_limit_usd <= 1000000`),
    )
    .execute();

  await db.schema
    .createTable('spend_alerts')
    .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
    .addColumn('month', 'date', (c) => c.notNull())
    .addColumn('threshold_percent', 'smallint', (c) => c.notNull().check(sql`threshold_percent in (80, 100)`))
    .addColumn('monthly_limit_usd', sql`numeric(9, 2)`, (c) => c.notNull())
    .addColumn('spent_usd', 'numeric', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .addPrimaryKeyConstraint('spend_alerts_pkey', ['account_id', 'month', 'threshold_percent'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('spend_alerts').ifExists().execute();
  await db.schema.alterTable('accounts').dropColumn('monthly_spend_limit_usd').execute();
}
