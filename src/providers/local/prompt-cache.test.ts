import { expect } from 'chai';
import { ManualClock } from '../../clock.js';
import { countPromptTokens, REPLY_PRIMING_TOKENS } from '../tokenizer.js';
import type { ChatMessage, CompletionParams } from '../types.js';
import { PROMPT_CACHE_TTL_MS, PromptCache } from './prompt-cache.js';
import { CACHE_MIN_TOKENS, CACHE_STEP_TOKENS, prefixTokens, promptPrefixes } from './prompt-prefixes.js';

// About 10 tokens a sentence; `tag` makes the text differ from its first token.
const text = (sentences: number, tag = 'Rules') =>
  `${tag}: ${Array.from({ length: sentences }, (_, i) => `Rule ${i} is to answer briefly and politely.`).join(' ')}`;
const system = (sentences = 160, tag?: string): ChatMessage => ({ role: 'system', content: text(sentences, tag) });
const user = (content: string): ChatMessage => ({ role: 'user', content });
const prefixes = (messages: ChatMessage[], extras: Pick<CompletionParams, 'tools' | 'response_format'> = {}) =>
  promptPrefixes(messages, extras);

describe('local model prompt prefixes', () => {
  it('counts the prompt as countPromptTokens does: framing, images, tool calls and results, tools and json_schema', () => {
    const messages: ChatMessage[] = [
      system(),
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is in this picture? ' + 'x'.repeat(3000) },
          { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
        ],
      },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'look', arguments: '{"at":"it"}' } }],
      },
      { role: 'tool', content: 'a cat', tool_call_id: 'call_1' },
    ];
    const extras: Pick<CompletionParams, 'tools' | 'response_format'> = {
      tools: [{ type: 'function', function: { name: 'look', parameters: { type: 'object' } } }],
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: { type: 'string' } } },
    };
    expect(prefixes(messages, extras).tokens).to.equal(countPromptTokens(messages, extras));
  });

  it('digests no prefix of a prompt under 1,024 tokens, and one every 128 tokens from 1,024 on', () => {
    for (const sentences of [40, 95, 100, 110, 160, 400]) {
      const p = prefixes([system(sentences)]);
      const expected =
        p.tokens < CACHE_MIN_TOKENS ? 0 : Math.floor((p.tokens - CACHE_MIN_TOKENS) / CACHE_STEP_TOKENS) + 1;
      expect(p.digests, `${p.tokens} tokens`).to.have.length(expected);
    }
  });

  it("gives a conversation's next turn the digests of the turn before, for every prefix they share", () => {
    const turn = [system(), user('How do I boil an egg?')];
    const next = [...turn, { role: 'assistant', content: text(20, 'Boiling') }, user('And a soft one?')];
    const a = prefixes(turn);
    const b = prefixes(next);
    // Up to its reply's priming, which the next turn replaces with the reply.
    const shared = a.digests.filter((_, i) => prefixTokens(i) <= a.tokens - REPLY_PRIMING_TOKENS);
    expect(shared).to.not.be.empty;
    expect(b.digests.slice(0, shared.length)).to.deep.equal(shared);
    expect(b.digests.length).to.be.greaterThan(a.digests.length);
  });

  it('gives every prefix a different digest once an early message changes', () => {
    const a = prefixes([system(160, 'Rules'), user('Hello')]);
    const b = prefixes([system(160, 'Laws'), user('Hello')]);
    expect(b.digests).to.have.length(a.digests.length);
    for (const d of b.digests) expect(a.digests).to.not.include(d);
  });

  it('reads the tools before the messages: other tools change every prefix', () => {
    const messages = [system(), user('Hello')];
    const a = prefixes(messages, { tools: [{ type: 'function', function: { name: 'one' } }] });
    const b = prefixes(messages, { tools: [{ type: 'function', function: { name: 'two' } }] });
    for (const d of b.digests) expect(a.digests).to.not.include(d);
  });

  it('tells an image apart by its URL', () => {
    const withImage = (url: string): ChatMessage[] => [
      user('Describe these.'),
      { role: 'user', content: [{ type: 'image_url', image_url: { url } }] },
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,BBBB' } }] },
    ];
    const a = prefixes(withImage('data:image/png;base64,AAAA'));
    const b = prefixes(withImage('data:image/png;base64,AAAB'));
    expect(a.tokens).to.equal(b.tokens).and.be.greaterThan(CACHE_MIN_TOKENS);
    for (const d of b.digests) expect(a.digests).to.not.include(d);
  });
});

describe('local model prompt cache', () => {
  const at = () => new ManualClock('2026-11-01T00:00:00Z');

  it('reads nothing the first time a prompt is sent, and its longest prefix the second time', () => {
    const cache = new PromptCache(at());
    const p = prefixes([system(), user('Hello')]);
    expect(cache.use('acct', p.digests)).to.equal(0);
    const cached = cache.use('acct', p.digests);
    expect(cached).to.equal(CACHE_MIN_TOKENS + (p.digests.length - 1) * CACHE_STEP_TOKENS);
    expect(cached)
      .to.be.at.most(p.tokens)
      .and.be.above(p.tokens - CACHE_STEP_TOKENS);
  });

  it('reads the longest prefix two prompts share, in steps of 128 tokens from 1,024', () => {
    const cache = new PromptCache(at());
    cache.use('acct', ['a', 'b', 'c']);
    expect(cache.use('acct', ['a', 'x'])).to.equal(1024);
    expect(cache.use('acct', ['a', 'b', 'y', 'z'])).to.equal(1152);
    expect(cache.use('acct', ['a', 'b', 'c', 'd'])).to.equal(1280);
  });

  it('reads nothing for a prompt whose early message changed', () => {
    const cache = new PromptCache(at());
    cache.use('acct', prefixes([system(160, 'Rules'), user('Hello')]).digests);
    expect(cache.use('acct', prefixes([system(160, 'Laws'), user('Hello')]).digests)).to.equal(0);
  });

  it("keeps each scope's prefixes from the others", () => {
    const cache = new PromptCache(at());
    const p = prefixes([system(), user('Hello')]);
    cache.use('acct-a', p.digests);
    expect(cache.use('acct-b', p.digests)).to.equal(0);
    expect(cache.use('acct-a', p.digests)).to.be.at.least(CACHE_MIN_TOKENS);
  });

  it('forgets a prefix five minutes after its last use, each use keeping it five minutes more', () => {
    const clock = at();
    const cache = new PromptCache(clock);
    cache.use('acct', ['a']);
    clock.advance(PROMPT_CACHE_TTL_MS - 1);
    expect(cache.use('acct', ['a'])).to.equal(1024);
    clock.advance(PROMPT_CACHE_TTL_MS - 1);
    expect(cache.use('acct', ['a'])).to.equal(1024);
    clock.advance(PROMPT_CACHE_TTL_MS);
    expect(cache.use('acct', ['a'])).to.equal(0);
  });

  it('drops expired prefixes, so an idle cache holds nothing after five minutes', () => {
    const clock = at();
    const cache = new PromptCache(clock);
    cache.use('acct-a', ['a', 'b']);
    cache.use('acct-b', ['c']);
    clock.advance(PROMPT_CACHE_TTL_MS);
    cache.use('acct-c', []);
    expect(cache.size).to.equal(0);
  });

  it('gives up the least recently used prefixes beyond its bound', () => {
    const cache = new PromptCache(at(), 4);
    cache.use('acct', ['a', 'b']);
    cache.use('acct', ['c', 'd']);
    cache.use('acct', ['a', 'b']);
    cache.use('acct', ['e', 'f']);
    expect(cache.size).to.equal(4);
    expect(cache.use('acct', ['a', 'b'])).to.equal(1152);
    expect(cache.use('acct', ['c'])).to.equal(0);
  });
});
