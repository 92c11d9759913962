import type { AppContext } from '../context.js';
import { AppError } from '../errors.js';
import { limitsForTier } from '../limits/tier-limits.js';
import { transaction, type Trx } from '../infra/db.js';
import { callStripe, isResourceMissing, stripeFailure, type Stripe } from '../infra/stripe.js';
import type { Tier } from '../../db/schema/accounts.js';
import {
  type Account,
  findAccountById,
  lockAccount,
  setCustomerIdIfUnset,
  setOpenCheckoutSession,
  updateAccountBilling,
} from '../accounts/accounts.repository.js';
import { changeTier } from './tier.service.js';

/*
 * The paid tier through Stripe. Every path follows one order: read and write Stripe first (every
 * write with an idempotency key derived from our ids, so a retry never creates a second customer,
 * session or subscription), then apply the local change in one transaction that re-reads the
 * account under a row lock. A Stripe failure therefore leaves the database untouched, and a
 * crash between the two halves is repaired by simply repeating the request or the webhook.
 */

/** Subscription statuses that mean "paying customer" and "no longer subscribed". */
export const ACTIVE_STATUSES: ReadonlySet<string> = new Set(['active', 'trialing']);
export const ENDED_STATUSES: ReadonlySet<string> = new Set(['canceled', 'unpaid', 'incomplete_expired']);

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface PaymentMethodOnFile {
  brand: string | null;
  last4: string | null;
}

export type SubscriptionOutcome =
  | 'upgraded'
  | 'already_paid'
  | 'checkout_required'
  | 'downgraded'
  | 'already_free'
  | 'payment_method_updated'
  | 'checkout_cancelled';

export interface SubscriptionResult {
  status: SubscriptionOutcome;
  tier: Tier;
  message: string;
  subscription_id: string | null;
  subscription_status: string | null;
  payment_method: PaymentMethodOnFile | null;
  checkout_session_id?: string;
  checkout_url?: string;
  /** ISO time after which the checkout link no longer works. */
  checkout_expires_at?: string;
}

export interface SetupIntentResult {
  setup_intent_id: string;
  client_secret: string;
  status: string;
  tier: Tier;
  message: string;
}

// ---------------------------------------------------------------------------------------------
// Small helpers

async function loadAccount(app: AppContext, accountId: string): Promise<Account> {
  const account = await findAccountById(app.db, accountId);
  if (!account) throw new AppError('not_found', 'Account not found', { code: 'account_not_found' });
  return account;
}

function priceIdOf(app: AppContext): string {
  const price = app.config.stripe.priceId;
  if (price === undefined) {
    throw new AppError('unavailable', 'Billing is not configured on this server (STRIPE_PRICE_ID is not set), so no subscription can be created.', {
      code: 'billing_not_configured',
    });
  }
  return price;
}

const idOf = (v: string | { id: string } | null | undefined): string | null => (v == null ? null : typeof v === 'string' ? v : v.id);

function paymentMethodOf(account: Account): PaymentMethodOnFile | null {
  if (account.default_payment_method_id === null) return null;
  return { brand: account.payment_method_brand, last4: account.payment_method_last4 };
}

function cardOf(pm: Stripe.PaymentMethod): PaymentMethodOnFile {
  return { brand: pm.card?.brand ?? pm.type ?? null, last4: pm.card?.last4 ?? null };
}

function result(account: Account, status: SubscriptionOutcome, message: string, extra: Partial<SubscriptionResult> = {}): SubscriptionResult {
  return {
    status,
    tier: account.tier,
    message,
    subscription_id: account.stripe_subscription_id,
    subscription_status: account.subscription_status,
    payment_method: paymentMethodOf(account),
    ...extra,
  };
}

const ALREADY_PAID = 'The account is already on the paid tier; no second subscription was created.';

/** The customer of this account, created on first need. The idempotency key makes concurrent first calls share one customer. */
async function ensureCustomer(app: AppContext, stripe: Stripe, account: Account): Promise<string> {
  if (account.stripe_customer_id !== null) return account.stripe_customer_id;
  const customer = await callStripe('creating the customer', () =>
    stripe.customers.create(
      { email: account.email, name: account.name, metadata: { account_id: account.id, organization: account.organization } },
      { idempotencyKey: `customer:${account.id}` },
    ),
  );
  await setCustomerIdIfUnset(app.db, account.id, customer.id, app.clock.now());
  const stored = await loadAccount(app, account.id);
  return stored.stripe_customer_id ?? customer.id;
}

/** The customer's default payment method as Stripe has it now (the source of truth for "on file"). */
async function defaultPaymentMethod(stripe: Stripe, customerId: string): Promise<Stripe.PaymentMethod | null> {
  const customer = await callStripe('reading the customer', () =>
    stripe.customers.retrieve(customerId, { expand: ['invoice_settings.default_payment_method'] }),
  );
  if ('deleted' in customer && customer.deleted) return null;
  const pm = (customer as Stripe.Customer).invoice_settings?.default_payment_method;
  return pm && typeof pm === 'object' ? pm : null;
}

/**
 * Makes a payment method the default for the customer's future invoices. Keyed by the setup
 * intent that collected it: each card change is its own operation, so returning to an earlier
 * card later is a new write rather than a replay.
 */
async function setDefaultPaymentMethod(stripe: Stripe, account: Account, customerId: string, paymentMethodId: string, setupIntentId: string): Promise<void> {
  await callStripe('setting the default payment method', () =>
    stripe.customers.update(
      customerId,
      { invoice_settings: { default_payment_method: paymentMethodId } },
      { idempotencyKey: `default-payment-method:${account.id}:${setupIntentId}` },
    ),
  );
}

/**
 * The pay-as-you-go subscription: one metered price, so nothing is charged upfront. The key
 * names the account and the moment it last changed tier, so every attempt to upgrade from this
 * free spell (retries, a second click, the webhook racing the browser) yields the same
 * subscription, while an upgrade after a later downgrade gets a new one.
 */
async function createSubscription(app: AppContext, stripe: Stripe, account: Account, customerId: string): Promise<Stripe.Subscription> {
  const price = priceIdOf(app);
  return callStripe('creating the subscription', () =>
    stripe.subscriptions.create(
      { customer: customerId, items: [{ price }], metadata: { account_id: account.id } },
      { idempotencyKey: `subscription:${account.id}:${account.tier_changed_at.getTime()}` },
    ),
  );
}

type Activation = { outcome: 'upgraded' | 'already_paid' | 'stale'; account: Account };

/**
 * The local half of an upgrade, inside the caller's transaction. `expected` is the account as
 * read before the Stripe calls: if it changed tier meanwhile, the subscription we hold may
 * belong to an earlier spell, so nothing is applied ('stale').
 */
async function activateIn(
  app: AppContext,
  trx: Trx,
  at: Date,
  expected: Account,
  sub: Stripe.Subscription,
  card: { id: string; summary: PaymentMethodOnFile } | null,
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
      ...(card ? { default_payment_method_id: card.id, payment_method_brand: card.summary.brand, payment_method_last4: card.summary.last4 } : {}),
    },
    at,
  );
  await changeTier(app, trx, account.id, 'paid', reason, at);
  const after = await lockAccount(trx, account.id);
  return { outcome: 'upgraded', account: after! };
}

/** Subscribes (idempotently) and upgrades: the shared end of every upgrade path of the API. */
async function subscribeAndUpgrade(
  app: AppContext,
  stripe: Stripe,
  account: Account,
  customerId: string,
  card: { id: string; summary: PaymentMethodOnFile } | null,
  reason: string,
): Promise<SubscriptionResult> {
  const sub = await createSubscription(app, stripe, account, customerId);
  if (!ACTIVE_STATUSES.has(sub.status)) {
    throw new AppError('conflict', `The payment processor created the subscription in status "${sub.status}", so the account stays free. Update the payment method and try again.`, {
      code: 'subscription_not_active',
    });
  }
  const at = app.clock.now();
  const done = await transaction(app.db, (trx) => activateIn(app, trx, at, account, sub, card, reason));
  if (done.outcome === 'stale') {
    throw new AppError('conflict', 'The account changed tier while this upgrade was in progress; nothing was applied. Please retry.', { code: 'tier_changed_concurrently' });
  }
  if (done.outcome === 'already_paid') return result(done.account, 'already_paid', ALREADY_PAID);
  return result(done.account, 'upgraded', 'The account is now on the paid tier (pay-as-you-go, billed monthly for actual usage; nothing was charged now).');
}

// ---------------------------------------------------------------------------------------------
// Checkout sessions and setup intents

function checkoutResult(account: Account, session: Stripe.Checkout.Session): SubscriptionResult {
  return result(
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

async function retrieveSession(stripe: Stripe, sessionId: string): Promise<Stripe.Checkout.Session | null> {
  try {
    return await stripe.checkout.sessions.retrieve(sessionId, { expand: ['setup_intent.payment_method'] });
  } catch (err) {
    if (isResourceMissing(err)) return null;
    throw stripeFailure(err, 'reading the checkout session');
  }
}

async function retrieveSetupIntent(stripe: Stripe, setupIntentId: string): Promise<Stripe.SetupIntent> {
  try {
    return await stripe.setupIntents.retrieve(setupIntentId, { expand: ['payment_method'] });
  } catch (err) {
    if (isResourceMissing(err)) {
      throw new AppError('not_found', `No setup intent ${setupIntentId} exists at the payment processor.`, { code: 'setup_intent_not_found', param: 'setup_intent_id' });
    }
    throw stripeFailure(err, 'reading the setup intent');
  }
}

/**
 * A setup intent may be used by this account only when it belongs to the account's customer,
 * has succeeded, and left a payment method attached to that customer.
 */
function usablePaymentMethod(si: Stripe.SetupIntent, customerId: string | null): Stripe.PaymentMethod {
  if (customerId === null || idOf(si.customer) !== customerId) {
    throw new AppError('permission', 'This setup intent belongs to another customer.', { code: 'setup_intent_not_yours', param: 'setup_intent_id' });
  }
  if (si.status !== 'succeeded') {
    throw new AppError('conflict', `The setup intent has not succeeded (its status is "${si.status}"); finish adding the card first.`, {
      code: 'setup_intent_not_succeeded',
      param: 'setup_intent_id',
    });
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

interface ReadyCheckout {
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
async function checkCompletedSession(app: AppContext, session: Stripe.Checkout.Session): Promise<ReadyCheckout | SubscriptionResult> {
  if (session.mode !== 'setup') {
    throw new AppError('invalid_request', 'This checkout session was not created by the upgrade endpoint.', { code: 'checkout_session_unknown', param: 'session_id' });
  }
  const accountId = session.metadata?.account_id ?? session.client_reference_id;
  const account = accountId && UUID.test(accountId) ? await findAccountById(app.db, accountId) : undefined;
  if (!account) {
    throw new AppError('not_found', 'This checkout session does not belong to any account of this service.', { code: 'checkout_session_unknown', param: 'session_id' });
  }
  const customerId = idOf(session.customer);
  if (customerId === null || customerId !== account.stripe_customer_id || (session.client_reference_id !== null && session.client_reference_id !== account.id)) {
    throw new AppError('permission', "This checkout session's customer is not the account's customer.", { code: 'checkout_session_not_yours', param: 'session_id' });
  }
  if (account.tier === 'paid') return result(account, 'already_paid', ALREADY_PAID);
  if (session.status !== 'complete') {
    throw new AppError('conflict', session.status === 'expired' ? 'This checkout session expired; call the upgrade endpoint again for a new one.' : 'This checkout session is not completed yet.', {
      code: session.status === 'expired' ? 'checkout_session_expired' : 'checkout_not_complete',
      param: 'session_id',
    });
  }
  if (account.checkout_session_id !== session.id) {
    throw new AppError('conflict', 'This checkout session was already used or replaced by a newer one; call the upgrade endpoint again.', {
      code: 'checkout_session_used',
      param: 'session_id',
    });
  }
  const si = session.setup_intent;
  if (!si || typeof si === 'string') {
    throw new AppError('conflict', 'The checkout session carries no setup intent.', { code: 'payment_method_not_attached', param: 'session_id' });
  }
  const paymentMethod = usablePaymentMethod(si, customerId);
  return { account, customerId, setupIntent: si, paymentMethod };
}

async function finishCheckout(app: AppContext, stripe: Stripe, session: Stripe.Checkout.Session, reason: string): Promise<SubscriptionResult> {
  const ready = await checkCompletedSession(app, session);
  if (!('paymentMethod' in ready)) return ready;
  const { account, customerId, setupIntent, paymentMethod } = ready;
  await setDefaultPaymentMethod(stripe, account, customerId, paymentMethod.id, setupIntent.id);
  return subscribeAndUpgrade(app, stripe, account, customerId, { id: paymentMethod.id, summary: cardOf(paymentMethod) }, reason);
}

async function openCheckoutSession(app: AppContext, stripe: Stripe, account: Account, customerId: string): Promise<Stripe.Checkout.Session> {
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
  await setOpenCheckoutSession(app.db, account.id, session.id, app.clock.now());
  return session;
}

// ---------------------------------------------------------------------------------------------
// Endpoints

export interface SubscriptionInfo {
  tier: Tier;
  subscription_id: string | null;
  subscription_status: string | null;
  payment_method: PaymentMethodOnFile | null;
  checkout_pending: boolean;
  models: { id: string; provider: string; input_price_per_million: string; output_price_per_million: string }[];
  limits: { requests_per_minute: number; requests_per_hour: number; requests_per_day: number; tokens_per_day: number };
}

/** GET /v1/subscription/info: from our own records only, so it works without Stripe configured. */
export async function subscriptionInfo(app: AppContext, accountId: string): Promise<SubscriptionInfo> {
  const account = await loadAccount(app, accountId);
  const limits = limitsForTier(app.config, account.tier);
  return {
    tier: account.tier,
    subscription_id: account.stripe_subscription_id,
    subscription_status: account.subscription_status,
    payment_method: paymentMethodOf(account),
    checkout_pending: account.tier === 'free' && account.checkout_session_id !== null,
    models: app.catalog
      .forTier(account.tier)
      .map((m) => ({ id: m.id, provider: m.provider, input_price_per_million: m.input_price_per_million, output_price_per_million: m.output_price_per_million })),
    limits: {
      requests_per_minute: limits.requestsPerMinute,
      requests_per_hour: limits.requestsPerHour,
      requests_per_day: limits.requestsPerDay,
      tokens_per_day: limits.tokensPerDay,
    },
  };
}

/**
 * POST /v1/subscription/upgrade. Paid already: says so (200, status already_paid). A default
 * payment method on file: subscribes and upgrades at once. Otherwise: the open hosted checkout
 * session (reused while open, replaced once expired, finished if it completed meanwhile).
 */
export async function upgrade(app: AppContext, accountId: string): Promise<SubscriptionResult> {
  const account = await loadAccount(app, accountId);
  if (account.tier === 'paid') return result(account, 'already_paid', ALREADY_PAID);
  const stripe = app.stripe;
  priceIdOf(app);
  const customerId = await ensureCustomer(app, stripe, account);
  const current = await loadAccount(app, accountId);
  // A concurrent upgrade may have finished meanwhile. Going on would subscribe again under a key
  // named after the new paid spell, leaving a second live subscription behind.
  if (current.tier === 'paid') return result(current, 'already_paid', ALREADY_PAID);

  const pm = await defaultPaymentMethod(stripe, customerId);
  if (pm) return subscribeAndUpgrade(app, stripe, current, customerId, { id: pm.id, summary: cardOf(pm) }, 'api_upgrade');

  if (current.checkout_session_id !== null) {
    const open = await retrieveSession(stripe, current.checkout_session_id);
    if (open?.status === 'open') return checkoutResult(current, open);
    if (open?.status === 'complete') return finishCheckout(app, stripe, open, 'checkout_success');
  }
  const session = await openCheckoutSession(app, stripe, current, customerId);
  return checkoutResult(current, session);
}

/** GET /v1/subscription/upgrade-success: where the browser lands after the hosted checkout. */
export async function completeCheckout(app: AppContext, sessionId: string): Promise<SubscriptionResult> {
  const stripe = app.stripe;
  const session = await retrieveSession(stripe, sessionId);
  if (!session) {
    throw new AppError('not_found', `No checkout session ${sessionId} exists at the payment processor.`, { code: 'checkout_session_not_found', param: 'session_id' });
  }
  return finishCheckout(app, stripe, session, 'checkout_success');
}

/** POST /v1/subscription/confirm-upgrade: the setup-intent path to the paid tier. */
export async function confirmUpgrade(app: AppContext, accountId: string, setupIntentId: string): Promise<SubscriptionResult> {
  const account = await loadAccount(app, accountId);
  if (account.tier === 'paid') return result(account, 'already_paid', ALREADY_PAID);
  const stripe = app.stripe;
  priceIdOf(app);
  const si = await retrieveSetupIntent(stripe, setupIntentId);
  const pm = usablePaymentMethod(si, account.stripe_customer_id);
  const customerId = account.stripe_customer_id!;
  await setDefaultPaymentMethod(stripe, account, customerId, pm.id, si.id);
  return subscribeAndUpgrade(app, stripe, account, customerId, { id: pm.id, summary: cardOf(pm) }, 'setup_intent_upgrade');
}

/**
 * POST /v1/subscription/update-payment-method: a setup intent for collecting a card with
 * Stripe.js. Meant for paid accounts changing card; also open to free accounts, which need it
 * for the setup-intent upgrade path and to fix a card after a failed payment moved them to free.
 * A fresh intent per request (keyed by the request id): an unused intent costs nothing.
 */
export async function startPaymentMethodUpdate(app: AppContext, accountId: string, requestId: string): Promise<SetupIntentResult> {
  const account = await loadAccount(app, accountId);
  const stripe = app.stripe;
  const customerId = await ensureCustomer(app, stripe, account);
  const si = await callStripe('creating the setup intent', () =>
    stripe.setupIntents.create(
      { customer: customerId, usage: 'off_session', allowed_payment_method_types: ['card'], metadata: { account_id: account.id } },
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
export async function confirmPaymentUpdate(app: AppContext, accountId: string, setupIntentId: string): Promise<SubscriptionResult> {
  const account = await loadAccount(app, accountId);
  const stripe = app.stripe;
  const si = await retrieveSetupIntent(stripe, setupIntentId);
  const pm = usablePaymentMethod(si, account.stripe_customer_id);
  await setDefaultPaymentMethod(stripe, account, account.stripe_customer_id!, pm.id, si.id);
  const card = cardOf(pm);
  await updateAccountBilling(app.db, account.id, { default_payment_method_id: pm.id, payment_method_brand: card.brand, payment_method_last4: card.last4 }, app.clock.now());
  const after = await loadAccount(app, accountId);
  return result(after, 'payment_method_updated', 'The new payment method is the default for future invoices.');
}

/**
 * POST /v1/subscription/downgrade: cancels the Stripe subscription and returns to free at once.
 * The cancellation creates no final invoice: usage already incurred stays in our records and is
 * invoiced by the billing feature, so nothing is lost.
 */
export async function downgrade(app: AppContext, accountId: string): Promise<SubscriptionResult> {
  const account = await loadAccount(app, accountId);
  if (account.tier === 'free') return result(account, 'already_free', 'The account is already on the free tier.');
  const stripe = app.stripe;
  const sub = account.stripe_subscription_id ? await cancelSubscription(stripe, account.id, account.stripe_subscription_id) : null;
  const at = app.clock.now();
  const after = await transaction(app.db, async (trx) => {
    const locked = await lockAccount(trx, accountId);
    if (!locked || locked.tier === 'free') return locked;
    if (sub) await updateAccountBilling(trx, accountId, { subscription_status: sub.status }, at);
    await changeTier(app, trx, accountId, 'free', 'api_downgrade', at);
    return lockAccount(trx, accountId);
  });
  return result(after ?? account, 'downgraded', 'The account is now on the free tier and the subscription is cancelled. Usage already incurred will still be invoiced.');
}

/** Cancels unless Stripe already ended it; a subscription Stripe no longer knows counts as ended. */
export async function cancelSubscription(stripe: Stripe, accountId: string, subscriptionId: string): Promise<Stripe.Subscription | null> {
  let sub: Stripe.Subscription;
  try {
    sub = await stripe.subscriptions.retrieve(subscriptionId);
  } catch (err) {
    if (isResourceMissing(err)) return null;
    throw stripeFailure(err, 'reading the subscription');
  }
  if (ENDED_STATUSES.has(sub.status)) return sub;
  return callStripe('cancelling the subscription', () =>
    stripe.subscriptions.cancel(subscriptionId, { invoice_now: false, prorate: false }, { idempotencyKey: `cancel-subscription:${accountId}:${subscriptionId}` }),
  );
}

/** GET /v1/subscription/upgrade-cancel. */
export function checkoutCancelled(): { status: 'checkout_cancelled'; message: string } {
  return {
    status: 'checkout_cancelled',
    message: 'Checkout was cancelled. Nothing was charged and your tier is unchanged. You can start again with POST /v1/subscription/upgrade.',
  };
}

// Exported for the webhook handler, which runs the same checks and activation inside its own transaction.
export const internals = { checkCompletedSession, setDefaultPaymentMethod, createSubscription, activateIn, defaultPaymentMethod, cardOf, idOf };
