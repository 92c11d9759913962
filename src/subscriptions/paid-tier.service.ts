import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { AppError } from '../errors.js';
import { transaction, type Db, type Trx } from '../infra/db.js';
import type { Stripe } from '../infra/stripe.js';
import type { Account } from '../accounts/account.js';
import { lockAccount, updateAccountBilling } from '../accounts/account-billing.service.js';
import { getAccount } from '../accounts/accounts.service.js';
import type { PaymentMethodOnFile } from './stripe-customer.service.js';
import { ACTIVE_STATUSES, cancelSubscription, createSubscription } from './stripe-subscription.service.js';
import { ALREADY_PAID, subscriptionResult, type SubscriptionResult } from './subscription-result.presenter.js';
import { changeTier, type TierDeps } from './tier.service.js';

/*
 * The paid tier through Stripe. Every path follows one order: read and write Stripe first (every
 * write with an idempotency key derived from our ids, so a retry never creates a second customer,
 * session or subscription), then apply the local change in one transaction that re-reads the
 * account under a row lock. A Stripe failure therefore leaves the database untouched, and a
 * crash between the two halves is repaired by simply repeating the request or the webhook.
 */

/** What moving an account onto and off the paid tier works with. */
export interface PaidTierDeps extends TierDeps {
  db: Db;
  clock: Clock;
  config: Pick<Config, 'stripe' | 'redis'>;
  /** Throws 503 billing_not_configured when STRIPE_SECRET_KEY is not set. */
  stripe: Stripe;
}

/** A payment method collected for the account, as it will be stored on it. */
export type CardOnFile = { id: string; summary: PaymentMethodOnFile };

export type Activation = { outcome: 'upgraded' | 'already_paid' | 'stale'; account: Account };

/**
 * The local half of an upgrade, inside the caller's transaction. `expected` is the account as
 * read before the Stripe calls: if it changed tier meanwhile, the subscription we hold may
 * belong to an earlier spell, so nothing is applied ('stale').
 */
export async function activatePaidTier(
  app: TierDeps,
  trx: Trx,
  at: Date,
  expected: Account,
  sub: Stripe.Subscription,
  card: CardOnFile | null,
  reason: string,
): Promise<Activation> {
  const account = await lockAccount(trx, expected.id);
  if (!account) throw new AppError('not_found', 'Account not found', { code: 'account_not_found' });
  if (account.tier === 'paid') return { outcome: 'already_paid', account };
  if (account.tier_changed_at.getTime() !== expected.tier_changed_at.getTime()) return { outcome: 'stale', account };
  await updateAccountBilling(
    trx,
    account.id,
    {
      stripe_subscription_id: sub.id,
      subscription_status: sub.status,
      checkout_session_id: null,
      ...(card
        ? {
            default_payment_method_id: card.id,
            payment_method_brand: card.summary.brand,
            payment_method_last4: card.summary.last4,
          }
        : {}),
    },
    at,
  );
  await changeTier(app, trx, account.id, 'paid', reason, at);
  const after = await lockAccount(trx, account.id);
  return { outcome: 'upgraded', account: after! };
}

/** Subscribes (idempotently) and upgrades: the shared end of every upgrade path of the API. */
export async function subscribeAndUpgrade(
  app: Omit<PaidTierDeps, 'stripe'>,
  stripe: Stripe,
  account: Account,
  customerId: string,
  card: CardOnFile | null,
  reason: string,
): Promise<SubscriptionResult> {
  const sub = await createSubscription(app, stripe, account, customerId);
  if (!ACTIVE_STATUSES.has(sub.status)) {
    throw new AppError(
      'conflict',
      `The payment processor created the subscription in status "${sub.status}", so the account stays free. Update the payment method and try again.`,
      {
        code: 'subscription_not_active',
      },
    );
  }
  const at = app.clock.now();
  const done = await transaction(app.db, (trx) => activatePaidTier(app, trx, at, account, sub, card, reason));
  if (done.outcome === 'stale') {
    throw new AppError(
      'conflict',
      'The account changed tier while this upgrade was in progress; nothing was applied. Please retry.',
      { code: 'tier_changed_concurrently' },
    );
  }
  if (done.outcome === 'already_paid') return subscriptionResult(done.account, 'already_paid', ALREADY_PAID);
  return subscriptionResult(
    done.account,
    'upgraded',
    'The account is now on the paid tier (pay-as-you-go, billed monthly for actual usage; nothing was charged now).',
  );
}

/**
 * POST /v1/subscription/downgrade: cancels the Stripe subscription and returns to free at once.
 * The cancellation creates no final invoice: usage already incurred stays in our records and is
 * invoiced by the billing feature, so nothing is lost.
 */
export async function downgrade(
  app: TierDeps & Pick<PaidTierDeps, 'db' | 'clock' | 'stripe'>,
  accountId: string,
): Promise<SubscriptionResult> {
  const account = await getAccount(app, accountId);
  if (account.tier === 'free')
    return subscriptionResult(account, 'already_free', 'The account is already on the free tier.');
  const stripe = app.stripe;
  const sub = account.stripe_subscription_id
    ? await cancelSubscription(stripe, account.id, account.stripe_subscription_id)
    : null;
  const at = app.clock.now();
  const after = await transaction(app.db, async (trx) => {
    const locked = await lockAccount(trx, accountId);
    if (!locked || locked.tier === 'free') return locked;
    if (sub) await updateAccountBilling(trx, accountId, { subscription_status: sub.status }, at);
    await changeTier(app, trx, accountId, 'free', 'api_downgrade', at);
    return lockAccount(trx, accountId);
  });
  return subscriptionResult(
    after ?? account,
    'downgraded',
    'The account is now on the free tier and the subscription is cancelled. Usage already incurred will still be invoiced.',
  );
}

/**
 * Closing an account: its subscription cancelled in Stripe (no proration, no invoice of Stripe's
 * own: the final invoice bills the usage). Nothing to do without one, or once it ended, so a
 * repeated closure asks Stripe nothing. The tier changes with the closure's last step.
 * True when a subscription was cancelled (now or by an earlier attempt).
 */
export async function cancelSubscriptionForClosing(
  app: Pick<PaidTierDeps, 'db' | 'clock' | 'stripe'>,
  account: Account,
): Promise<boolean> {
  const subscriptionId = account.stripe_subscription_id;
  if (subscriptionId === null) return false;
  if (account.subscription_status === 'canceled') return true;
  const sub = await cancelSubscription(app.stripe, account.id, subscriptionId);
  const status = sub?.status ?? 'canceled';
  await updateAccountBilling(app.db, account.id, { subscription_status: status }, app.clock.now());
  return status === 'canceled';
}
