import type { ColumnType, Generated } from 'kysely';

export type Tier = 'free' | 'paid';

export interface AccountsTable {
  id: Generated<string>;
  name: string;
  /** Stored as given; uniqueness and lookup are on lower(email). */
  email: string;
  organization: string;
  tier: ColumnType<Tier, Tier | undefined, Tier>;
  verified_at: Date | null;
  stripe_customer_id: string | null;
  stripe_subscription_id: string | null;
  /** Stripe's subscription status as last seen (active, past_due, canceled, ...). */
  subscription_status: string | null;
  default_payment_method_id: string | null;
  payment_method_brand: string | null;
  payment_method_last4: string | null;
  /** The open hosted checkout session, so a second upgrade reuses it instead of opening another. */
  checkout_session_id: string | null;
  /** The monthly spending limit in USD (numeric(9,2), e.g. "25.00"), or null for none; enforced on the paid tier. */
  monthly_spend_limit_usd: ColumnType<string | null, string | null | undefined, string | null>;
  tier_changed_at: ColumnType<Date, Date | undefined, Date>;
  /** Set by "sign out everywhere": a JWT issued (`iat`) before it is refused. */
  tokens_not_before: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /** A closure under way: the keys are revoked; the final invoice and the erasure may still be to do. */
  closing_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  /** A finished closure: personal data erased (docs/accounts.md#closing-an-account); the row stays for invoices. */
  closed_at: ColumnType<Date | null, Date | null | undefined, Date | null>;
  created_at: ColumnType<Date, never, never>;
  updated_at: ColumnType<Date, Date | undefined, Date>;
}

export interface TierChangesTable {
  id: Generated<string>;
  account_id: string;
  from_tier: Tier;
  to_tier: Tier;
  /** What caused it: api_upgrade, checkout_success, webhook:<event type>, reconcile, ... */
  reason: string;
  at: ColumnType<Date, Date | undefined, never>;
}
