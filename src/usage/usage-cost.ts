import type { UsageEvent } from './usage-event.js';

/** Catalog prices have at most 6 decimals (catalog.schema.ts PRICE_PATTERN). */
const PRICE_DECIMALS = 6;
/** A cost is tokens × price per million ÷ 10^6: at most 12 decimals, held exactly. */
const COST_DECIMALS = PRICE_DECIMALS + 6;
/** Spending limits count in nano-dollars (10^-9 USD): see nanoUsdOfCost. */
const NANO_DECIMALS = 9;
const PICO_PER_NANO = 10n ** BigInt(COST_DECIMALS - NANO_DECIMALS);

const scaled = (price: string): bigint => {
  const [whole, fraction = ''] = price.split('.');
  return BigInt(`${whole}${fraction.padEnd(PRICE_DECIMALS, '0')}`);
};

type Priced = Pick<
  UsageEvent,
  'tier' | 'prompt_tokens' | 'completion_tokens' | 'input_price_per_million' | 'output_price_per_million'
>;

/** The exact cost in 10^-12 USD, the ledger's own precision; 0 on the free tier. */
function picoUsd(e: Priced): bigint {
  if (e.tier === 'free') return 0n;
  return (
    BigInt(e.prompt_tokens) * scaled(e.input_price_per_million) +
    BigInt(e.completion_tokens) * scaled(e.output_price_per_million)
  );
}

/** A fixed-point integer as a decimal string without trailing zeros (at least `minDecimals` kept). */
function decimalOf(units: bigint, decimals: number, minDecimals = 0): string {
  const digits = units.toString().padStart(decimals + 1, '0');
  let fraction = digits.slice(-decimals).replace(/0+$/, '');
  if (fraction.length < minDecimals) fraction = fraction.padEnd(minDecimals, '0');
  const whole = digits.slice(0, -decimals);
  return fraction ? `${whole}.${fraction}` : whole;
}

/**
 * What a request costs in USD, exactly as the ledger computes it (Postgres numeric:
 * (prompt × input price + completion × output price) ÷ 10^6), as a decimal string without
 * trailing zeros; "0" on the free tier, which is never billed. Summed per model and rounded half up
 * to the cent, it is the invoice line (docs/billing.md).
 */
export function requestCostUsd(e: Priced): string {
  return decimalOf(picoUsd(e), COST_DECIMALS);
}

/**
 * The same cost in whole nano-dollars, rounded up: the unit of the spending limit's counters in
 * Redis, whose Lua numbers are exact only up to 2^53 (9 million USD in nano-dollars, where the
 * ledger's 10^-12 would stop at 9,000 USD). A cost is exact in it whenever the price per million
 * has at most three decimals (every catalog price so far); otherwise it is at most one
 * nano-dollar above the ledger, so the limit errs toward refusing, never toward overspending.
 */
export function requestCostNanoUsd(e: Priced): bigint {
  const pico = picoUsd(e);
  return (pico + PICO_PER_NANO - 1n) / PICO_PER_NANO;
}

/** A non-negative decimal USD amount ("25.00", "0.0123") in nano-dollars, rounded up past the ninth decimal. */
export function nanoUsdOf(usd: string): bigint {
  if (!/^\d+(\.\d+)?$/.test(usd)) throw new RangeError(`not a non-negative decimal amount: ${usd}`);
  const [whole, fraction = ''] = usd.split('.');
  const kept = BigInt(`${whole}${fraction.slice(0, NANO_DECIMALS).padEnd(NANO_DECIMALS, '0')}`);
  return /[1-9]/.test(fraction.slice(NANO_DECIMALS)) ? kept + 1n : kept;
}

/** Nano-dollars as a USD decimal string with at least two decimals: 25_000_000_000n -> "25.00". */
export function usdOfNano(nano: bigint): string {
  if (nano < 0n) return `-${usdOfNano(-nano)}`;
  return decimalOf(nano, NANO_DECIMALS, 2);
}
