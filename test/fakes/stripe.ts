import type { Env } from '../../src/config.js';
import { completeCheckoutSession, expireCheckoutSession, newCheckoutSession, registerCheckoutSessions } from './stripe/checkout-sessions.js';
import { registerCustomers, requireCustomer } from './stripe/customers.js';
import { invalid, missing, required, StripeApiError } from './stripe/errors.js';
import { stripeEvent } from './stripe/events.js';
import { Faults } from './stripe/faults.js';
import { asBool, asInt, mergeMetadata } from './stripe/form.js';
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
    const inv = this.invoices.get(invoiceId);
    if (!inv) throw new Error(`no invoice ${invoiceId}`);
    try {
      this.payInvoice(inv);
      return { paid: true, invoice: clone(inv) };
    } catch (err) {
      if (err instanceof StripeApiError) return { paid: false, invoice: clone(inv) };
      throw err;
    }
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

  private invoiceTotals(inv: Obj): void {
    const total = (inv.lines.data as Obj[]).reduce((n, l) => n + (l.amount as number), 0);
    inv.subtotal = total;
    inv.subtotal_excluding_tax = total;
    inv.total = total;
    inv.total_excluding_tax = total;
    inv.amount_due = total;
    inv.amount_remaining = inv.status === 'paid' ? 0 : total - inv.amount_paid;
    inv.lines.total_count = inv.lines.data.length;
  }

  private lineFor(item: Obj, invoiceId: string): Obj {
    return {
      id: randomId('il_'),
      object: 'line_item',
      amount: item.amount,
      currency: item.currency,
      description: item.description,
      discount_amounts: [],
      discountable: true,
      discounts: [],
      invoice: invoiceId,
      livemode: false,
      metadata: item.metadata,
      parent: {
        type: 'invoice_item_details',
        invoice_item_details: { invoice_item: item.id, proration: false, proration_details: { credited_items: null }, subscription: null },
        subscription_item_details: null,
      },
      period: item.period,
      pretax_credit_amounts: [],
      pricing: item.pricing,
      quantity: item.quantity,
      quantity_decimal: String(item.quantity),
      subtotal: item.amount,
      taxes: [],
    };
  }

  private payInvoice(inv: Obj): void {
    if (inv.status === 'paid') throw invalid('Invoice is already paid', undefined, 'invoice_already_paid');
    if (inv.status !== 'open') throw invalid(`You can only pay an invoice in the open state (it is ${inv.status}).`, undefined, 'invoice_not_open');
    const customer = requireCustomer(this.store, inv.customer);
    const pmId = inv.default_payment_method ?? customer.invoice_settings.default_payment_method;
    inv.attempted = true;
    inv.attempt_count += 1;
    if (!pmId) {
      this.emit('invoice.payment_failed', inv);
      throw invalid('This customer has no attached payment source or default payment method.', undefined, 'invoice_no_customer_line_items');
    }
    if (this.store.declining.has(pmId)) {
      inv.next_payment_attempt = this.now() + 3 * 86400;
      this.emit('invoice.payment_failed', inv);
      throw new StripeApiError(402, 'card_error', 'Your card was declined.', 'card_declined', undefined, { decline_code: 'generic_decline' });
    }
    inv.status = 'paid';
    inv.amount_paid = inv.amount_due;
    inv.amount_remaining = 0;
    inv.next_payment_attempt = null;
    inv.status_transitions.paid_at = this.now();
    this.emit('invoice.paid', inv);
    this.emit('invoice.payment_succeeded', inv);
  }

  private defineRoutes(routes: Routes): void {
    routes.expandable('in_', this.invoices);
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
        invoice.lines.data.push(this.lineFor(item, invoice.id));
        this.invoiceTotals(invoice);
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

    // Invoices
    routes.add('POST', '/v1/invoices', ({ body }) => {
      if (!body.customer) throw required('customer');
      const customer = requireCustomer(this.store, String(body.customer), 'customer');
      const collection = body.collection_method ?? 'charge_automatically';
      if (collection === 'send_invoice' && body.days_until_due === undefined && body.due_date === undefined) {
        throw invalid('Invoices with collection_method=send_invoice need days_until_due or due_date.', 'days_until_due');
      }
      const now = this.now();
      const id = randomId('in_');
      const inv: Obj = {
        id,
        object: 'invoice',
        account_country: 'US',
        account_name: 'Fake Stripe Account',
        account_tax_ids: null,
        amount_due: 0,
        amount_overpaid: 0,
        amount_paid: 0,
        amount_remaining: 0,
        amount_shipping: 0,
        application: null,
        attempt_count: 0,
        attempted: false,
        auto_advance: asBool(body.auto_advance) ?? false,
        automatic_tax: { disabled_reason: null, enabled: false, liability: null, provider: null, status: null },
        automatically_finalizes_at: null,
        billing_reason: body.subscription ? 'subscription' : 'manual',
        collection_method: collection,
        created: now,
        currency: String(body.currency ?? customer.currency ?? 'usd'),
        custom_fields: null,
        customer: customer.id,
        customer_account: null,
        customer_address: null,
        customer_email: customer.email,
        customer_name: customer.name,
        customer_phone: null,
        customer_shipping: null,
        customer_tax_exempt: 'none',
        customer_tax_ids: [],
        default_payment_method: body.default_payment_method ?? null,
        default_source: null,
        default_tax_rates: [],
        description: body.description ?? null,
        discounts: [],
        due_date: body.due_date !== undefined ? asInt(body.due_date, 'due_date') : null,
        days_until_due_requested: body.days_until_due !== undefined ? asInt(body.days_until_due, 'days_until_due') : null,
        effective_at: null,
        ending_balance: null,
        footer: null,
        from_invoice: null,
        hosted_invoice_url: null,
        invoice_pdf: null,
        issuer: { type: 'self' },
        last_finalization_error: null,
        latest_revision: null,
        lines: { object: 'list', data: [], has_more: false, total_count: 0, url: `/v1/invoices/${id}/lines` },
        livemode: false,
        metadata: mergeMetadata({}, body.metadata),
        next_payment_attempt: null,
        number: null,
        on_behalf_of: null,
        parent: body.subscription ? { type: 'subscription_details', quote_details: null, subscription_details: { metadata: {}, subscription: body.subscription } } : null,
        payment_settings: { default_mandate: null, payment_method_options: null, payment_method_types: null },
        period_end: now,
        period_start: now,
        post_payment_credit_notes_amount: 0,
        pre_payment_credit_notes_amount: 0,
        receipt_number: null,
        rendering: null,
        shipping_cost: null,
        shipping_details: null,
        starting_balance: 0,
        statement_descriptor: null,
        status: 'draft',
        status_transitions: { finalized_at: null, marked_uncollectible_at: null, paid_at: null, voided_at: null },
        subtotal: 0,
        subtotal_excluding_tax: 0,
        test_clock: null,
        total: 0,
        total_discount_amounts: [],
        total_excluding_tax: 0,
        total_pretax_credit_amounts: [],
        total_taxes: [],
        webhooks_delivered_at: null,
      };
      // Since 2022-08-01 pending items stay pending unless the request asks to include them.
      if ((body.pending_invoice_items_behavior ?? 'exclude') === 'include') {
        for (const item of this.invoiceItems.values()) {
          if (item.customer === customer.id && item.invoice === null) {
            item.invoice = id;
            inv.lines.data.push(this.lineFor(item, id));
          }
        }
      }
      this.invoices.set(id, inv);
      this.invoiceTotals(inv);
      this.emit('invoice.created', inv);
      return inv;
    });
    routes.add('GET', '/v1/invoices', ({ query }) => {
      const list = [...this.invoices.values()]
        .filter((i) => (!query.customer || i.customer === query.customer) && (!query.status || i.status === query.status))
        .reverse();
      return listPage(list, '/v1/invoices', query);
    });
    routes.add('GET', '/v1/invoices/:id', ({ params }) => {
      const inv = this.invoices.get(params.id);
      if (!inv) throw missing('invoice', params.id);
      return inv;
    });
    routes.add('POST', '/v1/invoices/:id/finalize', ({ params, body }) => {
      const inv = this.invoices.get(params.id);
      if (!inv) throw missing('invoice', params.id);
      if (inv.status !== 'draft') throw invalid(`This invoice is already finalized, you can't re-finalize a non-draft invoice.`, undefined, 'invoice_not_editable');
      const customer = requireCustomer(this.store, inv.customer);
      const now = this.now();
      inv.status = 'open';
      inv.number = `${customer.invoice_prefix}-${String(++this.store.invoiceSequence).padStart(4, '0')}`;
      customer.next_invoice_sequence += 1;
      inv.status_transitions.finalized_at = now;
      inv.effective_at = now;
      inv.ending_balance = 0;
      inv.hosted_invoice_url = `${this.store.baseUrl()}/i/${inv.id}`;
      inv.invoice_pdf = `${this.store.baseUrl()}/i/${inv.id}/pdf`;
      if (inv.collection_method === 'send_invoice' && inv.due_date === null) inv.due_date = now + inv.days_until_due_requested * 86400;
      if (body.auto_advance !== undefined) inv.auto_advance = asBool(body.auto_advance);
      this.emit('invoice.finalized', inv);
      if (inv.amount_due === 0) {
        inv.status = 'paid';
        inv.status_transitions.paid_at = now;
        this.emit('invoice.paid', inv);
      }
      return inv;
    });
    routes.add('POST', '/v1/invoices/:id/pay', ({ params }) => {
      const inv = this.invoices.get(params.id);
      if (!inv) throw missing('invoice', params.id);
      this.payInvoice(inv);
      return inv;
    });
    routes.add('POST', '/v1/invoices/:id/send', ({ params }) => {
      const inv = this.invoices.get(params.id);
      if (!inv) throw missing('invoice', params.id);
      if (inv.status !== 'open' && inv.status !== 'paid') throw invalid('You can only send an invoice that has been finalized.', undefined, 'invoice_not_editable');
      this.sentInvoices.push(inv.id);
      this.emit('invoice.sent', inv);
      return inv;
    });
    routes.add('POST', '/v1/invoices/:id/void', ({ params }) => {
      const inv = this.invoices.get(params.id);
      if (!inv) throw missing('invoice', params.id);
      if (inv.status !== 'open' && inv.status !== 'uncollectible') throw invalid('You can only void open or uncollectible invoices.');
      inv.status = 'void';
      inv.status_transitions.voided_at = this.now();
      this.emit('invoice.voided', inv);
      return inv;
    });
  }
}
