// The parts of the public API's answers the console reads (the OpenAPI document has them whole).

export interface SpendLimit {
  monthly_limit_usd: string | null;
  enforced: boolean;
  month: string;
  spent_usd: string;
  reserved_usd: string;
  remaining_usd: string | null;
  resets_at: string;
}

export type Window = 'requests_per_minute' | 'requests_per_hour' | 'requests_per_day' | 'tokens_per_day';

export interface SubscriptionInfo {
  tier: 'free' | 'paid';
  subscription_status: string | null;
  payment_method: { brand: string | null; last4: string | null } | null;
  checkout_pending?: boolean;
  models: { id: string; provider: string; input_price_per_million: string; output_price_per_million: string }[];
  limits: Record<Window, number> & {
    remaining: Record<Window, number> | null;
    resets_at: Record<Window, string> | null;
  };
  spend_limit?: SpendLimit;
  api_key?: { next_regeneration_at: string | null };
}

export interface Figures {
  requests: number;
  /** Every prompt token, cached and cache-written ones included. */
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  cost_usd: string;
  /** Prompt tokens the provider read from its prompt cache (part of prompt_tokens). */
  cached_tokens: number;
  /** Prompt tokens written to the provider's prompt cache (part of prompt_tokens). */
  cache_write_tokens: number;
  /** Completion tokens spent reasoning (part of completion_tokens). */
  reasoning_tokens: number;
  /** Paid-tier cost with every prompt token at the input price, less the cost: negative when writes cost more than reads saved. */
  cache_savings_usd: string;
}

export interface MonthUsage {
  tier: 'free' | 'paid';
  period: { month: string };
  models: (Figures & { model: string; cost: string })[];
  total: Figures & { cost: string; cost_cents: number };
  spend_limit?: SpendLimit;
  /** This month per key (`by_key` of GET /v1/billing/usage). */
  by_key?: (KeyUsage & { cost: string })[];
}

/** The public API a request came through. */
export type Api = 'chat.completions' | 'responses';

/** As the console asks for it (group_by=api): a row per day, model and API. */
export interface DailyUsage {
  start_date: string;
  end_date: string;
  data: (Figures & { date: string; model: string; api: Api })[];
  totals: Figures;
  /** The period's totals per API, every API listed. */
  by_api: (Figures & { api: Api })[];
  /** The period's totals per API key, the costliest first. */
  by_key: KeyUsage[];
}

/** A key's usage, named as GET /v1/keys shows the key (key_id null: usage from before keys were recorded). */
export interface KeyUsage extends Figures {
  key_id: string | null;
  name: string | null;
  redacted_value: string | null;
  is_default: boolean;
  revoked: boolean;
}

export interface RequestRow {
  id: string;
  created: number;
  model: string;
  api: Api;
  stream: boolean;
  status: 'completed' | 'cancelled' | 'failed';
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** Parts of prompt_tokens and completion_tokens, as in Figures. */
  cached_tokens: number;
  cache_write_tokens: number;
  reasoning_tokens: number;
  cost_usd: string;
  key_id: string | null;
  key_name: string | null;
}

export interface Invoice {
  id: string;
  kind: 'monthly' | 'on_demand';
  period_start: string;
  period_end: string;
  status: string;
  amount: string;
  hosted_invoice_url: string | null;
  invoice_pdf: string | null;
  created_at: string;
}

export interface History {
  invoices: Invoice[];
  months: (Figures & { month: string; cost: string })[];
  total_invoiced: string;
}

export interface SubscriptionResult {
  status: string;
  tier: 'free' | 'paid';
  message: string;
  checkout_url?: string;
}

export interface TierPrice {
  input_price_per_million: string;
  cached_input_price_per_million: string;
  /** A prompt part written to the cache for 5 minutes (Anthropic's default TTL); the input price where writing costs nothing more. */
  cache_write_price_per_million: string;
  /** The same for 1 hour (cache_control's ttl "1h"). */
  cache_write_1h_price_per_million: string;
  output_price_per_million: string;
}

export interface Model {
  id: string;
  owned_by: string;
  context_length: number | null;
  input_modalities: ('text' | 'image')[];
  supports_tools: boolean;
  reasoning: boolean;
  tiers: ('free' | 'paid')[];
  pricing: { free?: TierPrice; paid?: TierPrice };
}

export interface ModelList {
  object: 'list';
  data: Model[];
}

/** An API key as GET /v1/keys lists it: never its secret. */
export interface ApiKey {
  id: string;
  name: string;
  redacted_value: string;
  is_default: boolean;
  created_at: string;
  last_used_at: string | null;
  expires_at: string | null;
  models: string[] | null;
  limits: { requests_per_minute: number | null; monthly_spend_limit_usd: string | null };
  disabled: boolean;
}

export interface ApiKeyList {
  object: 'list';
  data: ApiKey[];
}
