import { sql, type Kysely } from 'kysely';

// Signing in to the console: one-time sign-in links and the sessions they start. Both are looked
// up by the SHA-256 of a secret the browser holds (the link's token, the session cookie), so a
// leak of these tables yields no usable link or session.

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .createTable('sign_in_tokens')
    .addColumn('id', 'uuid', (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
    .addColumn('token_hash', 'text', (c) => c.notNull().unique())
    .addColumn('return_to', 'text', (c) => c.notNull())
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('used_at', 'timestamptz')
    .addColumn('created_at', 'timestamptz', (c) => c.notNull().defaultTo(sql`now()`))
    .execute();

  await db.schema
    .createTable('console_sessions')
    .addColumn('id', 'uuid', (c) => c.primaryKey().defaultTo(sql`gen_random_uuid()`))
    .addColumn('account_id', 'uuid', (c) => c.notNull().references('accounts.id').onDelete('cascade'))
    .addColumn('id_hash', 'text', (c) => c.notNull().unique())
    .addColumn('created_at', 'timestamptz', (c) => c.notNull())
    .addColumn('last_seen_at', 'timestamptz', (c) => c.notNull())
    .addColumn('expires_at', 'timestamptz', (c) => c.notNull())
    .addColumn('revoked_at', 'timestamptz')
    // The API key issued by the verification that started the session, encrypted with a key
    // derived from the session cookie (which is never stored), until the console shows it once.
    .addColumn('pending_api_key', 'text')
    .execute();
  await db.schema
    .createIndex('console_sessions_account_live')
    .on('console_sessions')
    .column('account_id')
    .where(sql.ref('revoked_at'), 'is', null)
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.dropTable('console_sessions').ifExists().execute();
  await db.schema.dropTable('sign_in_tokens').ifExists().execute();
}
