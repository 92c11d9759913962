import type { Clock } from '../clock.js';
import type { Db } from '../infra/db.js';
import { callStripe, type Stripe } from '../infra/stripe.js';
import type { Account } from '../accounts/account.js';
import { rememberStripeCustomer } from '../accounts/account-billing.service.js';
import { getAccount } from '../accounts/accounts.service.js';

/** The card on file as the account keeps it: brand and last 4 digits only. */
export interface PaymentMethodOnFile {
  brand: string | null;
  last4: string | null;
}

export const idOf = (v: string | { id: string } | null | undefined): string | null =>
  v == null ? null : typeof v === 'string' ? v : v.id;

export function cardOf(pm: Stripe.PaymentMethod): PaymentMethodOnFile {
  return { brand: pm.card?.brand ?? pm.type ?? null, last4: pm.card?.last4 ?? null };
}

/** The customer of this account, created on first need. The idempotency key makes concurrent first calls share one customer. */
export async function ensureCustomer(app: { db: Db; clock: Clock }, stripe: Stripe, account: Account): Promise<string> {
  if (account.stripe_customer_id !== null) return account.stripe_customer_id;
  const customer = await callStripe('creating the customer', () =>
    stripe.customers.create(
      {
        email: account.email,
        name: account.name,
        metadata: { account_id: account.id, organization: account.organization },
      },
      { idempotencyKey: `customer:${account.id}` },
    ),
  );
  await rememberStripeCustomer(app.db, account.id, customer.id, app.clock.now());
  const stored = await getAccount(app, account.id);
  return stored.stripe_customer_id ?? customer.id;
}

/** The customer's default payment method as Stripe has it now (the source of truth for "on file"). */
export async function defaultPaymentMethod(stripe: Stripe, customerId: string): Promise<Stripe.PaymentMethod | null> {
  const customer = await callStripe('reading the customer', () =>
    stripe.customers.retrieve(customerId, { expand: ['invoice_settings.default_payment_method'] }),
  );
  if ('deleted' in customer && customer.deleted) return null;
  const pm = (customer as Stripe.Customer).invoice_settings?.default_payment_method;
  return pm && typeof pm === 'object' ? pm : null;
}

/**
 * Makes a payment method the default for the customer's future invoices. Keyed by the setup
 * intent that collected it: each card change is its own operation, so returning to an earlier
 * card later is a new write rather than a replay.
 */
export async function setDefaultPaymentMethod(
  stripe: Stripe,
  account: Account,
  customerId: string,
  paymentMethodId: string,
  setupIntentId: string,
): Promise<void> {
  await callStripe('setting the default payment method', () =>
    stripe.customers.update(
      customerId,
      { invoice_settings: { default_payment_method: paymentMethodId } },
      { idempotencyKey: `default-payment-method:${account.id}:${setupIntentId}` },
    ),
  );
}
