import { expect } from 'chai';
import { nanoUsdOf, requestCostNanoUsd, requestCostUsd, usdOfNano } from '../../src/usage/usage-cost.js';

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
