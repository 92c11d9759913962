import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect } from 'chai';
import { decodeJwt } from 'jose';
import type { Env } from '../../src/config.js';
import { createContext, type AppContext } from '../../src/context.js';
import { authenticateJwt } from '../../src/accounts/auth.service.js';
import { createTestAccount } from '../support/accounts.js';
import { testConfig, testEnv, uniqueEmail } from '../support/env.js';

const SCRIPT = fileURLToPath(new URL('../../scripts/mint-jwt.js', import.meta.url));
const JWT_ENV = {
  JWT_SECRET: 'mint-jwt-test-secret-0123456789-abcdefgh',
  JWT_ISSUER: 'https://frontend.example.test',
  JWT_AUDIENCE: 'completions-api',
};

/** Runs the compiled script (what `npm run --silent mint-jwt -- EMAIL` runs) to completion. */
function mintJwtCli(args: string[], env: Env): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = spawn(process.execPath, [SCRIPT, ...args], { env: testEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d) => (stdout += d));
  proc.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => proc.once('close', (code) => resolve({ code, stdout, stderr })));
}

describe('npm run mint-jwt -- EMAIL', () => {
  let app: AppContext;
  before(() => {
    app = createContext(testConfig(JWT_ENV), { role: 'test' });
  });
  after(async () => app.close());

  it('prints only a token on stdout, which the service accepts for that account', async () => {
    const { account } = await createTestAccount(app);
    const r = await mintJwtCli([account.email.toUpperCase()], JWT_ENV);
    expect(r.code, r.stderr).to.equal(0);
    expect(r.stderr).to.equal('');
    expect(r.stdout).to.match(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\n$/);
    const token = r.stdout.trim();
    expect((await authenticateJwt(app, token)).id).to.equal(account.id);
    const claims = decodeJwt(token);
    expect(claims).to.include({
      sub: account.id,
      email: account.email,
      iss: JWT_ENV.JWT_ISSUER,
      aud: JWT_ENV.JWT_AUDIENCE,
    });
  });

  it('mints a token that lives 15 minutes by default, and JWT_MINT_TTL_SECONDS at most a day', async () => {
    const { account } = await createTestAccount(app);
    const r = await mintJwtCli([account.email], JWT_ENV);
    expect(r.code, r.stderr).to.equal(0);
    const claims = decodeJwt(r.stdout.trim());
    expect(claims.exp! - claims.iat!).to.equal(900);
    const month = await mintJwtCli([account.email], { ...JWT_ENV, JWT_MINT_TTL_SECONDS: String(30 * 86_400) });
    expect(month.code).to.equal(78);
    expect(month.stdout).to.equal('');
    expect(month.stderr).to.match(/JWT_MINT_TTL_SECONDS/);
  });

  it('is not accepted by a service configured with another secret', async () => {
    const { account } = await createTestAccount(app);
    const r = await mintJwtCli([account.email], { ...JWT_ENV, JWT_SECRET: 'a-different-secret-0123456789-abcdefghij' });
    expect(r.code).to.equal(0);
    const err = await authenticateJwt(app, r.stdout.trim()).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).to.have.property('status', 401);
  });

  it('exits 65 with one line on stderr and nothing on stdout for an unknown address', async () => {
    const email = uniqueEmail('nobody');
    const r = await mintJwtCli([email], JWT_ENV);
    expect(r.code).to.equal(65);
    expect(r.stdout).to.equal('');
    expect(r.stderr).to.equal(`mint-jwt: no account with the email address ${email}\n`);
  });

  it('exits 78 explaining why when the service verifies tokens against a JWKS URL', async () => {
    const { account } = await createTestAccount(app);
    const r = await mintJwtCli([account.email], {
      JWT_JWKS_URL: 'https://idp.example.test/.well-known/jwks.json',
      JWT_ISSUER: 'https://idp.example.test/',
      JWT_AUDIENCE: 'completions-api',
    });
    expect(r.code).to.equal(78);
    expect(r.stdout).to.equal('');
    expect(r.stderr).to.match(/^mint-jwt: .*JWT_JWKS_URL.*\n$/);
  });

  it('exits 64 with the usage line when no address is given', async () => {
    const r = await mintJwtCli([], JWT_ENV);
    expect(r.code).to.equal(64);
    expect(r.stderr).to.equal('mint-jwt: usage: npm run --silent mint-jwt -- EMAIL\n');
  });
});
