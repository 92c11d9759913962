import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { SignJWT } from 'jose';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { testConfig } from '../support/env.js';
import { get } from '../support/http.js';
import { startRole, stopAllRoles } from '../support/processes.js';

/** The string src/config.ts once carried as the development JWT secret. */
const OLD_BUILT_IN_SECRET = 'dev-only-jwt-secret-change-me-0123456789abcdef';

async function signedWith(secret: string, account: TestAccount['account']): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ email: account.email })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(account.id)
    .setIssuedAt(now)
    .setExpirationTime(now + 600)
    .sign(new TextEncoder().encode(secret));
}

describe('a default start (no JWT_SECRET, not production) and the JWT secret', function () {
  this.timeout(60_000);
  let dir: string;
  let app: AppContext;
  let account: TestAccount['account'];
  // What `npm start` gives its roles with nothing configured: NODE_ENV unset, no JWT_SECRET. The one
  // difference: the secret file lives in a directory of this test's, not in the checkout's var/.
  const defaults = () => ({ NODE_ENV: '', JWT_SECRET: '', JWT_SECRET_FILE: path.join(dir, 'var', 'jwt-secret') });

  before(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'default-start-'));
    app = createContext(testConfig(), { role: 'test' });
    ({ account } = await createTestAccount(app));
  });
  after(async () => {
    await stopAllRoles();
    await app.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a token signed with the string that was the built-in development secret', async () => {
    const web = await startRole('web', defaults());
    const r = await get(`${web.url}/v1/subscription/info`, { bearer: await signedWith(OLD_BUILT_IN_SECRET, account) });
    expect(r.status).to.equal(401);
    expect(r.body.error).to.include({ code: 'invalid_token', message: 'The token signature is not valid' });
    await web.stop();
  });

  it('makes a random secret under var/ on first start (mode 0600), which every later process of the checkout shares', async () => {
    const first = await startRole('web', defaults());
    const file = path.join(dir, 'var', 'jwt-secret');
    const secret = readFileSync(file, 'utf8').trim();
    expect(secret).to.have.length.of.at.least(32).and.not.equal(OLD_BUILT_IN_SECRET);
    expect(statSync(file).mode & 0o777).to.equal(0o600);
    const second = await startRole('web', defaults());
    const token = await signedWith(secret, account);
    for (const web of [first, second]) {
      const r = await get(`${web.url}/v1/subscription/info`, { bearer: token });
      expect(r.status, web.url).to.equal(200);
    }
    expect(readFileSync(file, 'utf8').trim()).to.equal(secret);
  });
});
