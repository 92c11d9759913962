import type { Config } from '../config.js';
import { AppError } from '../errors.js';
import type { Db } from '../infra/db.js';
import { callStripe, isResourceMissing, stripeFailure, type Stripe } from '../infra/stripe.js';
import type { Account } from '../accounts/account.js';
import { findAccount, rememberOpenCheckoutSession } from '../accounts/account-billing.service.js';
import { getAccount } from '../accounts/accounts.service.js';
import { subscribeAndUpgrade, type PaidTierDeps } from './paid-tier.service.js';
import { usablePaymentMethod } from './setup-intents.service.js';
import {
  cardOf,
  defaultPaymentMethod,
  ensureCustomer,
  idOf,
  setDefaultPaymentMethod,
} from './stripe-customer.service.js';
import { priceIdOf } from './stripe-subscription.service.js';
import { ALREADY_PAID, subscriptionResult, type SubscriptionResult } from './subscription-result.presenter.js';
import type { StripeGuards } from './stripe-guards.service.js';

// The upgrade endpoint and Stripe's hosted checkout: a session opened in setup mode collects a
// card, and its completion (the browser's return or the webhook) upgrades the account.

/** What the upgrade and checkout paths work with: the paid tier's parts and the public base URL for Stripe's return links. */
export interface CheckoutDeps extends PaidTierDeps {
  config: Pick<Config, 'stripe' | 'redis' | 'http'>;
  stripeGuards: StripeGuards;
}

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** metadata.purpose of a setup-mode session that changes the card on file (card-checkout.service.ts); never an upgrade. */
export const CARD_CHANGE_PURPOSE = 'payment_method_update';

function checkoutResult(account: Account, session: Stripe.Checkout.Session): SubscriptionResult {
  return subscriptionResult(
    account,
    'checkout_required',
    'No payment method is on file. Open checkout_url to add one (nothing is charged now); the account is upgraded as soon as the checkout completes.',
    {
      tier: 'free',
      checkout_session_id: session.id,
      checkout_url: session.url ?? '',
      checkout_expires_at: new Date(session.expires_at * 1000).toISOString(),
    },
  );
}

/** A checkout session with its setup intent and that intent's payment method expanded; null when Stripe has none by that id. */
export async function retrieveSession(stripe: Stripe, sessionId: string): Promise<Stripe.Checkout.Session | null> {
  try {
    return await stripe.checkout.sessions.retrieve(sessionId, { expand: ['setup_intent.payment_method'] });
  } catch (err) {
    if (isResourceMissing(err)) return null;
    throw stripeFailure(err, 'reading the checkout session');
  }
}

export interface ReadyCheckout {
  account: Account;
  customerId: string;
  setupIntent: Stripe.SetupIntent;
  paymentMethod: Stripe.PaymentMethod;
}

/**
 * Everything a completed checkout session must satisfy before it may upgrade anyone: setup
 * mode, complete, made by this service for one of its accounts (metadata and customer agree),
 * still the account's open session (a session is used once), and a succeeded setup intent.
 * Returns an already-paid result instead when there is nothing left to do.
 */
export async function checkCompletedSession(
  app: { db: Db },
  session: Stripe.Checkout.Session,
): Promise<ReadyCheckout | SubscriptionResult> {
  if (session.mode !== 'setup' || session.metadata?.purpose === CARD_CHANGE_PURPOSE) {
    throw new AppError('invalid_request', 'This checkout session was not created by the upgrade endpoint.', {
      code: 'checkout_session_unknown',
      param: 'session_id',
    });
  }
  const accountId = session.metadata?.account_id ?? session.client_reference_id;
  const account = accountId && UUID.test(accountId) ? await findAccount(app.db, accountId) : undefined;
  if (!account) {
    throw new AppError('not_found', 'This checkout session does not belong to any account of this service.', {
      code: 'checkout_session_unknown',
      param: 'session_id',
    });
  }
  const customerId = idOf(session.customer);
  if (
    customerId === null ||
    customerId !== account.stripe_customer_id ||
    (session.client_reference_id !== null && session.client_reference_id !== account.id)
  ) {
    throw new AppError('permission', "This checkout session's customer is not the account's customer.", {
      code: 'checkout_session_not_yours',
      param: 'session_id',
    });
  }
  if (account.tier === 'paid') return subscriptionResult(account, 'already_paid', ALREADY_PAID);
  if (session.status !== 'complete') {
    throw new AppError(
      'conflict',
      session.status === 'expired'
        ? 'This checkout session expired; call the upgrade endpoint again for a new one.'
        : 'This checkout session is not completed yet.',
      {
        code: session.status === 'expired' ? 'checkout_session_expired' : 'checkout_not_complete',
        param: 'session_id',
      },
    );
  }
  if (account.checkout_session_id !== session.id) {
    throw new AppError(
      'conflict',
      'This checkout session was already used or replaced by a newer one; call the upgrade endpoint again.',
      {
        code: 'checkout_session_used',
        param: 'session_id',
      },
    );
  }
  const si = session.setup_intent;
  if (!si || typeof si === 'string') {
    throw new AppError('conflict', 'The checkout session carries no setup intent.', {
      code: 'payment_method_not_attached',
      param: 'session_id',
    });
  }
  const paymentMethod = usablePaymentMethod(si, customerId);
  return { account, customerId, setupIntent: si, paymentMethod };
}

async function finishCheckout(
  app: Omit<PaidTierDeps, 'stripe'>,
  stripe: Stripe,
  session: Stripe.Checkout.Session,
  reason: string,
): Promise<SubscriptionResult> {
  const ready = await checkCompletedSession(app, session);
  if (!('paymentMethod' in ready)) return ready;
  const { account, customerId, setupIntent, paymentMethod } = ready;
  await setDefaultPaymentMethod(stripe, account, customerId, paymentMethod.id, setupIntent.id);
  return subscribeAndUpgrade(
    app,
    stripe,
    account,
    customerId,
    { id: paymentMethod.id, summary: cardOf(paymentMethod) },
    reason,
  );
}

async function openCheckoutSession(
  app: Pick<CheckoutDeps, 'db' | 'clock' | 'config' | 'stripeGuards'>,
  stripe: Stripe,
  account: Account,
  customerId: string,
): Promise<Stripe.Checkout.Session> {
  const base = app.config.http.publicBaseUrl;
  // A new key per free spell and per replaced session: an expired session is followed by a fresh one.
  const key = `checkout:${account.id}:${account.tier_changed_at.getTime()}:${account.checkout_session_id ?? 'first'}`;
  const session = await callStripe('creating the checkout session', () =>
    stripe.checkout.sessions.create(
      {
        mode: 'setup',
        customer: customerId,
        currency: app.config.stripe.currency,
        allowed_payment_method_types: ['card'],
        client_reference_id: account.id,
        metadata: { account_id: account.id },
        setup_intent_data: { metadata: { account_id: account.id } },
        success_url: `${base}/v1/subscription/upgrade-success?session_id={CHECKOUT_SESSION_ID}`,
        cancel_url: `${base}/v1/subscription/upgrade-cancel`,
      },
      { idempotencyKey: key },
    ),
  );
  await app.stripeGuards.rememberCheckout(
    session.id,
    { accountId: account.id, purpose: 'upgrade' },
    session.expires_at,
  );
  await rememberOpenCheckoutSession(app.db, account.id, session.id, app.clock.now());
  return session;
}

/**
 * POST /v1/subscription/upgrade. Paid already: says so (200, status already_paid). A default
 * payment method on file: subscribes and upgrades at once. Otherwise: the open hosted checkout
 * session (reused while open, replaced once expired, finished if it completed meanwhile).
 */
export async function upgrade(app: CheckoutDeps, accountId: string): Promise<SubscriptionResult> {
  const account = await getAccount(app, accountId);
  if (account.tier === 'paid') return subscriptionResult(account, 'already_paid', ALREADY_PAID);
  const stripe = app.stripe;
  priceIdOf(app);
  const customerId = await ensureCustomer(app, stripe, account);
  const current = await getAccount(app, accountId);
  // A concurrent upgrade may have finished meanwhile. Going on would subscribe again under a key
  // named after the new paid spell, leaving a second live subscription behind.
  if (current.tier === 'paid') return subscriptionResult(current, 'already_paid', ALREADY_PAID);

  const pm = await defaultPaymentMethod(stripe, customerId);
  if (pm)
    return subscribeAndUpgrade(app, stripe, current, customerId, { id: pm.id, summary: cardOf(pm) }, 'api_upgrade');

  if (current.checkout_session_id !== null) {
    const open = await retrieveSession(stripe, current.checkout_session_id);
    if (open?.status === 'open') {
      await app.stripeGuards.rememberCheckout(open.id, { accountId: current.id, purpose: 'upgrade' }, open.expires_at);
      return checkoutResult(current, open);
    }
    if (open?.status === 'complete') return finishCheckout(app, stripe, open, 'checkout_success');
  }
  const session = await openCheckoutSession(app, stripe, current, customerId);
  return checkoutResult(current, session);
}

/** The refusal of a return naming a session this service did not open (or opened too long ago). */
export function sessionNotOpenedHere(sessionId: string): AppError {
  return new AppError(
    'not_found',
    `No checkout session ${sessionId} was opened by this service, or it is too old to return to.`,
    {
      code: 'checkout_session_not_found',
      param: 'session_id',
    },
  );
}

/**
 * GET /v1/subscription/upgrade-success: where the browser lands after the hosted checkout. It
 * takes no credential, so it asks Stripe only about a session this service opened for an
 * upgrade that is still the account's open one: a session it never opened is 404, and one the
 * webhook (or an earlier return) already turned into the paid tier is answered from the account.
 */
export async function completeCheckout(
  app: PaidTierDeps & Pick<CheckoutDeps, 'stripeGuards'>,
  sessionId: string,
  clientIp: string,
): Promise<SubscriptionResult> {
  // Without Stripe configured, that is the answer (there is no budget to guard).
  const stripe = app.stripe;
  await app.stripeGuards.admitReturn({ clientIp, sessionId });
  const opened = await app.stripeGuards.openedCheckout(sessionId);
  if (!opened) throw sessionNotOpenedHere(sessionId);
  if (opened.purpose !== 'upgrade') {
    throw new AppError('invalid_request', 'This checkout session was not created by the upgrade endpoint.', {
      code: 'checkout_session_unknown',
      param: 'session_id',
    });
  }
  const account = await findAccount(app.db, opened.accountId);
  if (!account) throw sessionNotOpenedHere(sessionId);
  if (account.tier === 'paid') return subscriptionResult(account, 'already_paid', ALREADY_PAID);
  if (account.checkout_session_id !== sessionId) {
    throw new AppError(
      'conflict',
      'This checkout session was already used or replaced by a newer one; call the upgrade endpoint again.',
      { code: 'checkout_session_used', param: 'session_id' },
    );
  }
  const session = await retrieveSession(stripe, sessionId);
  if (!session) {
    throw new AppError('not_found', `No checkout session ${sessionId} exists at the payment processor.`, {
      code: 'checkout_session_not_found',
      param: 'session_id',
    });
  }
  return finishCheckout(app, stripe, session, 'checkout_success');
}

/** GET /v1/subscription/upgrade-cancel. */
export function checkoutCancelled(): { status: 'checkout_cancelled'; message: string } {
  return {
    status: 'checkout_cancelled',
    message:
      'Checkout was cancelled. Nothing was charged and your tier is unchanged. You can start again with POST /v1/subscription/upgrade.',
  };
}
