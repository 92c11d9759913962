// Numbers as people read them: money from the API's exact decimal strings (never through a float),
// tokens with separators, dates and times in UTC, said so.

const group = (digits: string): string => digits.replace(/\B(?=(\d{3})+(?!\d))/g, ',');

/** "1234.5" -> "$1,234.50": the exact amount, at least two decimals, trailing zeros past them dropped. */
export function usd(amount: string | null | undefined): string {
  if (amount === null || amount === undefined || amount === '') return '—';
  const negative = amount.startsWith('-');
  const [whole = '0', frac = ''] = amount.replace(/^-/, '').split('.');
  const decimals = frac.replace(/0+$/, '').padEnd(2, '0');
  return `${negative ? '-' : ''}$${group(whole.replace(/^0+(?=\d)/, ''))}.${decimals}`;
}

/** Rounded half up to the cent, for figures shown at a glance (the exact amount is in the tables). */
export function usdCents(amount: string | null | undefined): string {
  if (amount === null || amount === undefined || amount === '') return '—';
  const [whole = '0', frac = ''] = amount.replace(/^-/, '').split('.');
  let cents = BigInt(whole) * 100n + BigInt((frac + '00').slice(0, 2));
  if (Number(frac[2] ?? '0') >= 5) cents += 1n;
  const s = cents.toString().padStart(3, '0');
  return `${amount.startsWith('-') ? '-' : ''}$${group(s.slice(0, -2))}.${s.slice(-2)}`;
}

/**
 * A money axis's labels (chart scales are floats, not ledger amounts): two decimals ("$0.80"),
 * more only where the ticks are closer than a cent apart ("$0.0025").
 */
export function usdTicks(ticks: number[]): string[] {
  const step = ticks.length > 1 ? Math.abs(ticks[1]! - ticks[0]!) : 1;
  let decimals = 2;
  while (decimals < 8 && Math.abs(Math.round(step * 10 ** decimals) - step * 10 ** decimals) > 1e-6) decimals++;
  return ticks.map((t) => `$${t.toFixed(decimals)}`);
}

/** A chart's money value on hover: as usdTicks, with the decimals the value itself needs. */
export const usdChartValue = (v: number): string => usdTicks([0, v])[1]!;

export const count = (n: number): string => group(String(n));

export const tokens = (n: number): string => `${count(n)} token${n === 1 ? '' : 's'}`;

/** 2026-11-26T15:04:05Z -> "26 Nov 2026, 15:04 UTC". */
export function utcDateTime(value: string | number | Date): string {
  const d = typeof value === 'number' ? new Date(value * 1000) : new Date(value);
  return `${d.toLocaleDateString('en-GB', { day: 'numeric', month: 'short', year: 'numeric', timeZone: 'UTC' })}, ${d
    .toISOString()
    .slice(11, 16)} UTC`;
}

export function utcDate(value: string): string {
  return new Date(`${value.slice(0, 10)}T00:00:00Z`).toLocaleDateString('en-GB', {
    day: 'numeric',
    month: 'short',
    year: 'numeric',
    timeZone: 'UTC',
  });
}

/** YYYY-MM-DD of a Date, in UTC. */
export const isoDay = (d: Date): string => d.toISOString().slice(0, 10);

export function addDays(day: string, n: number): string {
  const d = new Date(`${day}T00:00:00Z`);
  d.setUTCDate(d.getUTCDate() + n);
  return isoDay(d);
}

/** An API as the console names it, after OpenAI's own names for them. */
export const apiName = (api: 'chat.completions' | 'responses'): string =>
  api === 'responses' ? 'Responses' : 'Chat Completions';

/** 1_234_567 -> "1.2M", 820_000 -> "820K", 950 -> "950": a headline's token count (tables give the exact one). */
export function compactCount(n: number): string {
  for (const [size, unit] of [
    [1e9, 'B'],
    [1e6, 'M'],
    [1e3, 'K'],
  ] as const) {
    if (n >= size) {
      const v = n / size;
      // One decimal below 10 ("1.2M"), none above ("820K"); never "1000K".
      const shown = v < 9.95 ? v.toFixed(1).replace(/\.0$/, '') : String(Math.round(v));
      if (shown !== '1000') return `${shown}${unit}`;
    }
  }
  return count(n);
}

/** `part` as a share of `whole`: whole percents, and one decimal under 1% rather than a misleading "0%". */
export function percent(part: number, whole: number): string {
  const p = whole > 0 ? (100 * part) / whole : 0;
  return `${p > 0 && p < 1 ? p.toFixed(1) : Math.round(p)}%`;
}

/** Exact decimal amounts ("0.25", "-0.000125") added without a float. */
export function addDecimals(amounts: string[]): string {
  const parts = amounts.map((a) => {
    const [whole = '0', frac = ''] = a.replace(/^-/, '').split('.');
    return { negative: a.startsWith('-'), whole, frac };
  });
  const scale = Math.max(0, ...parts.map((p) => p.frac.length));
  const total = parts.reduce((sum, p) => {
    const v = BigInt(`${p.whole}${p.frac.padEnd(scale, '0')}`);
    return p.negative ? sum - v : sum + v;
  }, 0n);
  const digits = (total < 0n ? -total : total).toString().padStart(scale + 1, '0');
  const whole = digits.slice(0, digits.length - scale);
  const frac = digits.slice(digits.length - scale).replace(/0+$/, '');
  return `${total < 0n ? '-' : ''}${whole}${frac ? `.${frac}` : ''}`;
}

/** An exact decimal amount that is zero ("0", "0.000000"), read without a float. */
export const isZeroAmount = (amount: string): boolean => /^-?0*(\.0*)?$/.test(amount);

/** An exact decimal amount below zero ("-0.0001"; "-0" is not). */
export const isNegativeAmount = (amount: string): boolean => amount.startsWith('-') && !isZeroAmount(amount);
