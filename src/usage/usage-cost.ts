import type { UsageEvent } from './usage-event.js';

/** Catalog prices have at most 6 decimals (catalog.schema.ts PRICE_PATTERN). */
const PRICE_DECIMALS = 6;
/** A cost is tokens × price per million ÷ 10^6: at most 12 decimals, held exactly. */
const COST_DECIMALS = PRICE_DECIMALS + 6;

const scaled = (price: string): bigint => {
  const [whole, fraction = ''] = price.split('.');
  return BigInt(`${whole}${fraction.padEnd(PRICE_DECIMALS, '0')}`);
};

/**
 * What a request costs in USD, exactly as the ledger computes it (Postgres numeric:
 * (prompt × input price + completion × output price) ÷ 10^6), as a decimal string without
 * trailing zeros; "0" on the free tier, which is never billed. Summed per model and rounded half up
 * to the cent, it is the invoice line (docs/billing.md).
 */
export function requestCostUsd(e: Pick<UsageEvent, 'tier' | 'prompt_tokens' | 'completion_tokens' | 'input_price_per_million' | 'output_price_per_million'>): string {
  if (e.tier === 'free') return '0';
  const units = BigInt(e.prompt_tokens) * scaled(e.input_price_per_million) + BigInt(e.completion_tokens) * scaled(e.output_price_per_million);
  const digits = units.toString().padStart(COST_DECIMALS + 1, '0');
  const fraction = digits.slice(-COST_DECIMALS).replace(/0+$/, '');
  const whole = digits.slice(0, -COST_DECIMALS);
  return fraction ? `${whole}.${fraction}` : whole;
}
