import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { callStripe, type Stripe } from '../infra/stripe.js';
import type { Logger } from '../logger.js';
import type { BillingMetrics } from '../metrics.js';
import { ACTIVE_STATUSES } from './stripe-subscription.service.js';
import { transaction, type Db } from '../infra/db.js';
import { changeTier, type TierDeps } from './tier.service.js';
import type { Tier } from '../../db/schema/index.js';
import type { AccountBillingPatch } from '../accounts/accounts.repository.js';
import type { Account } from '../accounts/account.js';
import { accountsWithCustomer, lockAccount, updateAccountBilling } from '../accounts/account-billing.service.js';
import { refreshInvoiceStatuses } from '../billing/invoice-status.service.js';
import type { JobOptions, JobResult } from '../scheduled-job.js';

/*
 * Daily reconciliation: Stripe's subscription state is the truth; a webhook we never received
 * (an outage, a dashboard change, a cancellation by Stripe) leaves the account behind, and this
 * puts it right. Tier changes go through changeTier with reason 'reconcile' (audited in
 * tier_changes). Nothing is ever written to Stripe here.
 */

/** What reconciliation works with: Stripe (read only), the accounts and invoices it repairs, and the tier change. */
export interface ReconcileDeps extends TierDeps {
  db: Db;
  clock: Clock;
  log: Logger;
  config: Pick<Config, 'stripe' | 'redis'>;
  metrics: { billing: BillingMetrics };
  /** Throws 503 billing_not_configured when STRIPE_SECRET_KEY is not set. */
  stripe: Stripe;
}

export type ReconcileFix = 'tier_upgraded' | 'tier_downgraded' | 'subscription' | 'payment_method';

export interface AccountReconciliation {
  account_id: string;
  fixes: ReconcileFix[];
  /** Set when the account changed while it was being checked; the next run looks again. */
  skipped?: string;
}

interface StripeState {
  tier: Tier;
  subscription: Stripe.Subscription | null;
  paymentMethod: Stripe.PaymentMethod | null;
}

/** What Stripe says the account should be: paid exactly when one of its subscriptions to our price is active. */
async function readStripeState(
  app: { config: Pick<Config, 'stripe'> },
  stripe: Stripe,
  account: Account,
): Promise<StripeState> {
  const customerId = account.stripe_customer_id!;
  const subscriptions: Stripe.Subscription[] = [];
  await callStripe('listing the subscriptions', async () => {
    for await (const s of stripe.subscriptions.list({ customer: customerId, status: 'all', limit: 100 }))
      subscriptions.push(s);
  });
  const price = app.config.stripe.priceId;
  const ours = subscriptions.filter((s) => price === undefined || s.items.data.some((i) => i.price.id === price));
  const active = ours.filter((s) => ACTIVE_STATUSES.has(s.status));
  const current =
    active.find((s) => s.id === account.stripe_subscription_id) ??
    active[0] ??
    ours.find((s) => s.id === account.stripe_subscription_id) ??
    ours[0] ??
    null;

  const customer = await callStripe('reading the customer', () =>
    stripe.customers.retrieve(customerId, { expand: ['invoice_settings.default_payment_method'] }),
  );
  const pm =
    'deleted' in customer && customer.deleted
      ? null
      : (customer as Stripe.Customer).invoice_settings?.default_payment_method;
  return {
    tier: active.length ? 'paid' : 'free',
    subscription: current,
    paymentMethod: pm && typeof pm === 'object' ? pm : null,
  };
}

/** Compares one account with Stripe and repairs any drift. */
export async function reconcileAccount(
  app: Omit<ReconcileDeps, 'stripe'>,
  stripe: Stripe,
  account: Account,
): Promise<AccountReconciliation> {
  const state = await readStripeState(app, stripe, account);
  const result = await transaction(app.db, async (trx): Promise<AccountReconciliation> => {
    const locked = await lockAccount(trx, account.id);
    if (!locked) return { account_id: account.id, fixes: [], skipped: 'the account no longer exists' };
    // A tier change that committed since we read the account came from a fresher source (an
    // upgrade or a webhook racing us); judging it by our older reading of Stripe could undo it.
    if (
      locked.tier_changed_at.getTime() !== account.tier_changed_at.getTime() ||
      locked.stripe_customer_id !== account.stripe_customer_id
    ) {
      return { account_id: account.id, fixes: [], skipped: 'the account changed while it was being checked' };
    }
    const fixes: ReconcileFix[] = [];
    const patch: AccountBillingPatch = {};
    const sub = state.subscription;
    if (sub && (locked.stripe_subscription_id !== sub.id || locked.subscription_status !== sub.status)) {
      patch.stripe_subscription_id = sub.id;
      patch.subscription_status = sub.status;
      fixes.push('subscription');
    }
    const pm = state.paymentMethod;
    if ((pm?.id ?? null) !== locked.default_payment_method_id) {
      patch.default_payment_method_id = pm?.id ?? null;
      patch.payment_method_brand = pm ? (pm.card?.brand ?? pm.type ?? null) : null;
      patch.payment_method_last4 = pm?.card?.last4 ?? null;
      fixes.push('payment_method');
    }
    const at = app.clock.now();
    if (fixes.length) await updateAccountBilling(trx, locked.id, patch, at);
    if (state.tier !== locked.tier) {
      const change = await changeTier(app, trx, locked.id, state.tier, 'reconcile', at);
      if (change.changed) fixes.push(state.tier === 'paid' ? 'tier_upgraded' : 'tier_downgraded');
    }
    return { account_id: account.id, fixes };
  });

  const m = app.metrics.billing;
  for (const fix of result.fixes) m.reconciliationFixes.inc({ fix });
  if (result.fixes.length) {
    app.log.warn(
      {
        accountId: account.id,
        fixes: result.fixes,
        stripeTier: state.tier,
        localTier: account.tier,
        subscriptionId: state.subscription?.id ?? null,
        subscriptionStatus: state.subscription?.status ?? null,
        paymentMethodId: state.paymentMethod?.id ?? null,
      },
      'reconciliation repaired drift from Stripe (a missed webhook?)',
    );
  }
  await refreshInvoiceStatuses(app, stripe, account.id);
  return result;
}

/** The daily job: every account with a Stripe customer (or the given ones). */
export async function reconcileAccounts(app: ReconcileDeps, opts: JobOptions = {}): Promise<JobResult> {
  const stripe = app.stripe;
  const progress = opts.progress ?? (() => undefined);
  const summary = {
    accounts: 0,
    fixed: 0,
    fixes: {} as Record<string, number>,
    skipped: 0,
    failed: 0,
    failures: [] as { account_id: string; error: string }[],
  };
  let after: string | null = null;
  for (;;) {
    const page = await accountsWithCustomer(app.db, after, 100, opts.accounts);
    if (page.length === 0) break;
    for (const account of page) {
      await opts.checkpoint?.();
      summary.accounts += 1;
      try {
        const r = await reconcileAccount(app, stripe, account);
        if (r.skipped) {
          summary.skipped += 1;
          progress(`  ${account.id}: skipped (${r.skipped})`);
        } else if (r.fixes.length) {
          summary.fixed += 1;
          for (const f of r.fixes) summary.fixes[f] = (summary.fixes[f] ?? 0) + 1;
          progress(`  ${account.id}: fixed ${r.fixes.join(', ')}`);
        } else {
          progress(`  ${account.id}: in sync`);
        }
      } catch (err) {
        summary.failed += 1;
        const message = err instanceof Error ? err.message : String(err);
        summary.failures.push({ account_id: account.id, error: message });
        app.metrics.billing.reconciliationFailures.inc();
        app.log.error({ err, accountId: account.id }, 'reconciling an account failed; the next run retries it');
        progress(`  ${account.id}: FAILED: ${message}`);
      }
    }
    after = page.at(-1)!.id;
  }
  progress(
    `reconcile: ${summary.accounts} account(s) checked, ${summary.fixed} repaired, ${summary.skipped} skipped, ${summary.failed} failed`,
  );
  return { ok: summary.failed === 0, summary };
}
