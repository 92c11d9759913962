import { createHash } from 'node:crypto';
import { expect } from 'chai';
import {
  API_KEY_PREFIX,
  displayPrefix,
  generateApiKey,
  hashApiKey,
  isWellFormedApiKey,
  sameHash,
} from '../../src/accounts/api-keys.js';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

describe('API key format', () => {
  it('is sk-svc- followed by 32 random bytes in base64url and a 6-character base62 checksum', () => {
    const { key } = generateApiKey();
    expect(key).to.match(/^sk-svc-[A-Za-z0-9_-]{43}[0-9A-Za-z]{6}$/);
    expect(key.startsWith(API_KEY_PREFIX)).to.equal(true);
    expect(Buffer.from(key.slice(7, 50), 'base64url')).to.have.length(32);
  });

  it('never repeats', () => {
    const keys = new Set(Array.from({ length: 1000 }, () => generateApiKey().key));
    expect(keys.size).to.equal(1000);
  });

  it('stores the SHA-256 of the whole key and a short display prefix, never the key', () => {
    const issued = generateApiKey();
    expect(issued.hash).to.equal(createHash('sha256').update(issued.key).digest('hex'));
    expect(issued.hash).to.equal(hashApiKey(issued.key));
    expect(issued.displayPrefix).to.equal(issued.key.slice(0, 13));
    expect(displayPrefix(issued.key)).to.equal(issued.displayPrefix);
  });

  it('recognises a generated key as well-formed', () => {
    for (let i = 0; i < 200; i++) expect(isWellFormedApiKey(generateApiKey().key)).to.equal(true);
  });

  it('catches every single-character typo in the secret with the checksum', () => {
    const { key } = generateApiKey();
    for (let i = 7; i < key.length; i++) {
      const other = ALPHABET.split('').find((c) => c !== key[i])!;
      expect(isWellFormedApiKey(`${key.slice(0, i)}${other}${key.slice(i + 1)}`), `position ${i}`).to.equal(false);
    }
  });

  it('rejects truncated, extended, mis-prefixed and empty keys', () => {
    const { key } = generateApiKey();
    for (const bad of [
      key.slice(0, -1),
      key.slice(0, 20),
      `${key}A`,
      key.replace('sk-svc-', 'sk-abc-'),
      key.replace('sk-svc-', ''),
      '',
      'sk-svc-',
    ]) {
      expect(isWellFormedApiKey(bad), bad).to.equal(false);
    }
  });

  it('compares hashes in constant time and only equal digests match', () => {
    const a = hashApiKey(generateApiKey().key);
    const b = hashApiKey(generateApiKey().key);
    expect(sameHash(a, a)).to.equal(true);
    expect(sameHash(a, b)).to.equal(false);
    expect(sameHash(a, a.slice(0, 10))).to.equal(false);
  });
});
