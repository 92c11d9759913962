import { expect } from 'chai';
import { requestCostUsd } from '../../src/usage/usage-cost.js';

const paid = { tier: 'paid' as const, input_price_per_million: '2.5', output_price_per_million: '10' };

describe('the cost of one request (usage.cost)', () => {
  it('is tokens times the price per million, exactly', () => {
    expect(requestCostUsd({ ...paid, prompt_tokens: 1_000_000, completion_tokens: 0 })).to.equal('2.5');
    expect(requestCostUsd({ ...paid, prompt_tokens: 3, completion_tokens: 7 })).to.equal('0.0000775');
  });

  it('keeps prices with six decimals exact, far below a cent', () => {
    expect(requestCostUsd({ tier: 'paid', prompt_tokens: 1, completion_tokens: 1, input_price_per_million: '0.000001', output_price_per_million: '123.456789' })).to.equal('0.00012345679');
  });

  it('is 0 on the free tier, which is never billed', () => {
    expect(requestCostUsd({ ...paid, tier: 'free', prompt_tokens: 500, completion_tokens: 500 })).to.equal('0');
  });

  it('is 0 for a request that used no tokens', () => {
    expect(requestCostUsd({ ...paid, prompt_tokens: 0, completion_tokens: 0 })).to.equal('0');
  });
});
