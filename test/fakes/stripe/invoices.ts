import { invalid, missing, required, StripeApiError } from './errors.js';
import { asBool, asInt, mergeMetadata } from './form.js';
import { listPage } from './list.js';
import { clone, randomId, type Obj } from './objects.js';
import { requireCustomer } from './customers.js';
import type { Routes } from './routes.js';
import type { StripeStore } from './store.js';

export function registerInvoices(routes: Routes, store: StripeStore): void {
  routes.expandable('in_', store.invoices);

  routes.add('POST', '/v1/invoices', ({ body }) => {
    if (!body.customer) throw required('customer');
    const customer = requireCustomer(store, String(body.customer), 'customer');
    const collection = body.collection_method ?? 'charge_automatically';
    if (collection === 'send_invoice' && body.days_until_due === undefined && body.due_date === undefined) {
      throw invalid('Invoices with collection_method=send_invoice need days_until_due or due_date.', 'days_until_due');
    }
    const now = store.now();
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
      parent: body.subscription
        ? {
            type: 'subscription_details',
            quote_details: null,
            subscription_details: { metadata: {}, subscription: body.subscription },
          }
        : null,
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
      for (const item of store.invoiceItems.values()) {
        if (item.customer === customer.id && item.invoice === null) addInvoiceItem(inv, item);
      }
    }
    store.invoices.set(id, inv);
    store.emit('invoice.created', inv);
    return inv;
  });

  routes.add('GET', '/v1/invoices', ({ query }) => {
    const list = [...store.invoices.values()]
      .filter((i) => (!query.customer || i.customer === query.customer) && (!query.status || i.status === query.status))
      .reverse();
    return listPage(list, '/v1/invoices', query);
  });

  routes.add('GET', '/v1/invoices/:id', ({ params }) => {
    const inv = store.invoices.get(params.id);
    if (!inv) throw missing('invoice', params.id);
    return inv;
  });

  routes.add('POST', '/v1/invoices/:id/finalize', ({ params, body }) => {
    const inv = store.invoices.get(params.id);
    if (!inv) throw missing('invoice', params.id);
    if (inv.status !== 'draft')
      throw invalid(
        `This invoice is already finalized, you can't re-finalize a non-draft invoice.`,
        undefined,
        'invoice_not_editable',
      );
    const customer = requireCustomer(store, inv.customer);
    const now = store.now();
    inv.status = 'open';
    inv.number = `${customer.invoice_prefix}-${String(++store.invoiceSequence).padStart(4, '0')}`;
    customer.next_invoice_sequence += 1;
    inv.status_transitions.finalized_at = now;
    inv.effective_at = now;
    inv.ending_balance = 0;
    inv.hosted_invoice_url = `${store.baseUrl()}/i/${inv.id}`;
    inv.invoice_pdf = `${store.baseUrl()}/i/${inv.id}/pdf`;
    if (inv.collection_method === 'send_invoice' && inv.due_date === null)
      inv.due_date = now + inv.days_until_due_requested * 86400;
    if (body.auto_advance !== undefined) inv.auto_advance = asBool(body.auto_advance);
    store.emit('invoice.finalized', inv);
    if (inv.amount_due === 0) {
      inv.status = 'paid';
      inv.status_transitions.paid_at = now;
      store.emit('invoice.paid', inv);
    }
    return inv;
  });

  routes.add('POST', '/v1/invoices/:id/pay', ({ params }) => {
    const inv = store.invoices.get(params.id);
    if (!inv) throw missing('invoice', params.id);
    payInvoice(store, inv);
    return inv;
  });

  routes.add('POST', '/v1/invoices/:id/send', ({ params }) => {
    const inv = store.invoices.get(params.id);
    if (!inv) throw missing('invoice', params.id);
    if (inv.status !== 'open' && inv.status !== 'paid')
      throw invalid('You can only send an invoice that has been finalized.', undefined, 'invoice_not_editable');
    store.sentInvoices.push(inv.id);
    store.emit('invoice.sent', inv);
    return inv;
  });

  routes.add('POST', '/v1/invoices/:id/void', ({ params }) => {
    const inv = store.invoices.get(params.id);
    if (!inv) throw missing('invoice', params.id);
    if (inv.status !== 'open' && inv.status !== 'uncollectible')
      throw invalid('You can only void open or uncollectible invoices.');
    inv.status = 'void';
    inv.status_transitions.voided_at = store.now();
    store.emit('invoice.voided', inv);
    return inv;
  });
}

/** Puts an invoice item on a draft invoice as a line and brings the invoice's amounts up to date. */
export function addInvoiceItem(inv: Obj, item: Obj): void {
  item.invoice = inv.id;
  inv.lines.data.push(lineFor(item, inv.id));
  updateTotals(inv);
}

/**
 * Charges the invoice's default payment method, else its customer's. A refusal throws the error
 * the pay endpoint answers with, after counting the attempt and emitting invoice.payment_failed.
 */
export function payInvoice(store: StripeStore, inv: Obj): void {
  if (inv.status === 'paid') throw invalid('Invoice is already paid', undefined, 'invoice_already_paid');
  if (inv.status !== 'open')
    throw invalid(
      `You can only pay an invoice in the open state (it is ${inv.status}).`,
      undefined,
      'invoice_not_open',
    );
  const customer = requireCustomer(store, inv.customer);
  const pmId = inv.default_payment_method ?? customer.invoice_settings.default_payment_method;
  inv.attempted = true;
  inv.attempt_count += 1;
  if (!pmId) {
    store.emit('invoice.payment_failed', inv);
    throw invalid(
      'This customer has no attached payment source or default payment method.',
      undefined,
      'invoice_no_customer_line_items',
    );
  }
  if (store.declining.has(pmId)) {
    inv.next_payment_attempt = store.now() + 3 * 86400;
    store.emit('invoice.payment_failed', inv);
    throw new StripeApiError(402, 'card_error', 'Your card was declined.', 'card_declined', undefined, {
      decline_code: 'generic_decline',
    });
  }
  inv.status = 'paid';
  inv.amount_paid = inv.amount_due;
  inv.amount_remaining = 0;
  inv.next_payment_attempt = null;
  inv.status_transitions.paid_at = store.now();
  store.emit('invoice.paid', inv);
  store.emit('invoice.payment_succeeded', inv);
}

/** Stripe's automatic collection attempt on an open invoice; a declining card fails it (invoice.payment_failed). */
export function attemptInvoicePayment(store: StripeStore, invoiceId: string): { paid: boolean; invoice: Obj } {
  const inv = store.invoices.get(invoiceId);
  if (!inv) throw new Error(`no invoice ${invoiceId}`);
  try {
    payInvoice(store, inv);
    return { paid: true, invoice: clone(inv) };
  } catch (err) {
    if (err instanceof StripeApiError) return { paid: false, invoice: clone(inv) };
    throw err;
  }
}

function lineFor(item: Obj, invoiceId: string): Obj {
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
      invoice_item_details: {
        invoice_item: item.id,
        proration: false,
        proration_details: { credited_items: null },
        subscription: null,
      },
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

function updateTotals(inv: Obj): void {
  const total = (inv.lines.data as Obj[]).reduce((n, l) => n + (l.amount as number), 0);
  inv.subtotal = total;
  inv.subtotal_excluding_tax = total;
  inv.total = total;
  inv.total_excluding_tax = total;
  inv.amount_due = total;
  inv.amount_remaining = inv.status === 'paid' ? 0 : total - inv.amount_paid;
  inv.lines.total_count = inv.lines.data.length;
}
