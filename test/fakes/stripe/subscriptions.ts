import { invalid, missing, required } from './errors.js';
import { mergeMetadata } from './form.js';
import { listPage } from './list.js';
import { clone, randomId, type Obj } from './objects.js';
import { requireCustomer } from './customers.js';
import type { Routes } from './routes.js';
import type { StripeStore } from './store.js';

export function registerSubscriptions(routes: Routes, store: StripeStore): void {
  routes.expandable('sub_', store.subscriptions);

  routes.add('POST', '/v1/subscriptions', ({ body }) => {
    if (!body.customer) throw required('customer');
    const price = body.items?.[0]?.price;
    if (!price) throw required('items');
    return newSubscription(store, String(body.customer), String(price), mergeMetadata({}, body.metadata));
  });

  routes.add('GET', '/v1/subscriptions', ({ query }) => {
    const subs = [...store.subscriptions.values()].filter(
      (s) =>
        (!query.customer || s.customer === query.customer) &&
        (query.status === 'all' || (query.status ? s.status === query.status : s.status !== 'canceled')),
    );
    return listPage(subs, '/v1/subscriptions', query);
  });

  routes.add('GET', '/v1/subscriptions/:id', ({ params }) => {
    const s = store.subscriptions.get(params.id);
    if (!s) throw missing('subscription', params.id);
    return s;
  });

  // Only what the service changes on a live subscription: its default payment method and metadata.
  routes.add('POST', '/v1/subscriptions/:id', ({ params, body }) => {
    const s = store.subscriptions.get(params.id);
    if (!s) throw missing('subscription', params.id);
    if (s.status === 'canceled' && body.default_payment_method !== undefined)
      throw invalid(
        'A canceled subscription can only update its cancellation_details and metadata.',
        undefined,
        'subscription_canceled',
      );
    const previous: Obj = {};
    const pm = body.default_payment_method;
    if (pm !== undefined) {
      const method = store.paymentMethods.get(pm);
      if (pm !== '' && (!method || method.customer !== s.customer)) {
        throw invalid(
          `No such PaymentMethod: '${pm}'; it must be attached to the subscription's customer first.`,
          'default_payment_method',
          'resource_missing',
        );
      }
      previous.default_payment_method = s.default_payment_method;
      s.default_payment_method = pm === '' ? null : pm;
    }
    if (body.metadata !== undefined) {
      previous.metadata = s.metadata;
      s.metadata = mergeMetadata(s.metadata, body.metadata);
    }
    store.emit('customer.subscription.updated', s, previous);
    return s;
  });

  routes.add('DELETE', '/v1/subscriptions/:id', ({ params }) => {
    const s = store.subscriptions.get(params.id);
    if (!s) throw missing('subscription', params.id);
    if (s.status === 'canceled')
      throw invalid(
        'A canceled subscription can only update its cancellation_details and metadata.',
        undefined,
        'subscription_canceled',
      );
    setSubscriptionStatus(store, s.id, 'canceled');
    return s;
  });
}

/** A subscription to `price` for `customer`, announced with customer.subscription.created. */
export function newSubscription(store: StripeStore, customer: string, price: string, metadata: Obj): Obj {
  const p = store.prices.get(price);
  if (!p) throw invalid(`No such price: '${price}'`, 'items[0][price]', 'resource_missing');
  const c = requireCustomer(store, customer, 'customer');
  const now = store.now();
  const periodEnd = now + 30 * 86400;
  const id = randomId('sub_');
  const sub = {
    id,
    object: 'subscription',
    application: null,
    application_fee_percent: null,
    automatic_tax: { disabled_reason: null, enabled: false, liability: null },
    billing_cycle_anchor: now,
    billing_cycle_anchor_config: null,
    billing_mode: { type: 'flexible' },
    billing_thresholds: null,
    cancel_at: null,
    cancel_at_period_end: false,
    canceled_at: null,
    cancellation_details: { comment: null, feedback: null, reason: null },
    collection_method: 'charge_automatically',
    created: now,
    currency: p.currency,
    customer: c.id,
    customer_account: null,
    days_until_due: null,
    default_payment_method: null,
    default_source: null,
    description: null,
    discounts: [],
    ended_at: null,
    invoice_settings: { account_tax_ids: null, issuer: { type: 'self' } },
    items: {
      object: 'list',
      data: [
        {
          id: randomId('si_', 14),
          object: 'subscription_item',
          billing_thresholds: null,
          created: now,
          current_period_end: periodEnd,
          current_period_start: now,
          discounts: [],
          metadata: {},
          price: clone(p),
          subscription: id,
          tax_rates: [],
        },
      ],
      has_more: false,
      total_count: 1,
      url: `/v1/subscription_items?subscription=${id}`,
    },
    latest_invoice: null,
    livemode: false,
    metadata,
    next_pending_invoice_item_invoice: null,
    on_behalf_of: null,
    pause_collection: null,
    payment_settings: { payment_method_options: null, payment_method_types: null, save_default_payment_method: 'off' },
    pending_invoice_item_interval: null,
    pending_setup_intent: null,
    pending_update: null,
    schedule: null,
    start_date: now,
    // A metered price has no fixed amount, so the first invoice is zero and the subscription is active at once.
    status: 'active',
    test_clock: null,
    transfer_data: null,
    trial_end: null,
    trial_settings: { end_behavior: { missing_payment_method: 'create_invoice' } },
    trial_start: null,
  };
  store.subscriptions.set(id, sub);
  store.emit('customer.subscription.created', sub);
  return sub;
}

/** Changes a subscription's status as Stripe (or someone in the dashboard) would, with the matching events. */
export function setSubscriptionStatus(store: StripeStore, subscriptionId: string, status: string): Obj {
  const sub = store.subscriptions.get(subscriptionId);
  if (!sub) throw new Error(`no subscription ${subscriptionId}`);
  const previous = sub.status;
  sub.status = status;
  if (status === 'canceled') {
    sub.canceled_at = store.now();
    sub.ended_at = store.now();
    sub.cancellation_details = { comment: null, feedback: null, reason: 'cancellation_requested' };
    store.emit('customer.subscription.deleted', sub);
  } else {
    store.emit('customer.subscription.updated', sub, { status: previous });
  }
  return clone(sub);
}

/** A subscription created outside this service (the dashboard, another integration), in `status` when given. */
export function createSubscriptionDirectly(store: StripeStore, customer: string, price: string, status?: string): Obj {
  const sub = newSubscription(store, customer, price, {});
  if (status) sub.status = status;
  return clone(sub);
}
