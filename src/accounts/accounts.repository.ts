import { sql, type CompiledQuery, type Insertable, type Selectable, type Updateable } from 'kysely';
import type { Db, Trx } from '../infra/db.js';
import type { AccountsTable, Tier } from '../../db/schema/accounts.js';
import type { EmailVerificationTokensTable } from '../../db/schema/email-verification-tokens.js';
import type { ApiKeysTable } from '../../db/schema/api-keys.js';
import type { GrantColumns } from './key-grant.js';
import type { Account } from './account.js';

export type VerificationToken = Selectable<EmailVerificationTokensTable>;

// Every API request runs this lookup: it is built and compiled once per database handle, and
// each call only supplies the key hash (the builder and compiler cost more than the query).
type KeyLookupRow = Account & { key_hash: string } & GrantColumns;
const apiKeyLookups = new WeakMap<Db, CompiledQuery<KeyLookupRow>>();

/** The account of a live key, with the key's own settings under `key_` names. */
export async function findAccountByApiKeyHash(db: Db, keyHash: string): Promise<KeyLookupRow | undefined> {
  let compiled = apiKeyLookups.get(db);
  if (!compiled) {
    compiled = db
      .selectFrom('api_keys')
      .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
      .selectAll('accounts')
      .select([
        'api_keys.key_hash',
        'api_keys.id as key_id',
        'api_keys.expires_at as key_expires_at',
        'api_keys.models as key_models',
        'api_keys.requests_per_minute as key_requests_per_minute',
        'api_keys.monthly_spend_limit_usd as key_monthly_spend_limit_usd',
        'api_keys.disabled as key_disabled',
      ])
      .where('api_keys.key_hash', '=', '')
      .where('api_keys.revoked_at', 'is', null)
      .compile();
    if (compiled.parameters.length !== 1) throw new Error('the API key lookup must take exactly one parameter');
    apiKeyLookups.set(db, compiled);
  }
  const result = await db.executeQuery<KeyLookupRow>({ ...compiled, parameters: [keyHash] });
  return result.rows[0];
}

export async function findAccountById(db: Db | Trx, id: string): Promise<Account | undefined> {
  return db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirst();
}

/** Uses the unique index on lower(email): addresses compare case-insensitively. */
export async function findAccountByEmail(db: Db | Trx, email: string): Promise<Account | undefined> {
  return db
    .selectFrom('accounts')
    .selectAll()
    .where((eb) => eb(eb.fn('lower', ['email']), '=', email.toLowerCase()))
    .executeTakeFirst();
}

/**
 * Inserts the account unless one with the same address (any case) exists. ON CONFLICT makes a
 * concurrent sign-up for the same address wait for the first and then insert nothing, instead
 * of failing on the unique index. Returns undefined when the address was already taken.
 */
export async function insertAccountIfAbsent(
  trx: Trx,
  values: { name: string; email: string; organization: string; now: Date },
): Promise<Account | undefined> {
  return trx
    .insertInto('accounts')
    .values({
      name: values.name,
      email: values.email,
      organization: values.organization,
      tier: 'free',
      verified_at: null,
      tier_changed_at: values.now,
      updated_at: values.now,
    })
    .onConflict((oc) => oc.expression(sql`lower(email)`).doNothing())
    .returningAll()
    .executeTakeFirst();
}

/**
 * Reads the account and holds its row until the transaction ends, so verification, key changes
 * and tier transitions of one account run one at a time.
 */
export async function lockAccount(trx: Trx, id: string): Promise<Account | undefined> {
  return trx.selectFrom('accounts').selectAll().where('id', '=', id).forUpdate().executeTakeFirst();
}

export async function markAccountVerified(trx: Trx, id: string, now: Date): Promise<Account | undefined> {
  return trx
    .updateTable('accounts')
    .set({ verified_at: now, updated_at: now })
    .where('id', '=', id)
    .where('verified_at', 'is', null)
    .returningAll()
    .executeTakeFirst();
}

export async function insertVerificationToken(
  trx: Trx,
  values: { accountId: string; tokenHash: string; expiresAt: Date; now: Date },
): Promise<void> {
  await trx
    .insertInto('email_verification_tokens')
    .values({
      account_id: values.accountId,
      token_hash: values.tokenHash,
      expires_at: values.expiresAt,
      created_at: values.now,
    })
    .execute();
}

/**
 * Marks the token used if it is unused and unexpired, in one statement: of two concurrent
 * uses, the second finds used_at already set and gets nothing back.
 */
export async function useVerificationToken(
  trx: Trx,
  tokenHash: string,
  now: Date,
): Promise<{ account_id: string } | undefined> {
  return trx
    .updateTable('email_verification_tokens')
    .set({ used_at: now })
    .where('token_hash', '=', tokenHash)
    .where('used_at', 'is', null)
    .where('expires_at', '>', now)
    .returning('account_id')
    .executeTakeFirst();
}

export async function findVerificationToken(db: Db | Trx, tokenHash: string): Promise<VerificationToken | undefined> {
  return db.selectFrom('email_verification_tokens').selectAll().where('token_hash', '=', tokenHash).executeTakeFirst();
}

/** Every other open link of the account stops working once one of them verified it. */
export async function closeVerificationTokens(trx: Trx, accountId: string, now: Date): Promise<void> {
  await trx
    .updateTable('email_verification_tokens')
    .set({ used_at: now })
    .where('account_id', '=', accountId)
    .where('used_at', 'is', null)
    .execute();
}

/** Revokes every live key of the account (closing it). */
export async function revokeActiveApiKeys(trx: Trx, accountId: string, now: Date): Promise<void> {
  await trx
    .updateTable('api_keys')
    .set({ revoked_at: now })
    .where('account_id', '=', accountId)
    .where('revoked_at', 'is', null)
    .execute();
}

/** Revokes the account's live default key, returning its settings (undefined when it had none). */
export async function revokeDefaultApiKey(trx: Trx, accountId: string, now: Date): Promise<ApiKeyRow | undefined> {
  return trx
    .updateTable('api_keys')
    .set({ revoked_at: now })
    .where('account_id', '=', accountId)
    .where('revoked_at', 'is', null)
    .where('is_default', '=', true)
    .returningAll()
    .executeTakeFirst();
}

export type ApiKeyRow = Selectable<ApiKeysTable>;

export async function insertApiKey(
  trx: Trx,
  values: Pick<Insertable<ApiKeysTable>, 'account_id' | 'key_hash' | 'display_prefix' | 'last4' | 'is_default'> &
    Partial<
      Pick<
        Insertable<ApiKeysTable>,
        'name' | 'expires_at' | 'models' | 'requests_per_minute' | 'monthly_spend_limit_usd'
      >
    > & { created_at: Date },
): Promise<ApiKeyRow> {
  return trx.insertInto('api_keys').values(values).returningAll().executeTakeFirstOrThrow();
}

// ---------------------------------------------------------------------------------------------
// Billing: lookups by Stripe customer, the Stripe-mirrored columns, and the tier with its audit
// trail (tier_changes)

export async function findAccountByCustomer(db: Db | Trx, customerId: string): Promise<Account | undefined> {
  return db.selectFrom('accounts').selectAll().where('stripe_customer_id', '=', customerId).executeTakeFirst();
}

/** A page of accounts with a Stripe customer, in id order (optionally only the given ones). */
export async function accountsWithCustomer(
  db: Db,
  afterId: string | null,
  limit: number,
  only?: string[],
): Promise<Account[]> {
  let q = db.selectFrom('accounts').selectAll().where('stripe_customer_id', 'is not', null).orderBy('id').limit(limit);
  if (afterId !== null) q = q.where('id', '>', afterId);
  if (only && only.length) q = q.where('id', 'in', only);
  return q.execute();
}

/** The Stripe-mirrored columns of an account; tier and tier_changed_at change only through changeTier. */
export type AccountBillingPatch = Pick<
  Updateable<AccountsTable>,
  | 'stripe_subscription_id'
  | 'subscription_status'
  | 'default_payment_method_id'
  | 'payment_method_brand'
  | 'payment_method_last4'
  | 'checkout_session_id'
>;

export async function updateAccountBilling(
  db: Db | Trx,
  accountId: string,
  patch: AccountBillingPatch,
  at: Date,
): Promise<void> {
  await db
    .updateTable('accounts')
    .set({ ...patch, updated_at: at })
    .where('id', '=', accountId)
    .execute();
}

/** First writer wins: a customer id, once stored, is never replaced. */
export async function setCustomerIdIfUnset(db: Db, accountId: string, customerId: string, at: Date): Promise<void> {
  await db
    .updateTable('accounts')
    .set({ stripe_customer_id: customerId, updated_at: at })
    .where('id', '=', accountId)
    .where('stripe_customer_id', 'is', null)
    .execute();
}

/** Remembers the open checkout session, only while the account is still free. */
export async function setOpenCheckoutSession(db: Db, accountId: string, sessionId: string, at: Date): Promise<void> {
  await db
    .updateTable('accounts')
    .set({ checkout_session_id: sessionId, updated_at: at })
    .where('id', '=', accountId)
    .where('tier', '=', 'free')
    .execute();
}

export async function setTier(trx: Trx, accountId: string, tier: Tier, at: Date): Promise<void> {
  await trx
    .updateTable('accounts')
    .set({ tier, tier_changed_at: at, updated_at: at })
    .where('id', '=', accountId)
    .execute();
}

/** Sets (a decimal string, "25.00") or removes (null) the account's monthly spending limit. */
export async function setMonthlySpendLimit(
  trx: Trx,
  accountId: string,
  limitUsd: string | null,
  at: Date,
): Promise<Account> {
  return trx
    .updateTable('accounts')
    .set({ monthly_spend_limit_usd: limitUsd, updated_at: at })
    .where('id', '=', accountId)
    .returningAll()
    .executeTakeFirstOrThrow();
}

/** Of these accounts, the ids of the paid ones with a monthly spending limit. */
export async function paidAccountsWithSpendLimit(db: Db, ids: readonly string[]): Promise<string[]> {
  if (ids.length === 0) return [];
  const rows = await db
    .selectFrom('accounts')
    .select('id')
    .where('id', 'in', [...ids])
    .where('tier', '=', 'paid')
    .where('monthly_spend_limit_usd', 'is not', null)
    .execute();
  return rows.map((r) => r.id);
}

export async function insertTierChange(
  trx: Trx,
  row: { accountId: string; from: Tier; to: Tier; reason: string; at: Date },
): Promise<void> {
  await trx
    .insertInto('tier_changes')
    .values({ account_id: row.accountId, from_tier: row.from, to_tier: row.to, reason: row.reason, at: row.at })
    .execute();
}

/** JWTs of the account issued before `at` are refused from now on. */
export async function setTokensNotBefore(trx: Trx, accountId: string, at: Date): Promise<void> {
  await trx.updateTable('accounts').set({ tokens_not_before: at }).where('id', '=', accountId).execute();
}

// ---------------------------------------------------------------------------------------------
// Closing (docs/accounts.md#closing-an-account)

/** Marks a closure under way; the first request's moment is kept when it is repeated. */
export async function setClosingAt(trx: Trx, accountId: string, at: Date): Promise<void> {
  await trx
    .updateTable('accounts')
    .set({ closing_at: at, updated_at: at })
    .where('id', '=', accountId)
    .where('closing_at', 'is', null)
    .execute();
}

/**
 * Erases what identifies the person, keeping the id (invoices and the ledger refer to it) and the
 * Stripe customer (its invoices carry the billing name and address as issued). The address
 * becomes a tombstone no one can receive mail at, so the real one is free to sign up again.
 */
export async function eraseAccount(trx: Trx, accountId: string, tombstoneEmail: string, at: Date): Promise<void> {
  await trx
    .updateTable('accounts')
    .set({
      name: '',
      organization: '',
      email: tombstoneEmail,
      default_payment_method_id: null,
      payment_method_brand: null,
      payment_method_last4: null,
      checkout_session_id: null,
      monthly_spend_limit_usd: null,
      closed_at: at,
      tokens_not_before: at,
      updated_at: at,
    })
    .where('id', '=', accountId)
    .execute();
}
