import type { Env } from '../../src/config.js';
import {
  completeCheckoutSession,
  expireCheckoutSession,
  newCheckoutSession,
  registerCheckoutSessions,
} from './stripe/checkout-sessions.js';
import { newCustomer, registerCustomers } from './stripe/customers.js';
import { stripeEvent } from './stripe/events.js';
import { Faults, type FailureOptions } from './stripe/faults.js';
import { registerInvoiceItems } from './stripe/invoice-items.js';
import { attemptInvoicePayment, registerInvoices } from './stripe/invoices.js';
import { clone, randomId, type Obj } from './stripe/objects.js';
import { createCardPaymentMethod, registerPaymentMethods, type FakeCard } from './stripe/payment-methods.js';
import { addMeteredPrice, registerPrices } from './stripe/prices.js';
import { Routes } from './stripe/routes.js';
import { StripeHttpServer, type ReceivedRequest, type Traffic } from './stripe/server.js';
import { confirmSetupIntent, createSetupIntent, registerSetupIntents } from './stripe/setup-intents.js';
import { createStore, type StripeStore } from './stripe/store.js';
import { createSubscriptionDirectly, registerSubscriptions, setSubscriptionStatus } from './stripe/subscriptions.js';

export type { Obj } from './stripe/objects.js';
export type { ReceivedRequest, Traffic } from './stripe/server.js';
export type { FakeCard } from './stripe/payment-methods.js';
export { parseStripeForm } from './stripe/form.js';
export { deliverEvent } from './stripe/events.js';

/** Each resource's endpoints and expandable ids; a new resource is a module in stripe/ and a line here. */
const RESOURCES = [
  registerCustomers,
  registerPaymentMethods,
  registerSetupIntents,
  registerCheckoutSessions,
  registerSubscriptions,
  registerPrices,
  registerInvoiceItems,
  registerInvoices,
];

/**
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
 *
 * This class is the face tests use; the HTTP machinery and one module per resource live in stripe/.
 */
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

  constructor(private readonly opts: { priceId?: string; traffic?: Traffic } = {}) {
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
    for (const register of RESOURCES) register(routes, this.store);
    this.server = new StripeHttpServer({
      secretKey: this.secretKey,
      routes,
      faults: this.faults,
      traffic: opts.traffic,
    });
    this.requests = this.server.requests;
  }

  /** The environment that points the service at this fake. */
  env(overrides: Env = {}): Env {
    return {
      STRIPE_SECRET_KEY: this.secretKey,
      STRIPE_WEBHOOK_SECRET: this.webhookSecret,
      STRIPE_PRICE_ID: this.priceId,
      STRIPE_API_BASE: this.url,
      // The service paces its calls to this; without a limit in the fake, pacing only slows tests.
      STRIPE_MAX_OPS_PER_SECOND: String(this.opts.traffic?.opsPerSecond ?? 10_000),
      // Every client of the suite is 127.0.0.1: the per-network limit of checkout returns is the flood test's to set.
      STRIPE_RETURNS_PER_CLIENT_PER_MINUTE: '1000000',
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
  failNext(count: number, opts: FailureOptions = {}): void {
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
  completeCheckoutSession(
    sessionId: string,
    card: FakeCard = {},
  ): { session: Obj; paymentMethod: Obj; returnUrl: string } {
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
  createSetupIntent(opts: {
    customer: string | null;
    status?: 'succeeded' | 'requires_payment_method' | 'processing' | 'canceled';
    card?: FakeCard;
    metadata?: Obj;
  }): Obj {
    return createSetupIntent(this.store, opts);
  }

  /** Changes a subscription's status as Stripe (or someone in the dashboard) would, with the matching events. */
  setSubscriptionStatus(subscriptionId: string, status: string): Obj {
    return setSubscriptionStatus(this.store, subscriptionId, status);
  }

  /** A subscription created outside this service (the dashboard, another integration). */
  /** A customer made without a request (as POST /v1/customers would), e.g. thousands for a benchmark. */
  createCustomerDirectly(params: Obj): Obj {
    return newCustomer(this.store, params);
  }

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
}
