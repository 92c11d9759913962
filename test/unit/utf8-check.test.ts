import { expect } from 'chai';
import { badlyEncodedQueryParam } from '../../src/http/middleware/utf8-check.js';

describe('UTF-8 check of a query string', () => {
  it('names the first query parameter that is not valid UTF-8 once percent-decoded', () => {
    expect(badlyEncodedQueryParam('token=abc&x=%C3%A9%F0%9F%98%80')).to.equal(undefined);
    expect(badlyEncodedQueryParam('token=a%FFb')).to.equal('token');
    expect(badlyEncodedQueryParam('a=1&session_id=%ED%A0%80')).to.equal('session_id');
    expect(badlyEncodedQueryParam('a=%E2%82')).to.equal('a');
  });
});
