import { expect } from 'chai';
import { nearestWindow, openAiDuration, rateLimitHeaders, type RequestWindow } from '../../src/limits/limit-headers.js';
import { FREE_TIER_LIMITS, limitsForTier } from '../../src/limits/tier-limits.js';
import { testConfig } from '../support/env.js';

const windows = (minuteUsed: number, hourUsed: number, dayUsed: number): RequestWindow[] => [
  { name: 'minute', limit: 20, used: minuteUsed, resetMs: 30_000 },
  { name: 'hour', limit: 100, used: hourUsed, resetMs: 1_800_000 },
  { name: 'day', limit: 500, used: dayUsed, resetMs: 43_200_000 },
];

describe('rate-limit headers', () => {
  it('reports the window with the fewest requests left', () => {
    expect(nearestWindow(windows(1, 1, 1)).name).to.equal('minute');
    expect(nearestWindow(windows(0, 95, 95)).name).to.equal('hour');
    expect(nearestWindow(windows(0, 0, 498)).name).to.equal('day');
  });

  it('prefers the later-resetting window when two have equally few left', () => {
    expect(nearestWindow(windows(20, 100, 100)).name).to.equal('hour');
    expect(nearestWindow(windows(20, 100, 500)).name).to.equal('day');
  });

  it('formats resets the way OpenAI does, rounding up to whole seconds', () => {
    expect(openAiDuration(1)).to.equal('1s');
    expect(openAiDuration(999)).to.equal('1s');
    expect(openAiDuration(59_001)).to.equal('1m0s');
    expect(openAiDuration(360_000)).to.equal('6m0s');
    expect(openAiDuration(7_384_000)).to.equal('2h3m4s');
  });

  it('sends the legacy, OpenAI-style and Retry-After headers from one set of counts', () => {
    const h = rateLimitHeaders(windows(20, 20, 20), { limit: 100_000, used: 30_000, resetMs: 43_200_000 }, 29_200);
    expect(h).to.deep.equal({
      'X-RateLimit-Limit': '20',
      'X-RateLimit-Remaining': '0',
      'X-RateLimit-Reset': '30',
      'x-ratelimit-limit-requests': '20',
      'x-ratelimit-remaining-requests': '0',
      'x-ratelimit-reset-requests': '30s',
      'x-ratelimit-limit-tokens': '100000',
      'x-ratelimit-remaining-tokens': '70000',
      'x-ratelimit-reset-tokens': '12h0m0s',
      'Retry-After': '30',
    });
  });

  it('never reports negative remaining counts', () => {
    const h = rateLimitHeaders(windows(25, 25, 25), { limit: 100, used: 150, resetMs: 1000 });
    expect(h['X-RateLimit-Remaining']).to.equal('0');
    expect(h['x-ratelimit-remaining-tokens']).to.equal('0');
    expect(h).not.to.have.property('Retry-After');
  });
});

describe('tier limits', () => {
  it('gives the free tier the limits the interface fixes', () => {
    expect(limitsForTier(testConfig(), 'free')).to.deep.equal({
      requestsPerMinute: 20,
      requestsPerHour: 100,
      requestsPerDay: 500,
      tokensPerDay: 100_000,
    });
    expect(FREE_TIER_LIMITS).to.be.frozen;
  });

  it('takes the paid tier limits from configuration', () => {
    const config = testConfig({ PAID_REQUESTS_PER_MINUTE: '1234', PAID_TOKENS_PER_DAY: '9000000' });
    expect(limitsForTier(config, 'paid')).to.deep.equal({
      requestsPerMinute: 1234,
      requestsPerHour: 20_000,
      requestsPerDay: 200_000,
      tokensPerDay: 9_000_000,
    });
  });
});
