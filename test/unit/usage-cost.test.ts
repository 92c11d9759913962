import { expect } from 'chai';
import fc from 'fast-check';
import { priceMicros } from '../../src/catalog/catalog.js';
import { sumDecimals } from '../../src/billing/money.js';
import {
  cacheSavingsUsd,
  nanoUsdOf,
  requestCostNanoUsd,
  requestCostUsd,
  usageParts,
  usdOfNano,
} from '../../src/usage/usage-cost.js';

const paid = { tier: 'paid' as const, input_price_per_million: '2.5', output_price_per_million: '10' };

describe('the cost of one request (usage.cost)', () => {
  it('is tokens times the price per million, exactly', () => {
    expect(requestCostUsd({ ...paid, prompt_tokens: 1_000_000, completion_tokens: 0 })).to.equal('2.5');
    expect(requestCostUsd({ ...paid, prompt_tokens: 3, completion_tokens: 7 })).to.equal('0.0000775');
  });

  it('keeps prices with six decimals exact, far below a cent', () => {
    expect(
      requestCostUsd({
        tier: 'paid',
        prompt_tokens: 1,
        completion_tokens: 1,
        input_price_per_million: '0.000001',
        output_price_per_million: '123.456789',
      }),
    ).to.equal('0.00012345679');
  });

  it('is 0 on the free tier, which is never billed', () => {
    expect(requestCostUsd({ ...paid, tier: 'free', prompt_tokens: 500, completion_tokens: 500 })).to.equal('0');
  });

  it('is 0 for a request that used no tokens', () => {
    expect(requestCostUsd({ ...paid, prompt_tokens: 0, completion_tokens: 0 })).to.equal('0');
  });
});

describe('the cost of one request in nano-dollars (the spending limit’s unit)', () => {
  it('is the ledger’s cost exactly when the prices have at most three decimals', () => {
    expect(requestCostNanoUsd({ ...paid, prompt_tokens: 3, completion_tokens: 7 })).to.equal(77_500n);
    expect(requestCostNanoUsd({ ...paid, prompt_tokens: 1_000_000, completion_tokens: 0 })).to.equal(2_500_000_000n);
  });

  it('rounds a finer cost up to the next nano-dollar, so the limit errs toward refusing', () => {
    // 0.00012345679 USD: 123456.79 nano-dollars.
    expect(
      requestCostNanoUsd({
        tier: 'paid',
        prompt_tokens: 1,
        completion_tokens: 1,
        input_price_per_million: '0.000001',
        output_price_per_million: '123.456789',
      }),
    ).to.equal(123_457n);
  });

  it('is 0 on the free tier', () => {
    expect(requestCostNanoUsd({ ...paid, tier: 'free', prompt_tokens: 500, completion_tokens: 500 })).to.equal(0n);
  });

  it('converts decimal USD amounts both ways, with two decimals at least for display', () => {
    expect(nanoUsdOf('25.00')).to.equal(25_000_000_000n);
    expect(nanoUsdOf('0.000000001')).to.equal(1n);
    expect(nanoUsdOf('0.0000000001')).to.equal(1n);
    expect(nanoUsdOf('3')).to.equal(3_000_000_000n);
    expect(() => nanoUsdOf('-1')).to.throw(RangeError);
    expect(usdOfNano(25_000_000_000n)).to.equal('25.00');
    expect(usdOfNano(0n)).to.equal('0.00');
    expect(usdOfNano(123_456_789n)).to.equal('0.123456789');
    expect(usdOfNano(2_500_000n)).to.equal('0.0025');
  });
});

// claude-haiku-4-5's prices: input 1.00, cache reads 0.10, writes 1.25 (5 minutes) and 2.00 (1 hour), output 5.00.
const haiku = {
  tier: 'paid' as const,
  input_price_per_million: '1.00',
  cached_input_price_per_million: '0.10',
  cache_write_price_per_million: '1.25',
  cache_write_1h_price_per_million: '2.00',
  output_price_per_million: '5.00',
};

describe('the cost of a request that used a prompt cache', () => {
  it('prices cache reads at the cached-input price and the rest of the prompt at the input price', () => {
    // 1,000 uncached × 1.00 + 9,000 cached × 0.10 + 100 completion × 5.00, per million.
    expect(requestCostUsd({ ...haiku, prompt_tokens: 10_000, cached_tokens: 9_000, completion_tokens: 100 })).to.equal(
      '0.0024',
    );
  });

  it('prices cache writes at the write price of their TTL', () => {
    // 1,000 plain × 1.00 + 3,000 written for 5 minutes × 1.25 + 2,000 for an hour × 2.00.
    expect(
      requestCostUsd({
        ...haiku,
        prompt_tokens: 6_000,
        cache_write_tokens: 5_000,
        cache_write_1h_tokens: 2_000,
        completion_tokens: 0,
      }),
    ).to.equal('0.00875');
  });

  it('bills cached tokens at the input price for a model whose catalog entry gives no cached price', () => {
    expect(requestCostUsd({ ...paid, prompt_tokens: 1_000, cached_tokens: 1_000, completion_tokens: 0 })).to.equal(
      requestCostUsd({ ...paid, prompt_tokens: 1_000, completion_tokens: 0 }),
    );
  });

  it('never counts a provider’s cached or written tokens beyond the prompt they are part of', () => {
    expect(
      usageParts({
        prompt_tokens: 100,
        completion_tokens: 10,
        cached_tokens: 80,
        cache_write_tokens: 50,
        cache_write_1h_tokens: 70,
        reasoning_tokens: 40,
      }),
    ).to.deep.equal({ cached_tokens: 80, cache_write_tokens: 20, cache_write_1h_tokens: 20, reasoning_tokens: 10 });
    expect(usageParts({ prompt_tokens: 5, completion_tokens: 5, cached_tokens: -3 })).to.deep.equal({});
  });

  it('says what the cache saved: the cost at the input price less the cost, negative when writes cost more', () => {
    expect(cacheSavingsUsd({ ...haiku, prompt_tokens: 10_000, cached_tokens: 9_000, completion_tokens: 100 })).to.equal(
      '0.0081',
    );
    expect(
      cacheSavingsUsd({ ...haiku, prompt_tokens: 4_000, cache_write_tokens: 4_000, completion_tokens: 0 }),
    ).to.equal('-0.001');
  });
});

describe('usage figures, over any counts and prices (property-based)', () => {
  const price = fc
    .tuple(fc.integer({ min: 0, max: 999 }), fc.integer({ min: 0, max: 999_999 }))
    .map(([whole, micros]) => `${whole}.${String(micros).padStart(6, '0')}`);
  /** A model's prices that follow the catalog's rule: cached ≤ input ≤ 5-minute write ≤ 1-hour write. */
  const prices = fc.tuple(price, price, price, price, price).map(([a, b, c, d, output]) => {
    const [cached, input, write, write1h] = [a, b, c, d].sort((x, y) =>
      priceMicros(x) < priceMicros(y) ? -1 : priceMicros(x) > priceMicros(y) ? 1 : 0,
    );
    return {
      cached_input_price_per_million: cached!,
      input_price_per_million: input!,
      cache_write_price_per_million: write!,
      cache_write_1h_price_per_million: write1h!,
      output_price_per_million: output,
    };
  });
  const counts = fc.record({
    prompt_tokens: fc.integer({ min: 0, max: 2_000_000 }),
    completion_tokens: fc.integer({ min: 0, max: 200_000 }),
    cached_tokens: fc.integer({ min: 0, max: 2_000_000 }),
    cache_write_tokens: fc.integer({ min: 0, max: 2_000_000 }),
    cache_write_1h_tokens: fc.integer({ min: 0, max: 2_000_000 }),
  });
  const nano = (usd: string) => nanoUsdOf(usd);

  it('never gives a negative cost', () => {
    fc.assert(
      fc.property(prices, counts, (p, c) => {
        expect(requestCostUsd({ tier: 'paid', ...p, ...c })).to.match(/^\d+(\.\d+)?$/);
      }),
    );
  });

  it('never costs more than the uncached price when nothing was written to the cache', () => {
    fc.assert(
      fc.property(prices, counts, (p, c) => {
        const read = { ...c, cache_write_tokens: 0, cache_write_1h_tokens: 0 };
        const uncached = { prompt_tokens: c.prompt_tokens, completion_tokens: c.completion_tokens };
        const cost = nano(requestCostUsd({ tier: 'paid', ...p, ...read }));
        expect(cost <= nano(requestCostUsd({ tier: 'paid', ...p, ...uncached }))).to.equal(true);
      }),
    );
  });

  it('never costs more than admission reserved: the whole prompt written at the 1-hour price', () => {
    fc.assert(
      fc.property(prices, counts, (p, c) => {
        const most = requestCostNanoUsd({
          tier: 'paid',
          ...p,
          prompt_tokens: c.prompt_tokens,
          completion_tokens: c.completion_tokens,
          cache_write_tokens: c.prompt_tokens,
          cache_write_1h_tokens: c.prompt_tokens,
        });
        expect(requestCostNanoUsd({ tier: 'paid', ...p, ...c }) <= most).to.equal(true);
      }),
    );
  });

  it('makes the savings and the cost add up to the uncached price, exactly', () => {
    fc.assert(
      fc.property(prices, counts, (p, c) => {
        const e = { tier: 'paid' as const, ...p, ...c };
        const uncached = requestCostUsd({ ...e, cached_tokens: 0, cache_write_tokens: 0, cache_write_1h_tokens: 0 });
        expect(sumDecimals([requestCostUsd(e), cacheSavingsUsd(e)])).to.equal(uncached);
      }),
    );
  });
});
