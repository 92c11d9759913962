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
  | 'tier'
  | 'prompt_tokens'
  | 'completion_tokens'
  | 'cached_tokens'
  | 'cache_write_tokens'
  | 'cache_write_1h_tokens'
  | 'input_price_per_million'
  | 'output_price_per_million'
  | 'cached_input_price_per_million'
  | 'cache_write_price_per_million'
  | 'cache_write_1h_price_per_million'
>;

/**
 * The prompt's parts, each priced at its own rate: tokens read from the cache, written to it (with
 * the 5-minute and the 1-hour TTL) and the rest, which pay the input price. A provider's parts are
 * clamped to the whole (usageParts), so the parts never add up to more than the prompt.
 */
function promptParts(
  e: Pick<Priced, 'prompt_tokens' | 'cached_tokens' | 'cache_write_tokens' | 'cache_write_1h_tokens'>,
): { plain: number; cached: number; write5m: number; write1h: number } {
  const cached = clampCount(e.cached_tokens, e.prompt_tokens);
  const writes = clampCount(e.cache_write_tokens, e.prompt_tokens - cached);
  const write1h = clampCount(e.cache_write_1h_tokens, writes);
  return { plain: e.prompt_tokens - cached - writes, cached, write5m: writes - write1h, write1h };
}

/** A reported part as a count between 0 and `whole`. */
const clampCount = (n: number | undefined, whole: number): number =>
  n === undefined || !Number.isFinite(n) || n <= 0 ? 0 : Math.min(Math.floor(n), Math.max(0, whole));

/** The exact cost in 10^-12 USD, the ledger's own precision; 0 on the free tier. */
function picoUsd(e: Priced): bigint {
  return e.tier === 'free' ? 0n : pricedPicoUsd(e);
}

/** The tokens at the request's prices in 10^-12 USD, whatever its tier. */
function pricedPicoUsd(e: Omit<Priced, 'tier'>): bigint {
  const input = e.input_price_per_million;
  const write = e.cache_write_price_per_million ?? input;
  const p = promptParts(e);
  return (
    BigInt(p.plain) * scaled(input) +
    BigInt(p.cached) * scaled(e.cached_input_price_per_million ?? input) +
    BigInt(p.write5m) * scaled(write) +
    BigInt(p.write1h) * scaled(e.cache_write_1h_price_per_million ?? write) +
    BigInt(e.completion_tokens) * scaled(e.output_price_per_million)
  );
}

/**
 * A provider's figures made consistent with each other: every part at least 0 and within its whole
 * (cached and written tokens within the prompt, 1-hour writes within the writes, reasoning within
 * the completion), absent where 0. What the ledger stores and the answer reports.
 */
export function usageParts(u: {
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens?: number;
  cache_write_tokens?: number;
  cache_write_1h_tokens?: number;
  reasoning_tokens?: number;
}): Pick<UsageEvent, 'cached_tokens' | 'cache_write_tokens' | 'cache_write_1h_tokens' | 'reasoning_tokens'> {
  const p = promptParts(u);
  const reasoning = clampCount(u.reasoning_tokens, u.completion_tokens);
  const writes = p.write5m + p.write1h;
  return {
    ...(p.cached ? { cached_tokens: p.cached } : {}),
    ...(writes ? { cache_write_tokens: writes } : {}),
    ...(p.write1h ? { cache_write_1h_tokens: p.write1h } : {}),
    ...(reasoning ? { reasoning_tokens: reasoning } : {}),
  };
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
 * What a request costs in USD, exactly, as the ledger stores it: each part of the prompt at its own
 * price (uncached at the input price, cache reads at the cached-input price, cache writes at the
 * write price of their TTL) plus completion × output price, ÷ 10^6; a decimal string without
 * trailing zeros, "0" on the free tier, which is never billed. Summed per model and rounded half
 * up to the cent, it is the invoice line (docs/billing.md).
 */
export function requestCostUsd(e: Priced): string {
  return decimalOf(picoUsd(e), COST_DECIMALS);
}

/**
 * The ledger row's cost_usd: the request's tokens at its prices, priced as requestCostUsd prices
 * them but whatever the tier (a free row's figure is what it would have cost; it is never billed).
 */
export function ledgerCostUsd(e: Omit<Priced, 'tier'>): string {
  return decimalOf(pricedPicoUsd(e), COST_DECIMALS);
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

/**
 * What the request would have cost with every prompt token at the input price, less what it did
 * cost, in USD: what the prompt cache saved (negative when cache writes cost more than reads saved).
 */
export function cacheSavingsUsd(e: Priced): string {
  const uncached = picoUsd({
    ...e,
    cached_tokens: 0,
    cache_write_tokens: 0,
    cache_write_1h_tokens: 0,
  });
  const saved = uncached - picoUsd(e);
  return saved < 0n ? `-${decimalOf(-saved, COST_DECIMALS)}` : decimalOf(saved, COST_DECIMALS);
}
