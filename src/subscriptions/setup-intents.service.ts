import { AppError } from '../errors.js';
import { callStripe, isResourceMissing, stripeFailure, type Stripe } from '../infra/stripe.js';
import { updateAccountBilling } from '../accounts/account-billing.service.js';
import { getAccount } from '../accounts/accounts.service.js';
import type { Tier } from '../../db/schema/accounts.js';
import { subscribeAndUpgrade, type PaidTierDeps } from './paid-tier.service.js';
import { cardOf, ensureCustomer, idOf, setDefaultPaymentMethod } from './stripe-customer.service.js';
import { priceIdOf } from './stripe-subscription.service.js';
import { ALREADY_PAID, subscriptionResult, type SubscriptionResult } from './subscription-result.presenter.js';
import type { StripeGuards } from './stripe-guards.service.js';
import { randomIdPart } from '../ids.js';

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

/** Statuses in which a setup intent still waits for a card, so handing it out again is what the user wants. */
const REUSABLE = new Set<Stripe.SetupIntent.Status>([
  'requires_payment_method',
  'requires_confirmation',
  'requires_action',
]);

/**
 * POST /v1/subscription/update-payment-method: a setup intent for collecting a card with
 * Stripe.js. Meant for paid accounts changing card; also open to free accounts, which need it
 * for the setup-intent upgrade path and to fix a card after a failed payment moved them to free.
 * The account's latest intent is handed out again while it still waits for a card; a new one
 * counts against STRIPE_SETUP_INTENTS_PER_ACCOUNT_PER_DAY (429 over it), so a key cannot mint
 * card forms without end. The idempotency key is drawn by the service, never taken from the request.
 */
export async function startPaymentMethodUpdate(
  app: Pick<PaidTierDeps, 'db' | 'clock' | 'stripe'> & { stripeGuards: StripeGuards },
  accountId: string,
): Promise<SetupIntentResult> {
  const account = await getAccount(app, accountId);
  const stripe = app.stripe;
  const customerId = await ensureCustomer(app, stripe, account);
  const latest = await app.stripeGuards.latestInFlight('setup-intent', account.id);
  const open =
    latest === undefined
      ? undefined
      : await retrieveSetupIntent(stripe, latest).catch((err: unknown) => {
          // One Stripe no longer has is simply not reused; any other failure is the caller's answer.
          if (err instanceof AppError && err.code === 'setup_intent_not_found') return undefined;
          throw err;
        });
  let si: Stripe.SetupIntent;
  if (open && REUSABLE.has(open.status) && idOf(open.customer) === customerId) {
    si = open;
  } else {
    await app.stripeGuards.admitNew('setup-intent', account.id);
    si = await callStripe('creating the setup intent', () =>
      stripe.setupIntents.create(
        {
          customer: customerId,
          usage: 'off_session',
          allowed_payment_method_types: ['card'],
          metadata: { account_id: account.id },
        },
        { idempotencyKey: `setup-intent:${account.id}:${randomIdPart(16)}` },
      ),
    );
    await app.stripeGuards.rememberInFlight('setup-intent', account.id, si.id);
  }
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
