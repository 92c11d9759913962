import { missing } from './errors.js';
import { mergeMetadata } from './form.js';
import { clone, randomId, type Obj } from './objects.js';
import { requireCustomer } from './customers.js';
import { createCardPaymentMethod, type FakeCard } from './payment-methods.js';
import type { Routes } from './routes.js';
import type { StripeStore } from './store.js';

export function registerSetupIntents(routes: Routes, store: StripeStore): void {
  routes.expandable('seti_', store.setupIntents);

  routes.add('POST', '/v1/setup_intents', ({ body }) => {
    if (body.customer) requireCustomer(store, String(body.customer), 'customer');
    return newSetupIntent(store, {
      customer: body.customer ?? null,
      metadata: mergeMetadata({}, body.metadata),
      usage: body.usage,
      allowed: body.allowed_payment_method_types,
    });
  });

  routes.add('GET', '/v1/setup_intents/:id', ({ params }) => {
    const si = store.setupIntents.get(params.id);
    if (!si) throw missing('setup_intent', params.id);
    return si;
  });
}

/** A setup intent waiting for a card; checkout sessions in setup mode make one too. */
export function newSetupIntent(
  store: StripeStore,
  opts: { customer: string | null; metadata: Obj; usage?: string; allowed?: string[] },
): Obj {
  const id = randomId('seti_');
  const si = {
    id,
    object: 'setup_intent',
    allowed_payment_method_types: opts.allowed ?? null,
    application: null,
    automatic_payment_methods: opts.allowed ? null : { allow_redirects: 'always', enabled: true },
    cancellation_reason: null,
    client_secret: `${id}_secret_${randomId('', 24)}`,
    created: store.now(),
    customer: opts.customer,
    description: null,
    excluded_payment_method_types: null,
    flow_directions: null,
    last_setup_error: null,
    latest_attempt: null,
    livemode: false,
    mandate: null,
    metadata: opts.metadata,
    next_action: null,
    on_behalf_of: null,
    payment_method: null,
    payment_method_configuration_details: null,
    payment_method_options: { card: { mandate_options: null, network: null, request_three_d_secure: 'automatic' } },
    payment_method_types: opts.allowed ?? ['card'],
    single_use_mandate: null,
    status: 'requires_payment_method',
    usage: opts.usage ?? 'off_session',
  };
  store.setupIntents.set(id, si);
  store.emit('setup_intent.created', si);
  return si;
}

/**
 * What stripe.confirmCardSetup does in the browser: a card attached to the intent's customer,
 * the intent succeeded. With `fail`, the card is refused and the intent waits for another.
 */
export function confirmSetupIntent(store: StripeStore, setupIntentId: string, card: FakeCard = {}, fail = false): Obj {
  const si = store.setupIntents.get(setupIntentId);
  if (!si) throw new Error(`no setup intent ${setupIntentId}`);
  if (fail) {
    si.status = 'requires_payment_method';
    si.last_setup_error = {
      code: 'card_declined',
      decline_code: 'generic_decline',
      message: 'Your card was declined.',
      type: 'card_error',
    };
    store.emit('setup_intent.setup_failed', si);
    return si;
  }
  const pm = createCardPaymentMethod(store, card, si.customer);
  si.payment_method = pm.id;
  si.status = 'succeeded';
  si.last_setup_error = null;
  store.emit('setup_intent.succeeded', si);
  return pm;
}

/** A setup intent for `customer` in the given state, as if created and confirmed elsewhere (Stripe.js, another server). */
export function createSetupIntent(
  store: StripeStore,
  opts: {
    customer: string | null;
    status?: 'succeeded' | 'requires_payment_method' | 'processing' | 'canceled';
    card?: FakeCard;
    metadata?: Obj;
  },
): Obj {
  const si = newSetupIntent(store, { customer: opts.customer, metadata: opts.metadata ?? {} });
  const status = opts.status ?? 'succeeded';
  if (status === 'succeeded') confirmSetupIntent(store, si.id, opts.card ?? {});
  else si.status = status;
  return clone(si);
}
