import type { AppContext } from '../../context.js';
import { isAppError } from '../../errors.js';
import {
  CardCheckoutSchema,
  CheckoutCancelledSchema,
  SessionQuery,
  SetupIntentQuery,
  SetupIntentResultSchema,
  SubscriptionInfoSchema,
  SubscriptionResultSchema,
} from '../../subscriptions/subscriptions.schema.js';
import { checkoutCancelled, completeCheckout, upgrade } from '../../subscriptions/checkout-sessions.service.js';
import { completeCardCheckout, startCardCheckout } from '../../subscriptions/card-checkout.service.js';
import { downgrade } from '../../subscriptions/paid-tier.service.js';
import {
  confirmPaymentUpdate,
  confirmUpgrade,
  startPaymentMethodUpdate,
} from '../../subscriptions/setup-intents.service.js';
import { subscriptionInfo } from '../../subscriptions/subscription-info.service.js';
import { prefersHtml } from '../html.js';
import { accountOf, defineRoutes, type HttpContext, type RouteSpec } from '../route.js';

const TAG = 'subscription';
const result = (description: string) => ({ description, schema: SubscriptionResultSchema });
const stripeFailed = { description: 'Stripe answered with an error; nothing was changed' };
const stripeDown = {
  description:
    "Stripe is not configured (billing_not_configured), unreachable or timing out, or the deployment's Stripe call budget stayed in use past STRIPE_PACE_MAX_WAIT_MS (payment_processor_busy, with Retry-After); nothing was changed",
};
const returnLimited = {
  description:
    'Too many returns from the client network (STRIPE_RETURNS_PER_CLIENT_PER_MINUTE) or for this session id (STRIPE_RETURNS_PER_SESSION_PER_MINUTE), with Retry-After (rate_limit_exceeded)',
};

/** How confirm-upgrade and confirm-payment-update refuse a setup intent. */
const setupIntentRefusals = {
  403: { description: 'The setup intent belongs to another customer (setup_intent_not_yours)' },
  404: { description: 'No such setup intent' },
  409: { description: 'The setup intent has not succeeded or left no payment method attached' },
  502: stripeFailed,
  503: stripeDown,
};

/** Where a browser coming back from Stripe's hosted checkout is sent: the console's billing page. */
const CONSOLE_BILLING = '/console/billing';

/** 303 to the console's billing page with what happened in its query string (the page says it). */
function backToConsole(ctx: HttpContext, outcome: Record<string, string>): void {
  ctx.set('Cache-Control', 'no-store');
  ctx.status = 303;
  ctx.redirect(`${CONSOLE_BILLING}?${new URLSearchParams(outcome).toString()}`);
}

/**
 * A checkout return: JSON callers get the result or the error as every endpoint does; a browser
 * is sent to the console with `<what>=<done>` on success, or `<what>=failed&reason=<error code>`
 * after the same work failed (the error is logged as for JSON callers).
 */
async function checkoutReturn(
  ctx: HttpContext,
  what: 'upgrade' | 'card',
  done: string,
  work: () => Promise<unknown>,
): Promise<void> {
  if (!prefersHtml(ctx)) {
    ctx.body = await work();
    return;
  }
  try {
    await work();
    backToConsole(ctx, { [what]: done });
  } catch (err) {
    if (!isAppError(err)) throw err;
    const reason = err.code ?? err.type;
    ctx.state.errorCode = reason;
    backToConsole(ctx, { [what]: 'failed', reason });
  }
}

const consoleRedirect = (to: string) => ({
  description: `A browser (Accept preferring text/html) is sent to the console: ${to}; on an error, \`${CONSOLE_BILLING}?…=failed&reason=<error code>\``,
  headers: { Location: 'The console page' },
});

/** Endpoints 7 to 14: tier, upgrade (hosted checkout or setup intent), card changes, downgrade. */
export function subscriptionRoutes(): RouteSpec[] {
  return defineRoutes([
    {
      method: 'get',
      path: '/v1/subscription/info',
      operationId: 'subscriptionInfo',
      summary:
        'Tier, models and prices available to it, its limits, the payment method on file and the subscription status',
      tag: TAG,
      auth: 'api_key_or_jwt',
      responses: { 200: { description: 'Subscription information', schema: SubscriptionInfoSchema } },
      handler: async (ctx, app) => {
        ctx.body = await subscriptionInfo(app, accountOf(ctx).id);
      },
    },
    {
      method: 'post',
      path: '/v1/subscription/upgrade',
      operationId: 'upgrade',
      summary:
        'Move to the paid tier: at once with a payment method on file, otherwise through a hosted checkout session (no upfront charge)',
      description:
        'status `upgraded`: the account is paid now. `checkout_required`: open `checkout_url` to add a card; a second call while that checkout is open returns the same session. `already_paid`: nothing was done (never a second subscription).',
      tag: TAG,
      auth: 'api_key_or_jwt',
      responses: {
        200: result('Upgraded, already paid, or a checkout session to complete'),
        502: stripeFailed,
        503: stripeDown,
      },
      handler: async (ctx, app) => {
        ctx.body = await upgrade(app, accountOf(ctx).id);
      },
    },
    {
      method: 'post',
      path: '/v1/subscription/confirm-upgrade',
      operationId: 'confirmUpgrade',
      summary:
        "After a card was added through a setup intent: checks it succeeded and belongs to the caller's customer, then upgrades",
      tag: TAG,
      auth: 'api_key_or_jwt',
      query: SetupIntentQuery,
      responses: {
        200: result('Upgraded (or already paid)'),
        ...setupIntentRefusals,
      },
      handler: async (ctx, app) => {
        const { setup_intent_id } = ctx.state.query as { setup_intent_id: string };
        ctx.body = await confirmUpgrade(app, accountOf(ctx).id, setup_intent_id);
      },
    },
    {
      method: 'get',
      path: '/v1/subscription/upgrade-success',
      operationId: 'upgradeSuccess',
      summary:
        'Where the hosted checkout returns: sets the collected card as default and upgrades the account that owns the session',
      description:
        'Takes no credential: the session id names the account. Answers JSON; a browser is sent to the console (303 to `/console/billing?upgrade=done`, or `?upgrade=failed&reason=<code>` when the upgrade could not be completed).',
      tag: TAG,
      auth: 'none',
      query: SessionQuery,
      responses: {
        200: result('Upgraded (or already paid)'),
        303: consoleRedirect('`/console/billing?upgrade=done`'),
        400: { description: 'The session was made to change a card, not to upgrade (checkout_session_unknown)' },
        403: { description: "The session's customer is not the account's customer" },
        404: {
          description:
            'This service opened no checkout session by that id, or too long ago (checkout_session_not_found); Stripe is not asked',
        },
        409: { description: 'The session is not complete, expired, or already used' },
        429: returnLimited,
        502: stripeFailed,
        503: stripeDown,
      },
      handler: async (ctx, app) => {
        const { session_id } = ctx.state.query as { session_id: string };
        await checkoutReturn(ctx, 'upgrade', 'done', () => completeCheckout(app, session_id, ctx.ip));
      },
    },
    {
      method: 'get',
      path: '/v1/subscription/upgrade-cancel',
      operationId: 'upgradeCancel',
      summary: 'Where the hosted checkout returns when the user cancels: nothing is changed',
      tag: TAG,
      auth: 'none',
      responses: {
        200: { description: 'Checkout cancelled', schema: CheckoutCancelledSchema },
        303: consoleRedirect('`/console/billing?upgrade=cancelled`'),
      },
      handler: (ctx) => {
        if (prefersHtml(ctx)) backToConsole(ctx, { upgrade: 'cancelled' });
        else ctx.body = checkoutCancelled();
      },
    },
    {
      method: 'post',
      path: '/v1/subscription/update-payment-method',
      operationId: 'updatePaymentMethod',
      summary:
        'A setup intent for adding or changing the card (confirm it with Stripe.js, then call confirm-payment-update or confirm-upgrade); the open one is returned again while it waits for a card',
      tag: TAG,
      auth: 'api_key_or_jwt',
      responses: {
        200: { description: 'The setup intent and its client secret', schema: SetupIntentResultSchema },
        429: {
          description:
            'The account opened STRIPE_SETUP_INTENTS_PER_ACCOUNT_PER_DAY setup intents in 24 hours and none still waits for a card (too_many_setup_intents)',
        },
        502: stripeFailed,
        503: stripeDown,
      },
      handler: async (ctx: HttpContext, app: AppContext) => {
        ctx.set('Cache-Control', 'no-store');
        ctx.body = await startPaymentMethodUpdate(app, accountOf(ctx).id);
      },
    },
    {
      method: 'post',
      path: '/v1/subscription/payment-method-checkout',
      operationId: 'paymentMethodCheckout',
      summary:
        "Change the card through Stripe's hosted checkout (setup mode): open checkout_url; its return makes the new card the default",
      description:
        "A new Checkout Session in setup mode for the account's Stripe customer, on any tier; nothing is charged. When it completes, Stripe sends the browser to `/v1/subscription/payment-method-success`, which makes the card the default for future invoices (and for the subscription, when paid) and sends the browser to `/console/billing?card=updated`. Cancelling returns it to `/console/billing?card=cancelled` with nothing changed.",
      tag: TAG,
      auth: 'api_key_or_jwt',
      responses: {
        200: { description: 'The checkout session to open', schema: CardCheckoutSchema },
        429: {
          description:
            'The account opened STRIPE_CARD_CHECKOUTS_PER_ACCOUNT_PER_DAY card-change sessions in 24 hours and none is still open (too_many_card_checkouts)',
        },
        502: stripeFailed,
        503: stripeDown,
      },
      handler: async (ctx, app) => {
        ctx.set('Cache-Control', 'no-store');
        ctx.body = await startCardCheckout(app, accountOf(ctx).id);
      },
    },
    {
      method: 'get',
      path: '/v1/subscription/payment-method-success',
      operationId: 'paymentMethodSuccess',
      summary: "Where the card-change checkout returns: makes the collected card the default for the session's account",
      description:
        "Takes no credential: the session id names the account, and the session must be a completed card change of that account's own Stripe customer. Answers JSON (status `payment_method_updated`); a browser is sent to `/console/billing?card=updated`, or `?card=failed&reason=<code>`. Reloading is safe.",
      tag: TAG,
      auth: 'none',
      query: SessionQuery,
      responses: {
        200: result('The card is the default for future invoices'),
        303: consoleRedirect('`/console/billing?card=updated`'),
        400: { description: 'The session was not made by payment-method-checkout (checkout_session_unknown)' },
        403: { description: "The session's customer is not the account's customer" },
        404: {
          description:
            'This service opened no checkout session by that id, or too long ago (checkout_session_not_found); Stripe is not asked',
        },
        409: { description: 'The session is not complete, or expired' },
        429: returnLimited,
        502: stripeFailed,
        503: stripeDown,
      },
      handler: async (ctx, app) => {
        const { session_id } = ctx.state.query as { session_id: string };
        await checkoutReturn(ctx, 'card', 'updated', () => completeCardCheckout(app, session_id, ctx.ip));
      },
    },
    {
      method: 'post',
      path: '/v1/subscription/confirm-payment-update',
      operationId: 'confirmPaymentUpdate',
      summary: 'Makes the card collected by a setup intent the default for future invoices',
      tag: TAG,
      auth: 'api_key_or_jwt',
      query: SetupIntentQuery,
      responses: {
        200: result('The payment method was updated'),
        ...setupIntentRefusals,
      },
      handler: async (ctx, app) => {
        const { setup_intent_id } = ctx.state.query as { setup_intent_id: string };
        ctx.body = await confirmPaymentUpdate(app, accountOf(ctx).id, setup_intent_id);
      },
    },
    {
      method: 'post',
      path: '/v1/subscription/downgrade',
      operationId: 'downgrade',
      summary:
        'Back to the free tier at once; the Stripe subscription is cancelled and usage already incurred is still invoiced',
      tag: TAG,
      auth: 'api_key_or_jwt',
      responses: { 200: result('Downgraded (or already free)'), 502: stripeFailed, 503: stripeDown },
      handler: async (ctx, app) => {
        ctx.body = await downgrade(app, accountOf(ctx).id);
      },
    },
  ]);
}
