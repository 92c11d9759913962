import { expect } from 'chai';
import { randomIdPart } from '../../src/ids.js';

describe('random id parts', () => {
  it('are base64url of the asked length and never repeat across pool refills', () => {
    const seen = new Set<string>();
    // 12 bytes each: well past several 4 KiB refills of the pool.
    for (let i = 0; i < 5000; i++) {
      const part = randomIdPart(12);
      expect(part).to.match(/^[A-Za-z0-9_-]{16}$/);
      seen.add(part);
    }
    expect(seen.size).to.equal(5000);
  });

  it('serves a part larger than the pool', () => {
    expect(randomIdPart(5000)).to.have.length(Math.ceil((5000 * 4) / 3));
  });
});
