import { sumDecimals, toSafeInteger } from './money.js';

type Count = string | number | bigint;

/** The prompt cache's and reasoning's share of some usage (parts of its prompt and completion tokens). */
export interface UsageParts {
  /** Prompt tokens read from a prompt cache (billed at the cached-input price). */
  cached_tokens: number;
  /** Prompt tokens written to a prompt cache (billed at a cache-write price). */
  cache_write_tokens: number;
  /** Completion tokens the model spent thinking. */
  reasoning_tokens: number;
  /**
   * What the prompt cache saved on paid-tier requests, exact: their cost with every prompt token at
   * the input price, less what they cost. Negative when cache writes cost more than reads saved.
   */
  cache_savings_usd: string;
}

/** The parts of some aggregate rows, summed exactly. */
export function partsOf(
  rows: readonly {
    cached_tokens: Count;
    cache_write_tokens: Count;
    reasoning_tokens: Count;
    cache_savings_usd: string;
  }[],
): UsageParts {
  const sum = (pick: (r: (typeof rows)[number]) => Count) =>
    toSafeInteger(rows.reduce((total, r) => total + BigInt(pick(r)), 0n));
  return {
    cached_tokens: sum((r) => r.cached_tokens),
    cache_write_tokens: sum((r) => r.cache_write_tokens),
    reasoning_tokens: sum((r) => r.reasoning_tokens),
    cache_savings_usd: sumDecimals(rows.map((r) => r.cache_savings_usd)),
  };
}
