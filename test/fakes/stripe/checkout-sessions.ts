import { invalid, missing, required } from './errors.js';
import { mergeMetadata } from './form.js';
import { clone, randomId, type Obj } from './objects.js';
import { requireCustomer } from './customers.js';
import type { FakeCard } from './payment-methods.js';
import type { Routes } from './routes.js';
import { confirmSetupIntent, newSetupIntent } from './setup-intents.js';
import type { StripeStore } from './store.js';

// Checkout in setup mode only: the service collects a card this way and subscribes afterwards.
export function registerCheckoutSessions(routes: Routes, store: StripeStore): void {
  routes.expandable('cs_', store.checkoutSessions);

  routes.add('POST', '/v1/checkout/sessions', ({ body }) => newCheckoutSession(store, body));

  routes.add('GET', '/v1/checkout/sessions/:id', ({ params }) => {
    const s = store.checkoutSessions.get(params.id);
    if (!s) throw missing('checkout.session', params.id);
    return s;
  });

  routes.add('POST', '/v1/checkout/sessions/:id/expire', ({ params }) => {
    const s = store.checkoutSessions.get(params.id);
    if (!s) throw missing('checkout.session', params.id);
    if (s.status !== 'open')
      throw invalid(`Only Checkout Sessions with a status of open can be expired (this one is ${s.status}).`);
    s.status = 'expired';
    store.emit('checkout.session.expired', s);
    return s;
  });
}

/** A setup-mode session with its own setup intent; the hosted page lives under the fake's URL. */
export function newCheckoutSession(store: StripeStore, body: Obj): Obj {
  if (!body.mode) throw required('mode');
  if (body.mode !== 'setup') throw invalid('This fake supports Checkout Sessions in setup mode only.', 'mode');
  if (!body.success_url) throw required('success_url');
  if (!body.currency && !body.allowed_payment_method_types) {
    throw invalid(
      'currency is required in setup mode when allowed_payment_method_types is not set.',
      'currency',
      'parameter_missing',
    );
  }
  if (body.customer) requireCustomer(store, String(body.customer), 'customer');
  const id = randomId('cs_test_', 58);
  const si = newSetupIntent(store, {
    customer: body.customer ?? null,
    metadata: mergeMetadata({}, body.setup_intent_data?.metadata),
    usage: 'off_session',
    allowed: body.allowed_payment_method_types,
  });
  const created = store.now();
  const session = {
    id,
    object: 'checkout.session',
    adaptive_pricing: null,
    after_expiration: null,
    allow_promotion_codes: null,
    allowed_payment_method_types: body.allowed_payment_method_types ?? null,
    amount_subtotal: null,
    amount_total: null,
    automatic_tax: { enabled: false, liability: null, provider: null, status: null },
    billing_address_collection: null,
    cancel_url: body.cancel_url ?? null,
    client_reference_id: body.client_reference_id ?? null,
    client_secret: null,
    consent: null,
    consent_collection: null,
    created,
    currency: body.currency ?? null,
    custom_fields: [],
    custom_text: { after_submit: null, shipping_address: null, submit: null, terms_of_service_acceptance: null },
    customer: body.customer ?? null,
    customer_creation: null,
    customer_details: null,
    customer_email: null,
    expires_at: created + 24 * 3600,
    invoice: null,
    invoice_creation: null,
    livemode: false,
    locale: null,
    metadata: mergeMetadata({}, body.metadata),
    mode: 'setup',
    payment_intent: null,
    payment_link: null,
    payment_method_collection: 'always',
    payment_method_options: {},
    payment_method_types: body.allowed_payment_method_types ?? ['card'],
    payment_status: 'no_payment_required',
    recovered_from: null,
    setup_intent: si.id,
    shipping_address_collection: null,
    shipping_options: [],
    status: 'open',
    submit_type: null,
    subscription: null,
    success_url: body.success_url,
    ui_mode: 'hosted_page',
    url: `${store.baseUrl()}/c/pay/${id}`,
  };
  store.checkoutSessions.set(id, session);
  return session;
}

/**
 * What a person does on the hosted checkout page: enters a card, which is attached to the
 * session's customer through the session's setup intent; the session completes. Returns the
 * URL Stripe would redirect the browser to (success_url with the session id filled in).
 */
export function completeCheckoutSession(
  store: StripeStore,
  sessionId: string,
  card: FakeCard = {},
): { session: Obj; paymentMethod: Obj; returnUrl: string } {
  const session = store.checkoutSessions.get(sessionId);
  if (!session) throw new Error(`no checkout session ${sessionId}`);
  if (session.status !== 'open') throw new Error(`checkout session ${sessionId} is ${session.status}`);
  const si = store.setupIntents.get(session.setup_intent)!;
  const pm = confirmSetupIntent(store, si.id, card);
  session.status = 'complete';
  session.customer_details = {
    address: null,
    email: store.customers.get(session.customer)?.email ?? null,
    name: null,
    phone: null,
    tax_exempt: 'none',
    tax_ids: [],
  };
  store.emit('checkout.session.completed', session);
  return {
    session: clone(session),
    paymentMethod: clone(pm),
    returnUrl: String(session.success_url).replace('{CHECKOUT_SESSION_ID}', session.id),
  };
}

/** The session times out unused (Stripe expires sessions after 24 hours). */
export function expireCheckoutSession(store: StripeStore, sessionId: string): void {
  const session = store.checkoutSessions.get(sessionId);
  if (!session) throw new Error(`no checkout session ${sessionId}`);
  session.status = 'expired';
  store.emit('checkout.session.expired', session);
}
