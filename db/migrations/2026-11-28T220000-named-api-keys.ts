import { sql, type Kysely } from 'kysely';

// An account holds many named keys, each with its own settings. The interface's single key
// becomes the account's default key: every live key at the time of the migration is one, named
// "Default". is_default defaults to true so that a key inserted the old way (one per account)
// stays the account's default key; keys made through POST /v1/keys say false.
// The old index allowed one live key per account; the new one allows one live default key.
// last4 is null for keys issued before it existed: only a hash of them is stored, so their
// redacted value is their display prefix instead (docs/api.md).

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('api_keys')
    .addColumn('name', 'text', (c) => c.notNull().defaultTo('Default'))
    .addColumn('is_default', 'boolean', (c) => c.notNull().defaultTo(true))
    .addColumn('last4', 'text')
    .addColumn('last_used_at', 'timestamptz')
    .addColumn('expires_at', 'timestamptz')
    .addColumn('models', sql`text[]`)
    .addColumn('requests_per_minute', 'integer', (c) => c.check(sql`requests_per_minute > 0`))
    .addColumn('monthly_spend_limit_usd', sql`numeric(9, 2)`, (c) =>
      c.check(sql`monthly_spend_limit_usd > 0 and monthly_spend_limit_usd <= 1000000`),
    )
    .addColumn('disabled', 'boolean', (c) => c.notNull().defaultTo(false))
    .execute();
  await sql`drop index api_keys_one_active_per_account`.execute(db);
  await sql`create unique index api_keys_one_default_per_account on api_keys (account_id) where revoked_at is null and is_default`.execute(
    db,
  );
  // Listing and counting an account's live keys.
  await sql`create index api_keys_live_by_account on api_keys (account_id, created_at) where revoked_at is null`.execute(
    db,
  );
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await sql`drop index if exists api_keys_live_by_account`.execute(db);
  await sql`drop index if exists api_keys_one_default_per_account`.execute(db);
  // Back to one live key per account: the non-default ones are revoked.
  await sql`update api_keys set revoked_at = now() where revoked_at is null and not is_default`.execute(db);
  await sql`create unique index api_keys_one_active_per_account on api_keys (account_id) where revoked_at is null`.execute(
    db,
  );
  for (const column of [
    'name',
    'is_default',
    'last4',
    'last_used_at',
    'expires_at',
    'models',
    'requests_per_minute',
    'monthly_spend_limit_usd',
    'disabled',
  ])
    await db.schema.alterTable('api_keys').dropColumn(column).execute();
}
