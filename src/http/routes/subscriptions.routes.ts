import type { AppContext } from '../../context.js';
import { isAppError } from '../../errors.js';
import {
  CheckoutCancelledSchema,
  SessionQuery,
  SetupIntentQuery,
  SetupIntentResultSchema,
  SubscriptionInfoSchema,
  SubscriptionResultSchema,
} from '../../subscriptions/subscriptions.schema.js';
import { checkoutCancelled, completeCheckout, upgrade } from '../../subscriptions/checkout-sessions.service.js';
import { downgrade } from '../../subscriptions/paid-tier.service.js';
import {
  confirmPaymentUpdate,
  confirmUpgrade,
  startPaymentMethodUpdate,
} from '../../subscriptions/setup-intents.service.js';
import { subscriptionInfo } from '../../subscriptions/subscription-info.service.js';
import type { SubscriptionResult } from '../../subscriptions/subscription-result.presenter.js';
import { escapeHtml, prefersHtml, renderPage, sendPage } from '../html.js';
import { accountOf, defineRoutes, type HttpContext, type RouteSpec } from '../route.js';

const TAG = 'subscription';
const result = (description: string) => ({ description, schema: SubscriptionResultSchema });
const stripeFailed = { description: 'Stripe answered with an error; nothing was changed' };
const stripeDown = {
  description: 'Stripe is not configured (billing_not_configured), unreachable or timing out; nothing was changed',
};

/** How confirm-upgrade and confirm-payment-update refuse a setup intent. */
const setupIntentRefusals = {
  403: { description: 'The setup intent belongs to another customer (setup_intent_not_yours)' },
  404: { description: 'No such setup intent' },
  409: { description: 'The setup intent has not succeeded or left no payment method attached' },
  502: stripeFailed,
  503: stripeDown,
};

function upgradedPage(r: SubscriptionResult): string {
  const card = r.payment_method?.last4
    ? ` Your ${escapeHtml(r.payment_method.brand ?? 'card')} ending in ${escapeHtml(r.payment_method.last4)} is on file for monthly invoices.`
    : '';
  return renderPage({
    title: 'Upgrade complete',
    body: `<h1 class="ok">You are on the paid tier</h1><p>${escapeHtml(r.message)}${card}</p><p>You can close this page.</p>`,
  });
}

function errorPage(title: string, message: string): string {
  return renderPage({ title, body: `<h1 class="error">${escapeHtml(title)}</h1><p>${escapeHtml(message)}</p>` });
}

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
        'Takes no credential: the session id names the account. Answers an HTML page to a browser, JSON otherwise.',
      tag: TAG,
      auth: 'none',
      query: SessionQuery,
      responses: {
        200: { ...result('Upgraded (or already paid)'), alsoAs: ['text/html'] },
        403: { description: "The session's customer is not the account's customer" },
        404: { description: 'No such session, or it belongs to no account of this service' },
        409: { description: 'The session is not complete, expired, or already used' },
        502: stripeFailed,
        503: stripeDown,
      },
      handler: async (ctx, app) => {
        const { session_id } = ctx.state.query as { session_id: string };
        if (!prefersHtml(ctx)) {
          ctx.body = await completeCheckout(app, session_id);
          return;
        }
        try {
          sendPage(ctx, 200, upgradedPage(await completeCheckout(app, session_id)));
        } catch (err) {
          if (!isAppError(err)) throw err;
          ctx.state.errorCode = err.code ?? err.type;
          sendPage(ctx, err.status, errorPage('The upgrade could not be completed', err.message));
        }
      },
    },
    {
      method: 'get',
      path: '/v1/subscription/upgrade-cancel',
      operationId: 'upgradeCancel',
      summary: 'Where the hosted checkout returns when the user cancels: nothing is changed',
      tag: TAG,
      auth: 'none',
      responses: { 200: { description: 'Checkout cancelled', schema: CheckoutCancelledSchema, alsoAs: ['text/html'] } },
      handler: (ctx) => {
        const body = checkoutCancelled();
        if (prefersHtml(ctx)) {
          sendPage(
            ctx,
            200,
            renderPage({
              title: 'Checkout cancelled',
              body: `<h1>Checkout cancelled</h1><p>${escapeHtml(body.message)}</p>`,
            }),
          );
        } else {
          ctx.body = body;
        }
      },
    },
    {
      method: 'post',
      path: '/v1/subscription/update-payment-method',
      operationId: 'updatePaymentMethod',
      summary:
        'A new setup intent for adding or changing the card (confirm it with Stripe.js, then call confirm-payment-update or confirm-upgrade)',
      tag: TAG,
      auth: 'api_key_or_jwt',
      responses: {
        200: { description: 'The setup intent and its client secret', schema: SetupIntentResultSchema },
        502: stripeFailed,
        503: stripeDown,
      },
      handler: async (ctx: HttpContext, app: AppContext) => {
        ctx.set('Cache-Control', 'no-store');
        ctx.body = await startPaymentMethodUpdate(app, accountOf(ctx).id, ctx.state.requestId);
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
