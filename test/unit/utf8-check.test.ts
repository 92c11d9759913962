import { expect } from 'chai';
import { badlyEncodedQueryParam, Utf8Check } from '../../src/http/middleware/utf8-check.js';

const check = (...chunks: Buffer[]) => {
  const c = new Utf8Check();
  for (const chunk of chunks) c.feed(chunk);
  return c.ok;
};

describe('UTF-8 check of a body arriving in chunks', () => {
  const text = Buffer.from('aé€😀z', 'utf8');

  it('accepts valid text however it is split into chunks', () => {
    for (let i = 0; i <= text.length; i++) {
      for (let j = i; j <= text.length; j++) {
        expect(check(text.subarray(0, i), text.subarray(i, j), text.subarray(j)), `split at ${i} and ${j}`).to.equal(
          true,
        );
      }
    }
  });

  it('refuses an invalid byte, an overlong encoding and a surrogate encoded as UTF-8', () => {
    expect(check(Buffer.from([0x61, 0xff, 0x62]))).to.equal(false);
    expect(check(Buffer.from([0xc0, 0xaf]))).to.equal(false);
    expect(check(Buffer.from([0xed, 0xa0, 0x80]))).to.equal(false);
  });

  it('refuses a body that ends in the middle of a character', () => {
    expect(check(text.subarray(0, text.length - 2))).to.equal(false);
  });

  it('names the first query parameter that is not valid UTF-8 once percent-decoded', () => {
    expect(badlyEncodedQueryParam('token=abc&x=%C3%A9%F0%9F%98%80')).to.equal(undefined);
    expect(badlyEncodedQueryParam('token=a%FFb')).to.equal('token');
    expect(badlyEncodedQueryParam('a=1&session_id=%ED%A0%80')).to.equal('session_id');
    expect(badlyEncodedQueryParam('a=%E2%82')).to.equal('a');
  });
});
