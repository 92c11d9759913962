import type { Selectable } from 'kysely';
import type { Db, Trx } from '../infra/db.js';
import type { AccountsTable } from '../../db/schema/accounts.js';

export type Account = Selectable<AccountsTable>;

export async function findAccountByApiKeyHash(db: Db, keyHash: string): Promise<(Account & { key_hash: string }) | undefined> {
  return db
    .selectFrom('api_keys')
    .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
    .selectAll('accounts')
    .select('api_keys.key_hash')
    .where('api_keys.key_hash', '=', keyHash)
    .where('api_keys.revoked_at', 'is', null)
    .executeTakeFirst();
}

export async function findAccountById(db: Db | Trx, id: string): Promise<Account | undefined> {
  return db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirst();
}

export async function findAccountByEmail(db: Db | Trx, email: string): Promise<Account | undefined> {
  return db
    .selectFrom('accounts')
    .selectAll()
    .where((eb) => eb(eb.fn('lower', ['email']), '=', email.toLowerCase()))
    .executeTakeFirst();
}
