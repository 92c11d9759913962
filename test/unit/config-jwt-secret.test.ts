import { chmodSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { SignJWT } from 'jose';
import { ManualClock } from '../../src/clock.js';
import { ConfigError, loadConfig } from '../../src/config.js';
import { createJwtVerifier } from '../../src/accounts/jwt.js';

/** The string src/config.ts once carried as the development JWT secret. */
const OLD_BUILT_IN_SECRET = 'dev-only-jwt-secret-change-me-0123456789abcdef';

describe('the JWT secret outside production, with no JWT_SECRET', () => {
  let dir: string;
  const base = { DATABASE_URL: 'postgres://u@localhost:5432/db', REDIS_URL: 'redis://127.0.0.1:6379' };
  const fileIn = (d: string) => path.join(d, 'var', 'jwt-secret');

  beforeEach(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'jwt-secret-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('is a random secret made on first start, kept in a file only its owner can read', () => {
    const config = loadConfig({ ...base, JWT_SECRET_FILE: fileIn(dir) });
    const secret = config.auth.jwt.secret!;
    expect(secret).to.match(/^[A-Za-z0-9_-]{43}$/);
    expect(secret).not.to.equal(OLD_BUILT_IN_SECRET);
    expect(readFileSync(fileIn(dir), 'utf8').trim()).to.equal(secret);
    expect(statSync(fileIn(dir)).mode & 0o777).to.equal(0o600);
  });

  it('is the same for every process of the checkout, and another checkout gets another', () => {
    const first = loadConfig({ ...base, JWT_SECRET_FILE: fileIn(dir) }).auth.jwt.secret;
    const again = loadConfig({ ...base, JWT_SECRET_FILE: fileIn(dir) }).auth.jwt.secret;
    expect(again).to.equal(first);
    const other = mkdtempSync(path.join(os.tmpdir(), 'jwt-secret-'));
    try {
      expect(loadConfig({ ...base, JWT_SECRET_FILE: fileIn(other) }).auth.jwt.secret).not.to.equal(first);
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });

  it('refuses a secret file others may read, or one too short, naming the variable', () => {
    const file = path.join(dir, 'secret');
    writeFileSync(file, 'x'.repeat(40), { mode: 0o644 });
    chmodSync(file, 0o644);
    expect(() => loadConfig({ ...base, JWT_SECRET_FILE: file })).to.throw(
      ConfigError,
      /^JWT_SECRET_FILE must be readable by its owner only \(run: chmod 600 /,
    );
    chmodSync(file, 0o600);
    writeFileSync(file, 'short');
    expect(() => loadConfig({ ...base, JWT_SECRET_FILE: file })).to.throw(
      ConfigError,
      /^JWT_SECRET_FILE must be a file holding a secret of at least 32 characters/,
    );
  });

  it('is never made in production, nor alongside JWT_JWKS_URL', () => {
    expect(() => loadConfig({ ...base, NODE_ENV: 'production', JWT_SECRET_FILE: fileIn(dir) })).to.throw(
      ConfigError,
      /^JWT_SECRET must be set in production/,
    );
    const idp = loadConfig({
      ...base,
      JWT_JWKS_URL: 'https://idp.example/jwks.json',
      JWT_ISSUER: 'https://idp.example.test/',
      JWT_AUDIENCE: 'completions-api',
      JWT_SECRET_FILE: fileIn(dir),
    });
    expect(idp.auth.jwt.secret).to.equal(undefined);
    expect(() => statSync(fileIn(dir))).to.throw(/ENOENT/);
  });

  it('refuses JWT_JWKS_URL without JWT_ISSUER or JWT_AUDIENCE, naming the missing setting', () => {
    const idp = { ...base, JWT_JWKS_URL: 'https://idp.example/jwks.json', JWT_SECRET_FILE: fileIn(dir) };
    expect(() => loadConfig({ ...idp, JWT_AUDIENCE: 'completions-api' })).to.throw(
      ConfigError,
      /^JWT_ISSUER must be set with JWT_JWKS_URL .*\(it is not set\)$/,
    );
    expect(() => loadConfig({ ...idp, JWT_ISSUER: 'https://idp.example/' })).to.throw(
      ConfigError,
      /^JWT_AUDIENCE must be set with JWT_JWKS_URL .*\(it is not set\)$/,
    );
  });

  it('refuses a token signed with the string that was the built-in development secret', async () => {
    const clock = new ManualClock();
    const config = loadConfig({ ...base, JWT_SECRET_FILE: fileIn(dir) });
    const now = Math.floor(clock.now().getTime() / 1000);
    const forged = await new SignJWT({ email: 'victim@example.com' })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject('00000000-0000-4000-8000-000000000000')
      .setIssuedAt(now)
      .setExpirationTime(now + 600)
      .sign(new TextEncoder().encode(OLD_BUILT_IN_SECRET));
    const error = await createJwtVerifier(config, clock)
      .verify(forged)
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    expect(error).to.include({ status: 401, code: 'invalid_token', message: 'The token signature is not valid' });
  });
});
