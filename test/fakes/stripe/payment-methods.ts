import { missing } from './errors.js';
import { randomId, type Obj } from './objects.js';
import type { Routes } from './routes.js';
import type { StripeStore } from './store.js';

export interface FakeCard {
  brand?: string;
  last4?: string;
  exp_month?: number;
  exp_year?: number;
  /** Every charge on this card is declined (card_declined). */
  declines?: boolean;
}

// Cards reach Stripe from the browser (Stripe.js, Checkout), never from the service, so the only endpoint is retrieve.
export function registerPaymentMethods(routes: Routes, store: StripeStore): void {
  routes.expandable('pm_', store.paymentMethods);

  routes.add('GET', '/v1/payment_methods/:id', ({ params }) => {
    const pm = store.paymentMethods.get(params.id);
    if (!pm) throw missing('payment_method', params.id);
    return pm;
  });
}

/** A card payment method, attached to `customer` when given. */
export function createCardPaymentMethod(store: StripeStore, card: FakeCard = {}, customer: string | null = null): Obj {
  const brand = card.brand ?? 'visa';
  const pm = {
    id: randomId('pm_'),
    object: 'payment_method',
    allow_redisplay: 'unspecified',
    billing_details: {
      address: { city: null, country: null, line1: null, line2: null, postal_code: null, state: null },
      email: null,
      name: null,
      phone: null,
      tax_id: null,
    },
    card: {
      brand,
      checks: { address_line1_check: null, address_postal_code_check: null, cvc_check: 'pass' },
      country: 'US',
      display_brand: brand,
      exp_month: card.exp_month ?? 12,
      exp_year: card.exp_year ?? 2034,
      fingerprint: randomId('', 16),
      funding: 'credit',
      generated_from: null,
      last4: card.last4 ?? '4242',
      networks: { available: [brand], preferred: null },
      regulated_status: 'unregulated',
      three_d_secure_usage: { supported: true },
      wallet: null,
    },
    created: store.now(),
    customer,
    livemode: false,
    metadata: {},
    type: 'card',
  };
  store.paymentMethods.set(pm.id, pm);
  if (card.declines) store.declining.add(pm.id);
  if (customer) store.emit('payment_method.attached', pm);
  return pm;
}
