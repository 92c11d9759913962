import { expect } from 'chai';
import { spendCheckOf } from '../../src/chat/request/chat.service.js';
import type { PreparedJob } from '../../src/chat/relay/completion-job.js';
import type { CompletionParams } from '../../src/providers/types.js';

// What admission holds against a spending limit: the most a request can cost. Cache reads only
// cost less; a prompt marked for caching may be written whole, at its longest TTL's write price.

/** A claude-haiku-4-5 request of 10,000 prompt tokens and a 100-token completion budget. */
const job = (params: Pick<CompletionParams, 'messages' | 'tools'>): PreparedJob =>
  ({
    tier: 'paid',
    created: 1_764_000_000,
    promptTokens: 10_000,
    reservedTokens: 10_100,
    params: { model: 'claude-haiku-4-5', ...params },
    model: {
      id: 'claude-haiku-4-5',
      provider: 'anthropic',
      upstream_model: 'claude-haiku-4-5',
      input_price_per_million: '1.00',
      output_price_per_million: '5.00',
      cached_input_price_per_million: '0.10',
      cache_write_price_per_million: '1.25',
      cache_write_1h_price_per_million: '2.00',
    },
  }) as PreparedJob;

const account = { tier: 'paid' as const, monthly_spend_limit_usd: '10.00' };
const reserved = (params: Pick<CompletionParams, 'messages' | 'tools'>) =>
  spendCheckOf(account, job(params))!.reserveNanoUsd;

describe('the spending limit’s reservation of a request that may use a prompt cache', () => {
  it('reserves the prompt at the input price when nothing is marked for caching', () => {
    // 10,000 × 1.00 + 100 × 5.00 per million.
    expect(reserved({ messages: [{ role: 'user', content: 'hi' }] })).to.equal(10_500_000n);
  });

  it('reserves the prompt at the 5-minute write price when a part is marked', () => {
    const messages = [
      { role: 'user', content: [{ type: 'text' as const, text: 'hi', cache_control: { type: 'ephemeral' as const } }] },
    ];
    expect(reserved({ messages })).to.equal(13_000_000n);
  });

  it('reserves the prompt at the 1-hour write price when any mark, a tool’s included, asks for an hour', () => {
    const tools = [
      {
        type: 'function' as const,
        function: { name: 'look' },
        cache_control: { type: 'ephemeral' as const, ttl: '1h' as const },
      },
    ];
    const messages = [{ role: 'system', content: 'be brief', cache_control: { type: 'ephemeral' as const } }];
    expect(reserved({ messages, tools })).to.equal(20_500_000n);
  });
});
