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
  // Number() of a value at or past 2^53 is no longer a safe integer, so the check catches it.
  const n = Number(v);
  if (!Number.isSafeInteger(n) || (typeof v === 'string' && !/^-?\d+$/.test(v)))
    throw new RangeError(`integer ${String(v)} does not fit a JSON number exactly`);
  return n;
}

/** Trims a numeric string's trailing zeros for display ("0.001200000" -> "0.0012", "3.000" -> "3"). */
export function normalizeDecimal(v: string): string {
  if (!v.includes('.')) return v;
  const trimmed = v.replace(/0+$/, '').replace(/\.$/, '');
  return trimmed === '' || trimmed === '-' ? '0' : trimmed;
}

/** The exact sum of decimal strings ("0.05", "1.2345", "-0.4"), as a decimal string without trailing zeros. */
export function sumDecimals(values: string[]): string {
  // Exact: scale every value to the longest fraction, add as bigint, scale back.
  const scale = Math.max(0, ...values.map((v) => (v.split('.')[1] ?? '').length));
  let total = 0n;
  for (const v of values) {
    const negative = v.startsWith('-');
    const [whole, frac = ''] = (negative ? v.slice(1) : v).split('.');
    const units = BigInt(whole!) * 10n ** BigInt(scale) + BigInt(frac.padEnd(scale, '0') || '0');
    total += negative ? -units : units;
  }
  const sign = total < 0n ? '-' : '';
  const abs = total < 0n ? -total : total;
  if (scale === 0) return `${sign}${abs}`;
  const s = abs.toString().padStart(scale + 1, '0');
  const out = normalizeDecimal(`${s.slice(0, -scale)}.${s.slice(-scale)}`);
  return out === '0' ? '0' : `${sign}${out}`;
}
