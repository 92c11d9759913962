import { expect } from 'chai';
import { countTokens as libraryCount, encode } from 'gpt-tokenizer/encoding/o200k_base';
import {
  countPromptTokens,
  countTokens,
  encodeTokens,
  promptPieces,
  tokenPieces,
} from '../../src/providers/tokenizer.js';

describe('tokenizer', () => {
  it('counts tokens with the o200k_base encoding', () => {
    expect(countTokens('Hello, world!')).to.equal(4);
    expect(countTokens('')).to.equal(0);
  });

  it('treats special-token text in a prompt as plain characters instead of throwing', () => {
    expect(countTokens('a <|endoftext|> b')).to.be.greaterThan(3);
  });

  it('adds OpenAI chat framing: 3 tokens per message and 3 for the reply', () => {
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hello, world!' },
    ];
    const expected =
      3 +
      (3 + countTokens('system') + countTokens('Be brief.')) +
      (3 + countTokens('user') + countTokens('Hello, world!'));
    expect(countPromptTokens(messages)).to.equal(expected);
  });

  it('counts a 50,000-character run of one character quickly and close to exactly', () => {
    const start = performance.now();
    const n = countTokens('x'.repeat(50_000));
    expect(performance.now() - start).to.be.lessThan(500);
    expect(n).to.be.within(6_000, 6_500);
  });

  it('counts a long run of whitespace quickly', () => {
    const start = performance.now();
    expect(countTokens(' \n'.repeat(25_000))).to.be.greaterThan(0);
    expect(performance.now() - start).to.be.lessThan(500);
  });

  it('counts ordinary prose exactly even when it is long', () => {
    const prose = `${'The quick brown fox jumps over the lazy dog. '.repeat(1000)}${'Ünïcödé text, 中文, and numbers 1234567. '.repeat(100)}`;
    expect(countTokens(prose)).to.equal(libraryCount(prose));
  });

  it('splits text into token strings that join back to the text', () => {
    const text = 'Sure. Here is a short answer: naïve café 中文.';
    const pieces = tokenPieces(text);
    expect(pieces.join('')).to.equal(text);
    expect(pieces.length).to.equal(countTokens(text));
  });

  it('gives as many token ids as it counts tokens, long runs of one character included', () => {
    for (const text of ['', 'Hello, world!', 'x'.repeat(50_000), `a${' \n'.repeat(2_000)}b`, 'word '.repeat(20_000)])
      expect(encodeTokens(text).length, text.slice(0, 20)).to.equal(countTokens(text));
  });

  it("gives ordinary text the library's token ids", () => {
    const prose = 'The quick brown fox jumps over the lazy dog. '.repeat(100);
    expect(encodeTokens(prose)).to.deep.equal(encode(prose));
  });

  it('reads a prompt as a model does: tools and the json_schema first, then the messages, then the reply', () => {
    const pieces = [
      ...promptPieces([{ role: 'user', content: 'Hi' }], {
        tools: [{ type: 'function', function: { name: 'f' } }],
        response_format: { type: 'json_schema', json_schema: { name: 's', schema: {} } },
      }),
    ];
    const texts = pieces.filter((p) => typeof p === 'string');
    expect(texts).to.deep.equal(['{"name":"f"}', '{"name":"s","schema":{}}', 'user', 'Hi']);
    expect(pieces.at(-1)).to.deep.include({ tokens: 3 });
  });
});
