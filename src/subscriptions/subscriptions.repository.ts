import type { Selectable, Updateable } from 'kysely';
import type { Db, Trx } from '../infra/db.js';
import type { AccountsTable, Tier } from '../../db/schema/accounts.js';

export type BillingAccount = Selectable<AccountsTable>;

/** The Stripe-facing columns of an account; tier and tier_changed_at change only through changeTier. */
export type BillingPatch = Pick<
  Updateable<AccountsTable>,
  | 'stripe_subscription_id'
  | 'subscription_status'
  | 'default_payment_method_id'
  | 'payment_method_brand'
  | 'payment_method_last4'
  | 'checkout_session_id'
>;

export async function findAccount(db: Db | Trx, id: string): Promise<BillingAccount | undefined> {
  return db.selectFrom('accounts').selectAll().where('id', '=', id).executeTakeFirst();
}

/** Reads the account and holds its row until the transaction ends, so concurrent transitions queue up. */
export async function lockAccount(trx: Trx, id: string): Promise<BillingAccount | undefined> {
  return trx.selectFrom('accounts').selectAll().where('id', '=', id).forUpdate().executeTakeFirst();
}

export async function findAccountByCustomer(db: Db | Trx, customerId: string): Promise<BillingAccount | undefined> {
  return db.selectFrom('accounts').selectAll().where('stripe_customer_id', '=', customerId).executeTakeFirst();
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

export async function updateBilling(db: Db | Trx, accountId: string, patch: BillingPatch, at: Date): Promise<void> {
  await db
    .updateTable('accounts')
    .set({ ...patch, updated_at: at })
    .where('id', '=', accountId)
    .execute();
}

export async function setTier(trx: Trx, accountId: string, tier: Tier, at: Date): Promise<void> {
  await trx.updateTable('accounts').set({ tier, tier_changed_at: at, updated_at: at }).where('id', '=', accountId).execute();
}

export async function insertTierChange(trx: Trx, row: { accountId: string; from: Tier; to: Tier; reason: string; at: Date }): Promise<void> {
  await trx
    .insertInto('tier_changes')
    .values({ account_id: row.accountId, from_tier: row.from, to_tier: row.to, reason: row.reason, at: row.at })
    .execute();
}

export async function isWebhookEventProcessed(db: Db | Trx, eventId: string): Promise<boolean> {
  const row = await db.selectFrom('processed_webhook_events').select('event_id').where('event_id', '=', eventId).executeTakeFirst();
  return row !== undefined;
}

/**
 * Claims an event id inside the transaction that applies its effect. False when it was already
 * claimed: a concurrent delivery of the same event waits on the key and then sees the conflict.
 */
export async function claimWebhookEvent(trx: Trx, eventId: string, type: string, at: Date): Promise<boolean> {
  const row = await trx
    .insertInto('processed_webhook_events')
    .values({ event_id: eventId, type, received_at: at })
    .onConflict((oc) => oc.column('event_id').doNothing())
    .returning('event_id')
    .executeTakeFirst();
  return row !== undefined;
}
