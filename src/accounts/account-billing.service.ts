import type { Db, Trx } from '../infra/db.js';
import type { Tier } from '../../db/schema/accounts.js';
import * as accounts from './accounts.repository.js';
import type { AccountBillingPatch } from './accounts.repository.js';
import type { Account } from './account.js';

// What billing and subscriptions read and change on an account: its row, the Stripe-mirrored
// columns, the tier with its audit trail, the spending limit. Other features come here, never to
// the repository (CONVENTIONS.md); a function that must run in the caller's transaction takes `trx`.

/** The account, or undefined when there is none (callers decide whether that is an error). */
export function findAccount(db: Db | Trx, accountId: string): Promise<Account | undefined> {
  return accounts.findAccountById(db, accountId);
}

/** The account of a Stripe customer, if any. */
export function findAccountByCustomer(db: Db | Trx, customerId: string): Promise<Account | undefined> {
  return accounts.findAccountByCustomer(db, customerId);
}

/** A page of accounts with a Stripe customer, in id order after `afterId` (optionally only the given ones). */
export function accountsWithCustomer(
  db: Db,
  afterId: string | null,
  limit: number,
  only?: string[],
): Promise<Account[]> {
  return accounts.accountsWithCustomer(db, afterId, limit, only);
}

/**
 * Reads the account and holds its row until the transaction ends, so tier, billing and limit
 * changes of one account run one at a time.
 */
export function lockAccount(trx: Trx, accountId: string): Promise<Account | undefined> {
  return accounts.lockAccount(trx, accountId);
}

/** Mirrors what Stripe says (subscription, its status, the payment method, the open checkout). */
export function updateAccountBilling(
  db: Db | Trx,
  accountId: string,
  patch: AccountBillingPatch,
  at: Date,
): Promise<void> {
  return accounts.updateAccountBilling(db, accountId, patch, at);
}

/** Remembers the account's Stripe customer; the first one stored is kept. */
export function rememberStripeCustomer(db: Db, accountId: string, customerId: string, at: Date): Promise<void> {
  return accounts.setCustomerIdIfUnset(db, accountId, customerId, at);
}

/** Remembers the checkout session opened for an upgrade, only while the account is still free. */
export function rememberOpenCheckoutSession(db: Db, accountId: string, sessionId: string, at: Date): Promise<void> {
  return accounts.setOpenCheckoutSession(db, accountId, sessionId, at);
}

/** Writes the new tier and its audit row (tier_changes) in the caller's transaction. */
export async function recordTierChange(
  trx: Trx,
  change: { accountId: string; from: Tier; to: Tier; reason: string; at: Date },
): Promise<void> {
  await accounts.setTier(trx, change.accountId, change.to, change.at);
  await accounts.insertTierChange(trx, change);
}

/** Sets (a decimal string, "25.00") or removes (null) the monthly spending limit; returns the account. */
export function setMonthlySpendLimit(trx: Trx, accountId: string, limitUsd: string | null, at: Date): Promise<Account> {
  return accounts.setMonthlySpendLimit(trx, accountId, limitUsd, at);
}

/** Of these accounts, the ids of the paid ones with a monthly spending limit. */
export function paidAccountsWithSpendLimit(db: Db, accountIds: readonly string[]): Promise<string[]> {
  return accounts.paidAccountsWithSpendLimit(db, accountIds);
}
