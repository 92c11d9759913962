import type { Kysely } from 'kysely';

// Closing an account (docs/accounts.md#closing-an-account): `closing_at` marks a closure under way
// (its keys are revoked; the final invoice and the erasure may still be to do, and repeating the
// request finishes them), `closed_at` a finished one, whose personal data is erased. The row
// itself stays: invoices and the usage ledger refer to it.

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema
    .alterTable('accounts')
    .addColumn('closing_at', 'timestamptz')
    .addColumn('closed_at', 'timestamptz')
    .execute();
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('accounts').dropColumn('closed_at').dropColumn('closing_at').execute();
}
