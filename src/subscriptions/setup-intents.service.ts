import { AppError } from '../errors.js';
import { callStripe, isResourceMissing, stripeFailure, type Stripe } from '../infra/stripe.js';
import { updateAccountBilling } from '../accounts/account-billing.service.js';
import { getAccount } from '../accounts/accounts.service.js';
import type { Tier } from '../../db/schema/accounts.js';
import { subscribeAndUpgrade, type PaidTierDeps } from './paid-tier.service.js';
import { cardOf, ensureCustomer, idOf, setDefaultPaymentMethod } from './stripe-customer.service.js';
import { priceIdOf } from './stripe-subscription.service.js';
import { ALREADY_PAID, subscriptionResult, type SubscriptionResult } from './subscription-result.presenter.js';

// Setup intents: a card collected with Stripe.js, then used to upgrade or kept as the default.

export interface SetupIntentResult {
  setup_intent_id: string;
  client_secret: string;
  status: string;
  tier: Tier;
  message: string;
}

async function retrieveSetupIntent(stripe: Stripe, setupIntentId: string): Promise<Stripe.SetupIntent> {
  try {
    return await stripe.setupIntents.retrieve(setupIntentId, { expand: ['payment_method'] });
  } catch (err) {
    if (isResourceMissing(err)) {
      throw new AppError('not_found', `No setup intent ${setupIntentId} exists at the payment processor.`, {
        code: 'setup_intent_not_found',
        param: 'setup_intent_id',
      });
    }
    throw stripeFailure(err, 'reading the setup intent');
  }
}

/**
 * A setup intent may be used by this account only when it belongs to the account's customer,
 * has succeeded, and left a payment method attached to that customer.
 */
export function usablePaymentMethod(si: Stripe.SetupIntent, customerId: string | null): Stripe.PaymentMethod {
  if (customerId === null || idOf(si.customer) !== customerId) {
    throw new AppError('permission', 'This setup intent belongs to another customer.', {
      code: 'setup_intent_not_yours',
      param: 'setup_intent_id',
    });
  }
  if (si.status !== 'succeeded') {
    throw new AppError(
      'conflict',
      `The setup intent has not succeeded (its status is "${si.status}"); finish adding the card first.`,
      {
        code: 'setup_intent_not_succeeded',
        param: 'setup_intent_id',
      },
    );
  }
  const pm = si.payment_method;
  if (!pm || typeof pm === 'string' || idOf(pm.customer) !== customerId) {
    throw new AppError('conflict', 'The setup intent left no payment method attached to your customer.', {
      code: 'payment_method_not_attached',
      param: 'setup_intent_id',
    });
  }
  return pm;
}

/** POST /v1/subscription/confirm-upgrade: the setup-intent path to the paid tier. */
export async function confirmUpgrade(
  app: PaidTierDeps,
  accountId: string,
  setupIntentId: string,
): Promise<SubscriptionResult> {
  const account = await getAccount(app, accountId);
  if (account.tier === 'paid') return subscriptionResult(account, 'already_paid', ALREADY_PAID);
  const stripe = app.stripe;
  priceIdOf(app);
  const si = await retrieveSetupIntent(stripe, setupIntentId);
  const pm = usablePaymentMethod(si, account.stripe_customer_id);
  const customerId = account.stripe_customer_id!;
  await setDefaultPaymentMethod(stripe, account, customerId, pm.id, si.id);
  return subscribeAndUpgrade(
    app,
    stripe,
    account,
    customerId,
    { id: pm.id, summary: cardOf(pm) },
    'setup_intent_upgrade',
  );
}

/**
 * POST /v1/subscription/update-payment-method: a setup intent for collecting a card with
 * Stripe.js. Meant for paid accounts changing card; also open to free accounts, which need it
 * for the setup-intent upgrade path and to fix a card after a failed payment moved them to free.
 * A fresh intent per request (keyed by the request id): an unused intent costs nothing.
 */
export async function startPaymentMethodUpdate(
  app: Pick<PaidTierDeps, 'db' | 'clock' | 'stripe'>,
  accountId: string,
  requestId: string,
): Promise<SetupIntentResult> {
  const account = await getAccount(app, accountId);
  const stripe = app.stripe;
  const customerId = await ensureCustomer(app, stripe, account);
  const si = await callStripe('creating the setup intent', () =>
    stripe.setupIntents.create(
      {
        customer: customerId,
        usage: 'off_session',
        allowed_payment_method_types: ['card'],
        metadata: { account_id: account.id },
      },
      { idempotencyKey: `setup-intent:${account.id}:${requestId}` },
    ),
  );
  return {
    setup_intent_id: si.id,
    client_secret: si.client_secret ?? '',
    status: si.status,
    tier: account.tier,
    message:
      account.tier === 'paid'
        ? 'Confirm this setup intent with Stripe.js (client_secret), then call confirm-payment-update with its id.'
        : 'Confirm this setup intent with Stripe.js (client_secret), then call confirm-upgrade (to upgrade) or confirm-payment-update (to only store the card) with its id.',
  };
}

/** POST /v1/subscription/confirm-payment-update: the new card becomes the default for future invoices. */
export async function confirmPaymentUpdate(
  app: Pick<PaidTierDeps, 'db' | 'clock' | 'stripe'>,
  accountId: string,
  setupIntentId: string,
): Promise<SubscriptionResult> {
  const account = await getAccount(app, accountId);
  const stripe = app.stripe;
  const si = await retrieveSetupIntent(stripe, setupIntentId);
  const pm = usablePaymentMethod(si, account.stripe_customer_id);
  await setDefaultPaymentMethod(stripe, account, account.stripe_customer_id!, pm.id, si.id);
  const card = cardOf(pm);
  await updateAccountBilling(
    app.db,
    account.id,
    { default_payment_method_id: pm.id, payment_method_brand: card.brand, payment_method_last4: card.last4 },
    app.clock.now(),
  );
  const after = await getAccount(app, accountId);
  return subscriptionResult(
    after,
    'payment_method_updated',
    'The new payment method is the default for future invoices.',
  );
}
