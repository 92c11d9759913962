import type { Env } from '../../src/config.js';
import { completeCheckoutSession, expireCheckoutSession, newCheckoutSession, registerCheckoutSessions } from './stripe/checkout-sessions.js';
import { registerCustomers, requireCustomer } from './stripe/customers.js';
import { invalid, missing, required, StripeApiError } from './stripe/errors.js';
import { stripeEvent } from './stripe/events.js';
import { Faults } from './stripe/faults.js';
import { asBool, asInt, mergeMetadata } from './stripe/form.js';
import { addInvoiceItem, attemptInvoicePayment, registerInvoices } from './stripe/invoices.js';
import { listPage } from './stripe/list.js';
import { createCardPaymentMethod, registerPaymentMethods, type FakeCard } from './stripe/payment-methods.js';
import { clone, randomId, type Obj } from './stripe/objects.js';
import { addMeteredPrice, registerPrices } from './stripe/prices.js';
import { Routes } from './stripe/routes.js';
import { confirmSetupIntent, createSetupIntent, newSetupIntent, registerSetupIntents } from './stripe/setup-intents.js';
import { StripeHttpServer, type ReceivedRequest } from './stripe/server.js';
import { createStore, type StripeStore } from './stripe/store.js';
import { createSubscriptionDirectly, registerSubscriptions, setSubscriptionStatus } from './stripe/subscriptions.js';

/*
 * A local stand-in for the Stripe API, written from Stripe's API reference, that the real
 * `stripe` client talks to over HTTP (STRIPE_API_BASE). It speaks the wire format: form-encoded
 * request bodies with bracket notation (a[b][0]=c), JSON responses with the real object shapes
 * and id prefixes, `expand[]`, Idempotency-Key replay (same key and parameters -> the saved
 * response; different parameters -> idempotency_error), and Stripe-style errors
 * ({error:{type, code, message, param}} with Stripe's statuses).
 *
 * Covered: customers, payment methods (cards), setup intents, Checkout Sessions in setup mode,
 * subscriptions, invoice items and invoices (create, finalize, pay, send, void, retrieve, list).
 * Test controls stand in for what a person or Stripe itself would do: complete a checkout,
 * confirm a setup intent with a card, change a subscription behind our back, attempt an invoice
 * payment, fail or hang the next requests. Every state change also appends the event Stripe
 * would have sent to `events`; deliverEvent() signs one with the stripe package's own helper.
 */

export type { Obj } from './stripe/objects.js';
export type { ReceivedRequest } from './stripe/server.js';
export type { FakeCard } from './stripe/payment-methods.js';
export { parseStripeForm } from './stripe/form.js';
export { deliverEvent } from './stripe/events.js';

/** Decimal string to a bigint scaled by 10^12 (Stripe allows 12 places on *_decimal fields). */
const SCALE = 10n ** 12n;
function toScaled(v: string | number): bigint {
  const [whole, frac = ''] = String(v).split('.');
  const sign = whole!.startsWith('-') ? -1n : 1n;
  return sign * (BigInt(whole!.replace('-', '') || '0') * SCALE + BigInt(frac.padEnd(12, '0').slice(0, 12)));
}
/** Rounds half up to whole minor units, as Stripe does for invoice item amounts. */
function roundScaled(scaled: bigint): number {
  const q = scaled / SCALE;
  const r = scaled % SCALE;
  return Number(r * 2n >= SCALE ? q + 1n : q);
}

export class FakeStripe {
  readonly secretKey = randomId('sk_test_', 32);
  readonly webhookSecret = randomId('whsec_', 32);
  readonly priceId: string;
  readonly productId = randomId('prod_', 14);
  url = '';

  readonly customers: Map<string, Obj>;
  readonly paymentMethods: Map<string, Obj>;
  readonly setupIntents: Map<string, Obj>;
  readonly checkoutSessions: Map<string, Obj>;
  readonly subscriptions: Map<string, Obj>;
  readonly prices: Map<string, Obj>;
  readonly invoices: Map<string, Obj>;
  readonly invoiceItems: Map<string, Obj>;
  /** Every request that reached the fake, in order (including failed and hung ones). */
  readonly requests: ReceivedRequest[];
  /** The events Stripe would have sent, in order. */
  readonly events: Obj[];
  /** Invoices sent with POST /v1/invoices/:id/send. */
  readonly sentInvoices: string[];

  private readonly store: StripeStore;
  private readonly faults = new Faults();
  private readonly server: StripeHttpServer;

  constructor(opts: { priceId?: string } = {}) {
    this.priceId = opts.priceId ?? randomId('price_', 24);
    this.store = createStore({ productId: this.productId, baseUrl: () => this.url });
    ({
      customers: this.customers,
      paymentMethods: this.paymentMethods,
      setupIntents: this.setupIntents,
      checkoutSessions: this.checkoutSessions,
      subscriptions: this.subscriptions,
      prices: this.prices,
      invoices: this.invoices,
      invoiceItems: this.invoiceItems,
      events: this.events,
      sentInvoices: this.sentInvoices,
    } = this.store);
    addMeteredPrice(this.store, this.priceId);
    const routes = new Routes();
    registerCustomers(routes, this.store);
    registerPaymentMethods(routes, this.store);
    registerSetupIntents(routes, this.store);
    registerCheckoutSessions(routes, this.store);
    registerSubscriptions(routes, this.store);
    registerInvoices(routes, this.store);
    registerPrices(routes, this.store);
    this.defineRoutes(routes);
    this.server = new StripeHttpServer({ secretKey: this.secretKey, routes, faults: this.faults });
    this.requests = this.server.requests;
  }

  /** The environment that points the service at this fake. */
  env(overrides: Env = {}): Env {
    return {
      STRIPE_SECRET_KEY: this.secretKey,
      STRIPE_WEBHOOK_SECRET: this.webhookSecret,
      STRIPE_PRICE_ID: this.priceId,
      STRIPE_API_BASE: this.url,
      ...overrides,
    };
  }

  async start(): Promise<this> {
    this.url = await this.server.start();
    return this;
  }

  async close(): Promise<void> {
    await this.server.close();
  }

  // -------------------------------------------------------------------------------------------
  // Test controls

  /** The next `count` matching requests answer `status` (500 by default) with `error` (an api_error by default). */
  failNext(count: number, opts: { status?: number; method?: string; path?: RegExp; error?: Obj } = {}): void {
    this.faults.failNext(count, opts);
  }

  /** The next `count` matching requests never get an answer (the client's timeout fires). */
  hangNext(count: number, opts: { method?: string; path?: RegExp } = {}): void {
    this.faults.hangNext(count, opts);
  }

  /** Requests received, optionally filtered by method and path. */
  received(method?: string, path?: RegExp): ReceivedRequest[] {
    return this.requests.filter((r) => (!method || r.method === method) && (!path || path.test(r.path)));
  }

  /** Events of the given type (all when omitted). */
  eventsOf(type?: string): Obj[] {
    return this.events.filter((e) => !type || e.type === type);
  }

  lastEvent(type: string): Obj {
    const e = this.eventsOf(type).at(-1);
    if (!e) throw new Error(`the fake Stripe emitted no ${type} event`);
    return e;
  }

  /** A card payment method, attached to `customer` when given. */
  createPaymentMethod(card: FakeCard = {}, customer: string | null = null): Obj {
    return createCardPaymentMethod(this.store, card, customer);
  }

  /**
   * What a person does on the hosted checkout page: enters a card, which is attached to the
   * session's customer through the session's setup intent; the session completes. Returns the
   * URL Stripe would redirect the browser to (success_url with the session id filled in).
   */
  completeCheckoutSession(sessionId: string, card: FakeCard = {}): { session: Obj; paymentMethod: Obj; returnUrl: string } {
    return completeCheckoutSession(this.store, sessionId, card);
  }

  /** The session times out unused (Stripe expires sessions after 24 hours). */
  expireCheckoutSession(sessionId: string): void {
    expireCheckoutSession(this.store, sessionId);
  }

  /**
   * What stripe.confirmCardSetup does in the browser: a card attached to the intent's customer,
   * the intent succeeded. With `fail`, the card is refused and the intent waits for another.
   */
  confirmSetupIntent(setupIntentId: string, card: FakeCard = {}, fail = false): Obj {
    return confirmSetupIntent(this.store, setupIntentId, card, fail);
  }

  /** A setup intent for `customer` in the given state, as if created and confirmed elsewhere (Stripe.js, another server). */
  createSetupIntent(opts: { customer: string | null; status?: 'succeeded' | 'requires_payment_method' | 'processing' | 'canceled'; card?: FakeCard; metadata?: Obj }): Obj {
    return createSetupIntent(this.store, opts);
  }

  /** Changes a subscription's status as Stripe (or someone in the dashboard) would, with the matching events. */
  setSubscriptionStatus(subscriptionId: string, status: string): Obj {
    return setSubscriptionStatus(this.store, subscriptionId, status);
  }

  /** A subscription created outside this service (the dashboard, another integration). */
  createSubscriptionDirectly(customer: string, opts: { status?: string; price?: string } = {}): Obj {
    return createSubscriptionDirectly(this.store, customer, opts.price ?? this.priceId, opts.status);
  }

  /** A checkout session created outside this service's upgrade endpoint (another integration, a forged reference). */
  createCheckoutSessionDirectly(params: Obj): Obj {
    return clone(newCheckoutSession(this.store, params));
  }

  /** Stripe's automatic collection attempt on an open invoice; a declining card fails it (invoice.payment_failed). */
  attemptInvoicePayment(invoiceId: string): { paid: boolean; invoice: Obj } {
    return attemptInvoicePayment(this.store, invoiceId);
  }

  /** An event of the given type for an object, as Stripe would send it (not recorded in `events`). */
  event(type: string, object: Obj, previousAttributes?: Obj): Obj {
    return stripeEvent(type, object, this.store.now(), previousAttributes);
  }


  private now(): number {
    return this.store.now();
  }

  private emit(type: string, object: Obj, previousAttributes?: Obj): void {
    this.store.emit(type, object, previousAttributes);
  }

  // -------------------------------------------------------------------------------------------
  // Objects

  private defineRoutes(routes: Routes): void {
    routes.expandable('ii_', this.invoiceItems);

    // Invoice items
    routes.add('POST', '/v1/invoiceitems', ({ body }) => {
      if (!body.customer) throw required('customer');
      const customer = requireCustomer(this.store, String(body.customer), 'customer');
      const quantity = body.quantity === undefined ? 1 : asInt(body.quantity, 'quantity');
      let amount: number;
      let unitDecimal: string | null = null;
      let price: string | null = null;
      if (body.amount !== undefined) {
        amount = asInt(body.amount, 'amount');
      } else if (body.unit_amount_decimal !== undefined || body.price_data?.unit_amount_decimal !== undefined || body.price_data?.unit_amount !== undefined) {
        unitDecimal = String(body.unit_amount_decimal ?? body.price_data?.unit_amount_decimal ?? body.price_data?.unit_amount);
        amount = roundScaled(toScaled(unitDecimal) * BigInt(quantity));
      } else if (body.pricing?.price) {
        price = String(body.pricing.price);
        const p = this.prices.get(price);
        if (!p) throw invalid(`No such price: '${price}'`, 'pricing[price]', 'resource_missing');
        unitDecimal = String(p.unit_amount_decimal ?? p.unit_amount);
        amount = roundScaled(toScaled(unitDecimal) * BigInt(quantity));
      } else {
        throw required('amount');
      }
      const currency = String(body.currency ?? body.price_data?.currency ?? customer.currency ?? 'usd');
      if (customer.currency && customer.currency !== currency) throw invalid(`The customer's currency is ${customer.currency}; invoice items must use it.`, 'currency');
      let invoice: Obj | undefined;
      if (body.invoice) {
        invoice = this.invoices.get(String(body.invoice));
        if (!invoice) throw missing('invoice', String(body.invoice), 'invoice');
        if (invoice.status !== 'draft') throw invalid('You can only add invoice items to draft invoices.', 'invoice');
        if (invoice.customer !== customer.id) throw invalid('The invoice belongs to another customer.', 'invoice');
      }
      const now = this.now();
      const item = {
        id: randomId('ii_'),
        object: 'invoiceitem',
        amount,
        currency,
        customer: customer.id,
        customer_account: null,
        date: now,
        description: body.description ?? null,
        discountable: true,
        discounts: [],
        invoice: invoice?.id ?? null,
        livemode: false,
        metadata: mergeMetadata({}, body.metadata),
        net_amount: amount,
        parent: body.subscription ? { type: 'subscription_details', subscription_details: { subscription: body.subscription } } : null,
        period: body.period ? { start: asInt(body.period.start, 'period[start]'), end: asInt(body.period.end, 'period[end]') } : { start: now, end: now },
        pricing: { type: 'price_details', price_details: price ? { price, product: this.productId } : undefined, unit_amount_decimal: unitDecimal ?? String(amount) },
        proration: false,
        quantity,
        quantity_decimal: String(quantity),
        tax_rates: [],
        test_clock: null,
      };
      customer.currency ??= currency;
      this.invoiceItems.set(item.id, item);
      if (invoice) {
        addInvoiceItem(invoice, item);
      }
      this.emit('invoiceitem.created', item);
      return item;
    });
    routes.add('GET', '/v1/invoiceitems', ({ query }) => {
      const items = [...this.invoiceItems.values()].filter(
        (i) =>
          (!query.customer || i.customer === query.customer) &&
          (!query.invoice || i.invoice === query.invoice) &&
          (query.pending === undefined || (asBool(query.pending) ? i.invoice === null : i.invoice !== null)),
      );
      return listPage(items.reverse(), '/v1/invoiceitems', query);
    });
    routes.add('GET', '/v1/invoiceitems/:id', ({ params }) => {
      const i = this.invoiceItems.get(params.id);
      if (!i) throw missing('invoiceitem', params.id);
      return i;
    });

  }
}
