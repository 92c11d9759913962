import type { Kysely } from 'kysely';

// Responses API objects kept for `previous_response_id`, retrieval and input_items (store: true,
// OpenAI's default), per account, until `expires_at` (RESPONSES_RETENTION_DAYS after creation);
// the scheduler's daily `responses` job deletes what has expired.

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('stored_responses')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
    .addColumn('status', 'text', (c) => c.notNull())
    // The Response object as the client last saw it (output, usage, echoed settings).
    .addColumn('response', 'jsonb', (c) => c.notNull())
    // The request's input items, each with its id, in order: GET …/input_items and the context a
    // follow-up with previous_response_id continues from.
    .addColumn('input_items', 'jsonb', (c) => c.notNull())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull())
    .addColumn('updated_at', 'timestamptz', (c) => c.notNull())
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('stored_responses_expires_at').on('stored_responses').column('expires_at').execute();
  await db.schema
    .createIndex('stored_responses_account_created')
    .on('stored_responses')
    .columns(['account_id', 'created_at'])
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('stored_responses').ifExists().execute();
}
