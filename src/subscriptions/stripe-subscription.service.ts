import type { Config } from '../config.js';
import { AppError } from '../errors.js';
import { callStripe, isResourceMissing, stripeFailure, type Stripe } from '../infra/stripe.js';
import type { Account } from '../accounts/account.js';

/** Subscription statuses that mean "paying customer" and "no longer subscribed". */
export const ACTIVE_STATUSES: ReadonlySet<string> = new Set(['active', 'trialing']);
export const ENDED_STATUSES: ReadonlySet<string> = new Set(['canceled', 'unpaid', 'incomplete_expired']);

export function priceIdOf(app: { config: Pick<Config, 'stripe'> }): string {
  const price = app.config.stripe.priceId;
  if (price === undefined) {
    throw new AppError(
      'unavailable',
      'Billing is not configured on this server (STRIPE_PRICE_ID is not set), so no subscription can be created.',
      {
        code: 'billing_not_configured',
      },
    );
  }
  return price;
}

/**
 * The pay-as-you-go subscription: one metered price, so nothing is charged upfront. The key
 * names the account and the moment it last changed tier, so every attempt to upgrade from this
 * free spell (retries, a second click, the webhook racing the browser) yields the same
 * subscription, while an upgrade after a later downgrade gets a new one.
 */
export async function createSubscription(
  app: { config: Pick<Config, 'stripe'> },
  stripe: Stripe,
  account: Account,
  customerId: string,
): Promise<Stripe.Subscription> {
  const price = priceIdOf(app);
  return callStripe('creating the subscription', () =>
    stripe.subscriptions.create(
      { customer: customerId, items: [{ price }], metadata: { account_id: account.id } },
      { idempotencyKey: `subscription:${account.id}:${account.tier_changed_at.getTime()}` },
    ),
  );
}

/** Cancels unless Stripe already ended it; a subscription Stripe no longer knows counts as ended. */
export async function cancelSubscription(
  stripe: Stripe,
  accountId: string,
  subscriptionId: string,
): Promise<Stripe.Subscription | null> {
  let sub: Stripe.Subscription;
  try {
    sub = await stripe.subscriptions.retrieve(subscriptionId);
  } catch (err) {
    if (isResourceMissing(err)) return null;
    throw stripeFailure(err, 'reading the subscription');
  }
  if (ENDED_STATUSES.has(sub.status)) return sub;
  return callStripe('cancelling the subscription', () =>
    stripe.subscriptions.cancel(
      subscriptionId,
      { invoice_now: false, prorate: false },
      { idempotencyKey: `cancel-subscription:${accountId}:${subscriptionId}` },
    ),
  );
}
