import type { Selectable } from 'kysely';
import type { Db, Trx } from '../infra/db.js';
import type { SignInTokensTable } from '../../db/schema/console-sessions.js';

export type SignInToken = Selectable<SignInTokensTable>;

export async function insertSignInToken(
  trx: Trx,
  values: { accountId: string; tokenHash: string; returnTo: string; expiresAt: Date; now: Date },
): Promise<void> {
  await trx
    .insertInto('sign_in_tokens')
    .values({
      account_id: values.accountId,
      token_hash: values.tokenHash,
      return_to: values.returnTo,
      expires_at: values.expiresAt,
      created_at: values.now,
    })
    .execute();
}

/**
 * Marks the token used if it is unused and unexpired, in one statement: of two concurrent uses
 * only one gets the row back.
 */
export async function useSignInToken(trx: Trx, tokenHash: string, now: Date): Promise<SignInToken | undefined> {
  return trx
    .updateTable('sign_in_tokens')
    .set({ used_at: now })
    .where('token_hash', '=', tokenHash)
    .where('used_at', 'is', null)
    .where('expires_at', '>', now)
    .returningAll()
    .executeTakeFirst();
}

/** Spends every sign-in link of the account not yet followed (sign out everywhere). */
export async function voidAccountSignInTokens(trx: Trx, accountId: string, now: Date): Promise<number> {
  const r = await trx
    .updateTable('sign_in_tokens')
    .set({ used_at: now })
    .where('account_id', '=', accountId)
    .where('used_at', 'is', null)
    .executeTakeFirst();
  return Number(r.numUpdatedRows);
}

export async function findSignInToken(db: Db | Trx, tokenHash: string): Promise<SignInToken | undefined> {
  return db.selectFrom('sign_in_tokens').selectAll().where('token_hash', '=', tokenHash).executeTakeFirst();
}

/** Deletes sign-in tokens that expired (used or not) before `expiredBefore`. */
export async function deleteExpiredSignInTokens(db: Db, expiredBefore: Date): Promise<number> {
  const r = await db.deleteFrom('sign_in_tokens').where('expires_at', '<', expiredBefore).executeTakeFirst();
  return Number(r.numDeletedRows);
}
