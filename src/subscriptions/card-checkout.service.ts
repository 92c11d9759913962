import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { AppError } from '../errors.js';
import type { Db } from '../infra/db.js';
import { callStripe, type Stripe } from '../infra/stripe.js';
import type { Account } from '../accounts/account.js';
import { findAccount, updateAccountBilling } from '../accounts/account-billing.service.js';
import { getAccount } from '../accounts/accounts.service.js';
import { CARD_CHANGE_PURPOSE, retrieveSession, sessionNotOpenedHere, UUID } from './checkout-sessions.service.js';
import { usablePaymentMethod } from './setup-intents.service.js';
import {
  cardOf,
  defaultPaymentMethod,
  ensureCustomer,
  idOf,
  setDefaultPaymentMethod,
} from './stripe-customer.service.js';
import { subscriptionResult, type SubscriptionResult } from './subscription-result.presenter.js';
import { LATE_RETURN_MS, type StripeGuards } from './stripe-guards.service.js';
import { randomIdPart } from '../ids.js';

// Changing the card on file through Stripe's hosted checkout in setup mode: no card field on our
// pages and no Stripe.js. The session collects a card for the account's customer; the browser's
// return makes it the default for the customer's invoices (and the subscription's, when paid).

export interface CardCheckoutDeps {
  db: Db;
  clock: Clock;
  /** Throws 503 billing_not_configured when STRIPE_SECRET_KEY is not set. */
  stripe: Stripe;
  config: Pick<Config, 'stripe' | 'http'>;
  stripeGuards: StripeGuards;
}

export interface CardCheckout {
  /** The checkout session (cs_…). */
  id: string;
  /** Stripe's hosted page to open. */
  checkout_url: string;
  /** ISO time after which the page no longer works. */
  expires_at: string;
}

/**
 * POST /v1/subscription/payment-method-checkout: a setup-mode checkout session for the account's
 * customer (created on first need). The account's latest session is handed out again while it is
 * open; a new one counts against STRIPE_CARD_CHECKOUTS_PER_ACCOUNT_PER_DAY (429 over it). The
 * idempotency key is drawn by the service, never taken from the request. Cancelling on Stripe's
 * page returns the browser to the console's billing page with nothing changed.
 */
export async function startCardCheckout(app: CardCheckoutDeps, accountId: string): Promise<CardCheckout> {
  const account = await getAccount(app, accountId);
  const stripe = app.stripe;
  const customerId = await ensureCustomer(app, stripe, account);
  const latest = await app.stripeGuards.latestInFlight('card-checkout', account.id);
  const open = latest === undefined ? null : await retrieveSession(stripe, latest);
  if (open?.status === 'open' && open.metadata?.purpose === CARD_CHANGE_PURPOSE && idOf(open.customer) === customerId)
    return cardCheckout(open);

  await app.stripeGuards.admitNew('card-checkout', account.id);
  const base = app.config.http.publicBaseUrl;
  const metadata = { account_id: account.id, purpose: CARD_CHANGE_PURPOSE };
  const session = await callStripe('creating the checkout session', () =>
    stripe.checkout.sessions.create(
      {
        mode: 'setup',
        customer: customerId,
        currency: app.config.stripe.currency,
        allowed_payment_method_types: ['card'],
        client_reference_id: account.id,
        metadata,
        setup_intent_data: { metadata },
        success_url: `${base}/v1/subscription/payment-method-success?session_id={CHECKOUT_SESSION_ID}`,
        cancel_url: `${base}/console/billing?card=cancelled`,
      },
      { idempotencyKey: `payment-method-checkout:${account.id}:${randomIdPart(16)}` },
    ),
  );
  await app.stripeGuards.rememberCheckout(session.id, { accountId: account.id, purpose: 'card' }, session.expires_at);
  await app.stripeGuards.rememberInFlight('card-checkout', account.id, session.id);
  return cardCheckout(session);
}

function cardCheckout(session: Stripe.Checkout.Session): CardCheckout {
  return {
    id: session.id,
    checkout_url: session.url ?? '',
    expires_at: new Date(session.expires_at * 1000).toISOString(),
  };
}

/** The account a card-change session was made for, once it is known to be one and to be the account's. */
async function sessionOwner(app: { db: Db }, session: Stripe.Checkout.Session): Promise<Account> {
  if (session.mode !== 'setup' || session.metadata?.purpose !== CARD_CHANGE_PURPOSE) {
    throw new AppError('invalid_request', 'This checkout session was not created to change a card.', {
      code: 'checkout_session_unknown',
      param: 'session_id',
    });
  }
  const accountId = session.metadata.account_id;
  const account = accountId && UUID.test(accountId) ? await findAccount(app.db, accountId) : undefined;
  if (!account) {
    throw new AppError('not_found', 'This checkout session does not belong to any account of this service.', {
      code: 'checkout_session_unknown',
      param: 'session_id',
    });
  }
  const customerId = idOf(session.customer);
  if (customerId === null || customerId !== account.stripe_customer_id || session.client_reference_id !== account.id) {
    throw new AppError('permission', "This checkout session's customer is not the account's customer.", {
      code: 'checkout_session_not_yours',
      param: 'session_id',
    });
  }
  return account;
}

function requireComplete(session: Stripe.Checkout.Session, now: Date): void {
  const late = now.getTime() > session.expires_at * 1000 + LATE_RETURN_MS;
  if (session.status === 'complete' && !late) return;
  const expired = session.status === 'expired' || late;
  throw new AppError(
    'conflict',
    expired
      ? 'This checkout session expired; the card on file is unchanged. Start a new card change.'
      : 'This checkout session is not completed yet.',
    { code: expired ? 'checkout_session_expired' : 'checkout_not_complete', param: 'session_id' },
  );
}

/**
 * GET /v1/subscription/payment-method-success: where the browser lands after the card-change
 * checkout. Checks the session is a completed card change of the account's own customer, makes its
 * card the customer's default for invoices (and the live subscription's), and records the card
 * Stripe then has as default. Every Stripe write is keyed by the session's setup intent, so a
 * reload repeats nothing; what is recorded is read back from Stripe, so it is always Stripe's.
 */
export async function completeCardCheckout(
  app: Omit<CardCheckoutDeps, 'config'>,
  sessionId: string,
  clientIp: string,
): Promise<SubscriptionResult> {
  // No credential comes with this return: only a card change this service opened is looked up at
  // Stripe, and one already applied is answered from the account. Without Stripe configured,
  // that is the answer (there is no budget to guard).
  const stripe = app.stripe;
  await app.stripeGuards.admitReturn({ clientIp, sessionId });
  const opened = await app.stripeGuards.openedCheckout(sessionId);
  if (!opened) throw sessionNotOpenedHere(sessionId);
  if (opened.purpose !== 'card') {
    throw new AppError('invalid_request', 'This checkout session was not created to change a card.', {
      code: 'checkout_session_unknown',
      param: 'session_id',
    });
  }
  if (opened.applied) {
    const owner = await findAccount(app.db, opened.accountId);
    if (!owner) throw sessionNotOpenedHere(sessionId);
    return cardUpdated(owner);
  }
  const session = await retrieveSession(stripe, sessionId);
  if (!session) {
    throw new AppError('not_found', `No checkout session ${sessionId} exists at the payment processor.`, {
      code: 'checkout_session_not_found',
      param: 'session_id',
    });
  }
  const account = await sessionOwner(app, session);
  requireComplete(session, app.clock.now());
  const si = session.setup_intent;
  if (!si || typeof si === 'string') {
    throw new AppError('conflict', 'The checkout session carries no setup intent.', {
      code: 'payment_method_not_attached',
      param: 'session_id',
    });
  }
  const customerId = account.stripe_customer_id!;
  const pm = usablePaymentMethod(si, customerId);
  await setDefaultPaymentMethod(stripe, account, customerId, pm.id, si.id);
  if (account.tier === 'paid' && account.stripe_subscription_id !== null) {
    const subscriptionId = account.stripe_subscription_id;
    await callStripe("setting the subscription's payment method", () =>
      stripe.subscriptions.update(
        subscriptionId,
        { default_payment_method: pm.id },
        { idempotencyKey: `subscription-payment-method:${account.id}:${si.id}` },
      ),
    );
  }
  const onFile = (await defaultPaymentMethod(stripe, customerId)) ?? pm;
  const card = cardOf(onFile);
  await updateAccountBilling(
    app.db,
    account.id,
    { default_payment_method_id: onFile.id, payment_method_brand: card.brand, payment_method_last4: card.last4 },
    app.clock.now(),
  );
  await app.stripeGuards.markApplied(sessionId, opened);
  return cardUpdated(await getAccount(app, account.id));
}

function cardUpdated(account: Account): SubscriptionResult {
  return subscriptionResult(
    account,
    'payment_method_updated',
    'The card from the checkout is the default for future invoices.',
  );
}
