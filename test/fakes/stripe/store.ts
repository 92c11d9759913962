import { stripeEvent } from './events.js';
import type { Obj } from './objects.js';

/**
 * Everything the fake Stripe account holds. One store rather than one per module because
 * Stripe's resources read each other (an invoice charges its customer's default payment method,
 * a checkout session makes a setup intent); each field is written only by the module named.
 */
export interface StripeStore {
  /** customers.ts */
  readonly customers: Map<string, Obj>;
  /** payment-methods.ts */
  readonly paymentMethods: Map<string, Obj>;
  /** payment-methods.ts: ids of the cards that decline every charge (FakeCard.declines). */
  readonly declining: Set<string>;
  /** setup-intents.ts */
  readonly setupIntents: Map<string, Obj>;
  /** checkout-sessions.ts */
  readonly checkoutSessions: Map<string, Obj>;
  /** subscriptions.ts */
  readonly subscriptions: Map<string, Obj>;
  /** prices.ts: the account's one product, which every price belongs to. */
  readonly productId: string;
  /** prices.ts */
  readonly prices: Map<string, Obj>;
  /** invoice-items.ts; invoices.ts attaches pending items to a new invoice. */
  readonly invoiceItems: Map<string, Obj>;
  /** invoices.ts */
  readonly invoices: Map<string, Obj>;
  /** invoices.ts: invoices sent with POST /v1/invoices/:id/send. */
  readonly sentInvoices: string[];
  /** invoices.ts: the last invoice number handed out, shared by all customers. */
  invoiceSequence: number;
  /** The events Stripe would have sent, in order. */
  readonly events: Obj[];
  /** Where the fake listens: hosted pages (checkout, invoices) are linked under it. */
  baseUrl(): string;
  /** Unix seconds, as Stripe's timestamps. */
  now(): number;
  /** Records the event Stripe would send for a change to `object`. */
  emit(type: string, object: Obj, previousAttributes?: Obj): void;
}

export function createStore(opts: { productId: string; baseUrl: () => string }): StripeStore {
  const events: Obj[] = [];
  const now = () => Math.floor(Date.now() / 1000);
  return {
    customers: new Map(),
    paymentMethods: new Map(),
    declining: new Set(),
    setupIntents: new Map(),
    checkoutSessions: new Map(),
    subscriptions: new Map(),
    productId: opts.productId,
    prices: new Map(),
    invoiceItems: new Map(),
    invoices: new Map(),
    sentInvoices: [],
    invoiceSequence: 0,
    events,
    baseUrl: opts.baseUrl,
    now,
    emit: (type, object, previousAttributes) => void events.push(stripeEvent(type, object, now(), previousAttributes)),
  };
}
