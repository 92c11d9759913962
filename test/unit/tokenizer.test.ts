import { expect } from 'chai';
import { countTokens as libraryCount } from 'gpt-tokenizer/encoding/o200k_base';
import { countPromptTokens, countTokens, tokenPieces } from '../../src/providers/tokenizer.js';

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
});
