import type { Updateable } from 'kysely';
import type { ApiKeysTable } from '../../db/schema/api-keys.js';
import type { Db, Trx } from '../infra/db.js';
import { insertApiKey, type ApiKeyRow } from './accounts.repository.js';

export const insertKey = insertApiKey;

export async function listLiveKeys(db: Db | Trx, accountId: string): Promise<ApiKeyRow[]> {
  return db
    .selectFrom('api_keys')
    .selectAll()
    .where('account_id', '=', accountId)
    .where('revoked_at', 'is', null)
    .orderBy('is_default', 'desc')
    .orderBy('created_at')
    .orderBy('id')
    .execute();
}

/** The account's keys with these ids, revoked ones included (what usage read per key names). */
export async function findKeysByIds(db: Db, accountId: string, keyIds: string[]): Promise<ApiKeyRow[]> {
  if (keyIds.length === 0) return [];
  return db.selectFrom('api_keys').selectAll().where('account_id', '=', accountId).where('id', 'in', keyIds).execute();
}

export async function countLiveKeys(trx: Trx, accountId: string): Promise<number> {
  const row = await trx
    .selectFrom('api_keys')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('account_id', '=', accountId)
    .where('revoked_at', 'is', null)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** One of the account's live keys; another account's key, or a revoked one, is not found. */
export async function findLiveKey(db: Db | Trx, accountId: string, keyId: string): Promise<ApiKeyRow | undefined> {
  return db
    .selectFrom('api_keys')
    .selectAll()
    .where('id', '=', keyId)
    .where('account_id', '=', accountId)
    .where('revoked_at', 'is', null)
    .executeTakeFirst();
}

export async function updateKey(
  trx: Trx,
  accountId: string,
  keyId: string,
  settings: Pick<
    Updateable<ApiKeysTable>,
    'name' | 'models' | 'expires_at' | 'requests_per_minute' | 'monthly_spend_limit_usd' | 'disabled'
  >,
): Promise<ApiKeyRow | undefined> {
  return trx
    .updateTable('api_keys')
    .set(settings)
    .where('id', '=', keyId)
    .where('account_id', '=', accountId)
    .where('revoked_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
}

export async function revokeKey(trx: Trx, keyId: string, now: Date): Promise<void> {
  await trx.updateTable('api_keys').set({ revoked_at: now }).where('id', '=', keyId).execute();
}

/** Sets a key's last_used_at to `now` unless it was set at or after `notBefore` (by another process). */
export async function touchKeyLastUsed(db: Db, keyId: string, now: Date, notBefore: Date): Promise<void> {
  await db
    .updateTable('api_keys')
    .set({ last_used_at: now })
    .where('id', '=', keyId)
    .where((eb) => eb.or([eb('last_used_at', 'is', null), eb('last_used_at', '<', notBefore)]))
    .execute();
}
