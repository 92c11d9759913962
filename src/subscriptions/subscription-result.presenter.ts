import type { Tier } from '../../db/schema/accounts.js';
import type { Account } from '../accounts/account.js';
import type { PaymentMethodOnFile } from './stripe-customer.service.js';

export type SubscriptionOutcome =
  | 'upgraded'
  | 'already_paid'
  | 'checkout_required'
  | 'downgraded'
  | 'already_free'
  | 'payment_method_updated'
  | 'checkout_cancelled';

/** What every subscription endpoint that may change the tier answers (SubscriptionResultSchema). */
export interface SubscriptionResult {
  status: SubscriptionOutcome;
  tier: Tier;
  message: string;
  subscription_id: string | null;
  subscription_status: string | null;
  payment_method: PaymentMethodOnFile | null;
  checkout_session_id?: string;
  checkout_url?: string;
  /** ISO time after which the checkout link no longer works. */
  checkout_expires_at?: string;
}

export const ALREADY_PAID = 'The account is already on the paid tier; no second subscription was created.';

export function paymentMethodOf(account: Account): PaymentMethodOnFile | null {
  if (account.default_payment_method_id === null) return null;
  return { brand: account.payment_method_brand, last4: account.payment_method_last4 };
}

export function subscriptionResult(
  account: Account,
  status: SubscriptionOutcome,
  message: string,
  extra: Partial<SubscriptionResult> = {},
): SubscriptionResult {
  return {
    status,
    tier: account.tier,
    message,
    subscription_id: account.stripe_subscription_id,
    subscription_status: account.subscription_status,
    payment_method: paymentMethodOf(account),
    ...extra,
  };
}
