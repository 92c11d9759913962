import { invalid, missing, required } from './errors.js';
import { asBool, asInt, mergeMetadata } from './form.js';
import { listPage } from './list.js';
import { randomId, type Obj } from './objects.js';
import { requireCustomer } from './customers.js';
import { addInvoiceItem } from './invoices.js';
import type { Routes } from './routes.js';
import type { StripeStore } from './store.js';

export function registerInvoiceItems(routes: Routes, store: StripeStore): void {
  routes.expandable('ii_', store.invoiceItems);

  routes.add('POST', '/v1/invoiceitems', ({ body }) => {
    if (!body.customer) throw required('customer');
    const customer = requireCustomer(store, String(body.customer), 'customer');
    const quantity = body.quantity === undefined ? 1 : asInt(body.quantity, 'quantity');
    let amount: number;
    let unitDecimal: string | null = null;
    let price: string | null = null;
    if (body.amount !== undefined) {
      amount = asInt(body.amount, 'amount');
    } else if (
      body.unit_amount_decimal !== undefined ||
      body.price_data?.unit_amount_decimal !== undefined ||
      body.price_data?.unit_amount !== undefined
    ) {
      unitDecimal = String(
        body.unit_amount_decimal ?? body.price_data?.unit_amount_decimal ?? body.price_data?.unit_amount,
      );
      amount = roundScaled(toScaled(unitDecimal) * BigInt(quantity));
    } else if (body.pricing?.price) {
      price = String(body.pricing.price);
      const p = store.prices.get(price);
      if (!p) throw invalid(`No such price: '${price}'`, 'pricing[price]', 'resource_missing');
      unitDecimal = String(p.unit_amount_decimal ?? p.unit_amount);
      amount = roundScaled(toScaled(unitDecimal) * BigInt(quantity));
    } else {
      throw required('amount');
    }
    const currency = String(body.currency ?? body.price_data?.currency ?? customer.currency ?? 'usd');
    if (customer.currency && customer.currency !== currency)
      throw invalid(`The customer's currency is ${customer.currency}; invoice items must use it.`, 'currency');
    let invoice: Obj | undefined;
    if (body.invoice) {
      invoice = store.invoices.get(String(body.invoice));
      if (!invoice) throw missing('invoice', String(body.invoice), 'invoice');
      if (invoice.status !== 'draft') throw invalid('You can only add invoice items to draft invoices.', 'invoice');
      if (invoice.customer !== customer.id) throw invalid('The invoice belongs to another customer.', 'invoice');
    }
    const now = store.now();
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
      parent: body.subscription
        ? { type: 'subscription_details', subscription_details: { subscription: body.subscription } }
        : null,
      period: body.period
        ? { start: asInt(body.period.start, 'period[start]'), end: asInt(body.period.end, 'period[end]') }
        : { start: now, end: now },
      pricing: {
        type: 'price_details',
        price_details: price ? { price, product: store.productId } : undefined,
        unit_amount_decimal: unitDecimal ?? String(amount),
      },
      proration: false,
      quantity,
      quantity_decimal: String(quantity),
      tax_rates: [],
      test_clock: null,
    };
    customer.currency ??= currency;
    store.invoiceItems.set(item.id, item);
    if (invoice) addInvoiceItem(invoice, item);
    store.emit('invoiceitem.created', item);
    return item;
  });

  routes.add('GET', '/v1/invoiceitems', ({ query }) => {
    const items = [...store.invoiceItems.values()].filter(
      (i) =>
        (!query.customer || i.customer === query.customer) &&
        (!query.invoice || i.invoice === query.invoice) &&
        (query.pending === undefined || (asBool(query.pending) ? i.invoice === null : i.invoice !== null)),
    );
    return listPage(items.reverse(), '/v1/invoiceitems', query);
  });

  routes.add('GET', '/v1/invoiceitems/:id', ({ params }) => {
    const i = store.invoiceItems.get(params.id);
    if (!i) throw missing('invoiceitem', params.id);
    return i;
  });
}

// Amounts from *_decimal fields are exact: Stripe allows 12 decimal places, so they are scaled by 10^12 as bigints.
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
