import { randomId, type Obj } from './objects.js';
import type { Routes } from './routes.js';
import type { StripeStore } from './store.js';

// No price endpoints: the service only names its price (STRIPE_PRICE_ID), and Stripe answers with it embedded or expanded.
export function registerPrices(routes: Routes, store: StripeStore): void {
  // A test may name the price anything (FakeStripe({ priceId })), so ids no other prefix claims are looked up as prices.
  routes.expandable('', store.prices);
}

/** The service's price (STRIPE_PRICE_ID): metered and billed monthly, so a subscription to it costs nothing up front. */
export function addMeteredPrice(store: StripeStore, id: string): Obj {
  const price = {
    id,
    object: 'price',
    active: true,
    billing_scheme: 'per_unit',
    created: store.now(),
    currency: 'usd',
    custom_unit_amount: null,
    livemode: false,
    lookup_key: null,
    metadata: {},
    nickname: 'Pay-as-you-go tokens',
    product: store.productId,
    recurring: {
      interval: 'month',
      interval_count: 1,
      meter: randomId('mtr_', 24),
      trial_period_days: null,
      usage_type: 'metered',
    },
    tax_behavior: 'unspecified',
    tiers_mode: null,
    transform_quantity: null,
    type: 'recurring',
    unit_amount: null,
    unit_amount_decimal: '0.00003',
  };
  store.prices.set(id, price);
  return price;
}
