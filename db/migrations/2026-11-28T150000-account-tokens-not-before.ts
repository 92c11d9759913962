import type { Kysely } from 'kysely';

// "Sign out everywhere" ends more than the console's sessions: every JWT issued for the account
// before it (console tokens, operator-minted ones, an identity provider's) stops working. The
// account keeps the moment; a token whose `iat` is earlier is refused.

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('accounts').addColumn('tokens_not_before', 'timestamptz').execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('accounts').dropColumn('tokens_not_before').execute();
}
