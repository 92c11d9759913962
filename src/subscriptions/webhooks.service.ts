import type { RedisClient } from '../infra/redis.js';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { AppError, isAppError } from '../errors.js';
import { transaction, type Db, type Trx } from '../infra/db.js';
import {
  isResourceMissing,
  stripeConfigured,
  stripeFailure,
  verifyWebhookEvent,
  type Stripe,
} from '../infra/stripe.js';
import { findAccountByCustomer, lockAccount, updateAccountBilling } from '../accounts/account-billing.service.js';
import { checkCompletedSession } from './checkout-sessions.service.js';
import { activatePaidTier } from './paid-tier.service.js';
import { cardOf, defaultPaymentMethod, idOf, setDefaultPaymentMethod } from './stripe-customer.service.js';
import {
  ACTIVE_STATUSES,
  cancelSubscription,
  createSubscription,
  ENDED_STATUSES,
} from './stripe-subscription.service.js';
import { changeTier } from './tier.service.js';
import { claimWebhookEvent, isWebhookEventProcessed } from './webhook-events.repository.js';

/** What handling Stripe's events works with. */
export interface WebhookDeps {
  db: Db;
  redis: RedisClient;
  clock: Clock;
  log: Logger;
  config: Pick<Config, 'stripe' | 'redis'>;
  /** Throws 503 billing_not_configured when STRIPE_SECRET_KEY is not set. */
  stripe: Stripe;
}

/** The four Stripe events that move an account between tiers (the interface's webhook table). */
export const HANDLED_EVENTS = [
  'checkout.session.completed',
  'customer.subscription.created',
  'customer.subscription.deleted',
  'invoice.payment_failed',
] as const;
type HandledEvent = (typeof HANDLED_EVENTS)[number];
const isHandled = (type: string): type is HandledEvent => (HANDLED_EVENTS as readonly string[]).includes(type);

export interface WebhookResult {
  received: true;
  event_id: string;
  type: string;
  /** What the event did: upgraded, downgraded, duplicate, ignored, no_change, not_processed. */
  outcome: string;
  detail?: string;
}

/** The local half of an event's effect, applied in the transaction that records the event id. */
type Effect = (trx: Trx, at: Date) => Promise<string>;
type Plan = { effect: Effect } | { ignored: string };

const ignore = (why: string): Plan => ({ ignored: why });

/**
 * POST /v1/webhooks/processor. The signature is checked against the exact bytes with the
 * webhook secret; anything else is a 400 with no effect. Each event is decided from the current
 * state of its object, retrieved from Stripe, never from the payload or arrival order, so
 * duplicates, reordering and stale events converge on the right tier. Its effect and its event
 * id commit in one transaction: a redelivery finds the id and does nothing; a crash before the
 * commit leaves neither, and Stripe's redelivery repeats the (idempotent) Stripe writes.
 */
export async function handleWebhook(
  app: WebhookDeps,
  rawBody: string | undefined,
  signature: string | undefined,
): Promise<WebhookResult> {
  const secret = app.config.stripe.webhookSecret;
  if (secret === undefined) {
    throw new AppError(
      'unavailable',
      'Webhooks are not configured on this server (STRIPE_WEBHOOK_SECRET is not set); the event cannot be verified.',
      {
        code: 'webhook_not_configured',
      },
    );
  }
  if (!signature)
    throw new AppError('invalid_request', 'Missing Stripe-Signature header', { code: 'invalid_signature' });
  let event: Stripe.Event;
  try {
    event = verifyWebhookEvent(rawBody ?? '', signature, secret, app.clock.now().getTime());
  } catch (err) {
    app.log.warn({ err: (err as Error).message }, 'webhook rejected: signature verification failed');
    throw new AppError('invalid_request', 'Invalid webhook signature', { code: 'invalid_signature' });
  }
  const base = { received: true as const, event_id: event.id, type: event.type };

  if (await isWebhookEventProcessed(app.db, event.id)) return { ...base, outcome: 'duplicate' };

  if (!isHandled(event.type)) {
    await record(app, event, null);
    return { ...base, outcome: 'ignored', detail: 'event type not used by this service' };
  }
  if (!stripeConfigured(app.config)) {
    // Acknowledged, not recorded: the current state cannot be read without an API key.
    app.log.warn(
      { eventId: event.id, type: event.type },
      'webhook acknowledged but not processed: STRIPE_SECRET_KEY is not set, so the current state cannot be retrieved',
    );
    return {
      ...base,
      outcome: 'not_processed',
      detail: 'STRIPE_SECRET_KEY is not set; the current state cannot be retrieved',
    };
  }

  const plan = await planEffect(app, app.stripe, event.type, event.data.object as unknown as { id: string });
  const outcome = await record(app, event, 'effect' in plan ? plan.effect : null);
  if (outcome === null) return { ...base, outcome: 'duplicate' };
  const detail = 'ignored' in plan ? plan.ignored : undefined;
  if (detail) app.log.info({ eventId: event.id, type: event.type, detail }, 'webhook: no tier change');
  return { ...base, outcome, ...(detail ? { detail } : {}) };
}

/** Records the event id and applies the effect in one transaction; null when someone else recorded it first. */
async function record(app: WebhookDeps, event: Stripe.Event, effect: Effect | null): Promise<string | null> {
  const at = app.clock.now();
  return transaction(app.db, async (trx) => {
    if (!(await claimWebhookEvent(trx, event.id, event.type, at))) return null;
    return effect ? effect(trx, at) : 'ignored';
  });
}

async function planEffect(app: WebhookDeps, stripe: Stripe, type: HandledEvent, object: { id: string }): Promise<Plan> {
  switch (type) {
    case 'checkout.session.completed':
      return planCheckoutCompleted(app, stripe, object.id);
    case 'customer.subscription.created':
      return planSubscriptionCreated(app, stripe, object.id);
    case 'customer.subscription.deleted':
      return planSubscriptionEnded(app, stripe, object.id);
    case 'invoice.payment_failed':
      return planPaymentFailed(app, stripe, object.id);
  }
}

/** Stripe retrievals of the event's object; a vanished object means there is nothing to apply. */
async function retrieve<T>(doing: string, call: () => Promise<T>): Promise<T | null> {
  try {
    return await call();
  } catch (err) {
    if (isResourceMissing(err)) return null;
    throw stripeFailure(err, doing);
  }
}

async function planCheckoutCompleted(app: WebhookDeps, stripe: Stripe, sessionId: string): Promise<Plan> {
  const session = await retrieve('reading the checkout session', () =>
    stripe.checkout.sessions.retrieve(sessionId, { expand: ['setup_intent.payment_method'] }),
  );
  if (!session) return ignore('the checkout session no longer exists');
  let ready;
  try {
    ready = await checkCompletedSession(app, session);
  } catch (err) {
    // A session that is not ours, not complete or already used is not an error for Stripe to retry.
    if (isAppError(err) && err.status < 500) return ignore(err.message);
    throw err;
  }
  if (!('paymentMethod' in ready)) return ignore('the account is already on the paid tier');
  const { account, customerId, setupIntent, paymentMethod } = ready;
  await setDefaultPaymentMethod(stripe, account, customerId, paymentMethod.id, setupIntent.id);
  const sub = await createSubscription(app, stripe, account, customerId);
  if (!ACTIVE_STATUSES.has(sub.status)) return ignore(`the subscription is ${sub.status}`);
  const card = { id: paymentMethod.id, summary: cardOf(paymentMethod) };
  return {
    effect: async (trx, at) => {
      const done = await activatePaidTier(app, trx, at, account, sub, card, 'webhook:checkout.session.completed');
      return done.outcome === 'upgraded' ? 'upgraded' : 'no_change';
    },
  };
}

async function planSubscriptionCreated(app: WebhookDeps, stripe: Stripe, subscriptionId: string): Promise<Plan> {
  const sub = await retrieve('reading the subscription', () => stripe.subscriptions.retrieve(subscriptionId));
  if (!sub) return ignore('the subscription no longer exists');
  if (!ACTIVE_STATUSES.has(sub.status)) return ignore(`the subscription is now ${sub.status}`);
  const price = app.config.stripe.priceId;
  if (price !== undefined && !sub.items.data.some((item) => item.price.id === price))
    return ignore('the subscription is not for the pay-as-you-go price');
  const customerId = idOf(sub.customer);
  const account = customerId ? await findAccountByCustomer(app.db, customerId) : undefined;
  if (!account) return ignore('the subscription belongs to no account of this service');
  const pm = await defaultPaymentMethod(stripe, customerId!);
  return {
    effect: async (trx, at) => {
      const locked = await lockAccount(trx, account.id);
      if (!locked || locked.tier === 'paid') return 'no_change';
      await updateAccountBilling(
        trx,
        locked.id,
        {
          stripe_subscription_id: sub.id,
          subscription_status: sub.status,
          checkout_session_id: null,
          ...(pm
            ? {
                default_payment_method_id: pm.id,
                payment_method_brand: cardOf(pm).brand,
                payment_method_last4: cardOf(pm).last4,
              }
            : {}),
        },
        at,
      );
      await changeTier(app, trx, locked.id, 'paid', 'webhook:customer.subscription.created', at);
      return 'upgraded';
    },
  };
}

async function planSubscriptionEnded(app: WebhookDeps, stripe: Stripe, subscriptionId: string): Promise<Plan> {
  const sub = await retrieve('reading the subscription', () => stripe.subscriptions.retrieve(subscriptionId));
  // Stripe keeps cancelled subscriptions retrievable; one it does not know cannot be ours.
  if (!sub) return ignore('the subscription does not exist');
  if (!ENDED_STATUSES.has(sub.status)) return ignore(`the subscription is still ${sub.status}`);
  const customerId = idOf(sub.customer);
  const account = customerId ? await findAccountByCustomer(app.db, customerId) : undefined;
  if (!account) return ignore('the subscription belongs to no account of this service');
  return {
    effect: async (trx, at) => {
      const locked = await lockAccount(trx, account.id);
      // An old subscription ending says nothing about the account's current one.
      if (!locked || locked.stripe_subscription_id !== sub.id) return 'no_change';
      await updateAccountBilling(trx, locked.id, { subscription_status: sub.status }, at);
      const change = await changeTier(app, trx, locked.id, 'free', 'webhook:customer.subscription.deleted', at);
      return change.changed ? 'downgraded' : 'no_change';
    },
  };
}

/**
 * A failed invoice payment moves the account to free (the interface's table). Decided from the
 * invoice as it is now: one paid or voided since the failure changes nothing. The subscription
 * is cancelled too, so Stripe and the account agree; the card on file stays, so the user can
 * replace it (update-payment-method, confirm-payment-update) and upgrade again.
 */
async function planPaymentFailed(app: WebhookDeps, stripe: Stripe, invoiceId: string): Promise<Plan> {
  const invoice = await retrieve('reading the invoice', () => stripe.invoices.retrieve(invoiceId));
  if (!invoice) return ignore('the invoice no longer exists');
  if (invoice.status === 'paid' || invoice.status === 'void' || invoice.status === 'draft')
    return ignore(`the invoice is now ${invoice.status}`);
  const customerId = idOf(invoice.customer);
  const account = customerId ? await findAccountByCustomer(app.db, customerId) : undefined;
  if (!account) return ignore('the invoice belongs to no account of this service');
  if (account.tier === 'free') return ignore('the account is already on the free tier');
  const sub = account.stripe_subscription_id
    ? await cancelSubscription(stripe, account.id, account.stripe_subscription_id)
    : null;
  return {
    effect: async (trx, at) => {
      const locked = await lockAccount(trx, account.id);
      if (!locked || locked.tier === 'free') return 'no_change';
      if (sub && locked.stripe_subscription_id === sub.id)
        await updateAccountBilling(trx, locked.id, { subscription_status: sub.status }, at);
      await changeTier(app, trx, locked.id, 'free', 'webhook:invoice.payment_failed', at);
      return 'downgraded';
    },
  };
}
