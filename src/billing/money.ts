// Money in the billing feature is never a JS number with a fraction. Exact decimal sums come from
// Postgres numeric as strings; amounts billed are whole cents, carried as bigint (or as a decimal
// string of cents from Postgres). The one rounding rule lives in SQL (usage/usage.repository.ts:
// round(sum(cost_usd) * 100) per invoice line, half up for the non-negative sums we have) and is
// described in docs/billing.md.

/** Cents (bigint or a decimal-integer string) to a currency amount string: 1234 -> "12.34". */
export function centsToAmount(cents: bigint | string): string {
  const c = typeof cents === 'bigint' ? cents : BigInt(cents);
  const sign = c < 0n ? '-' : '';
  const abs = c < 0n ? -c : c;
  return `${sign}${abs / 100n}.${(abs % 100n).toString().padStart(2, '0')}`;
}

/**
 * A count or cents value for a JSON body. Stripe and OpenAI put integer amounts and token counts
 * in JSON numbers; these stay far below 2^53, and the check makes sure a value that did not would
 * fail loudly instead of being silently rounded.
 */
export function toSafeInteger(v: bigint | string | number): number {
  const b = typeof v === 'bigint' ? v : BigInt(v);
  if (b > BigInt(Number.MAX_SAFE_INTEGER) || b < BigInt(Number.MIN_SAFE_INTEGER))
    throw new RangeError(`integer ${b} does not fit a JSON number exactly`);
  return Number(b);
}

/** Trims a numeric string's trailing zeros for display ("0.001200000" -> "0.0012", "3.000" -> "3"). */
export function normalizeDecimal(v: string): string {
  if (!v.includes('.')) return v;
  const trimmed = v.replace(/0+$/, '').replace(/\.$/, '');
  return trimmed === '' || trimmed === '-' ? '0' : trimmed;
}
