import { invalid, missing } from './errors.js';
import { mergeMetadata } from './form.js';
import { randomId, type Obj } from './objects.js';
import type { Routes } from './routes.js';
import type { StripeStore } from './store.js';

export function registerCustomers(routes: Routes, store: StripeStore): void {
  routes.expandable('cus_', store.customers);

  routes.add('POST', '/v1/customers', ({ body }) => newCustomer(store, body));

  routes.add('GET', '/v1/customers/:id', ({ params }) => requireCustomer(store, params.id));

  routes.add('POST', '/v1/customers/:id', ({ params, body }) => {
    const c = requireCustomer(store, params.id);
    const pm = body.invoice_settings?.default_payment_method;
    if (pm !== undefined) {
      const method = store.paymentMethods.get(pm);
      if (pm !== '' && (!method || method.customer !== c.id)) {
        throw invalid(
          `No such PaymentMethod: '${pm}'; the payment method must be attached to the customer before it can be the default.`,
          'invoice_settings[default_payment_method]',
          'resource_missing',
        );
      }
      c.invoice_settings.default_payment_method = pm === '' ? null : pm;
    }
    if (body.email !== undefined) c.email = body.email;
    if (body.name !== undefined) c.name = body.name;
    c.metadata = mergeMetadata(c.metadata, body.metadata);
    store.emit('customer.updated', c);
    return c;
  });
}

/** The customer, or the resource_missing error Stripe answers naming `param` (the request field that held the id). */
export function requireCustomer(store: StripeStore, id: string, param = 'id'): Obj {
  const c = store.customers.get(id);
  if (!c) throw missing('customer', id, param);
  return c;
}

/** A customer as POST /v1/customers makes it (also the benchmark's way to make thousands at once). */
export function newCustomer(store: StripeStore, body: Obj): Obj {
  const id = randomId('cus_', 14);
  const c = {
    id,
    object: 'customer',
    address: null,
    balance: 0,
    created: store.now(),
    currency: null,
    default_source: null,
    delinquent: false,
    description: body.description ?? null,
    discount: null,
    email: body.email ?? null,
    invoice_prefix: randomId('', 8).toUpperCase(),
    invoice_settings: { custom_fields: null, default_payment_method: null, footer: null, rendering_options: null },
    livemode: false,
    metadata: mergeMetadata({}, body.metadata),
    name: body.name ?? null,
    next_invoice_sequence: 1,
    phone: null,
    preferred_locales: [],
    shipping: null,
    tax_exempt: 'none',
    test_clock: null,
  };
  store.customers.set(id, c);
  store.emit('customer.created', c);
  return c;
}
