import { createHash } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { expect } from 'chai';
import { launchBrowser, type TestBrowser } from '../support/browser.js';
import { closeOutboxFor, latestEmailTo, verificationLinkIn } from '../support/accounts.js';
import { uniqueEmail } from '../support/env.js';
import { get, post, request } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const SHOTS = path.resolve('var', 'verify-screenshots');
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

describe('the verification page in a real browser (headless Chromium)', function () {
  this.timeout(60_000);
  let web: TestWeb;
  /** The same service verifying JWTs from an external identity provider: the console stays off. */
  let idpWeb: TestWeb;
  let browser: TestBrowser;
  const used: string[] = [];

  /** Signs up and returns the link from the verification email, pointed at that server. */
  async function emailedLink(at: TestWeb): Promise<{ email: string; url: string }> {
    const email = uniqueEmail('browser');
    used.push(email);
    expect((await post(`${at.url}/v1/auth/signup`, { name: 'Ada', email, organization: 'Engines' })).status).to.equal(
      200,
    );
    const { link } = verificationLinkIn((await latestEmailTo(at.app, email))!.text_body);
    expect(link.startsWith(at.url)).to.equal(true);
    return { email, url: link };
  }

  /** A web server on a fixed port, so the links in the emails point at this very server, as in production. */
  async function startOnOwnPort(env: Record<string, string> = {}): Promise<TestWeb> {
    const probe = await startTestWeb();
    const port = new URL(probe.url).port;
    await probe.close();
    return startTestWeb({ env: { PORT: port, PUBLIC_BASE_URL: `http://127.0.0.1:${port}`, ...env } });
  }

  async function keyOf(at: TestWeb, email: string): Promise<string> {
    const account = await at.app.db
      .selectFrom('accounts')
      .select('id')
      .where('email', '=', email)
      .executeTakeFirstOrThrow();
    return (
      await at.app.db
        .selectFrom('api_keys')
        .select('key_hash')
        .where('account_id', '=', account.id)
        .executeTakeFirstOrThrow()
    ).key_hash;
  }

  async function tokenOf(at: TestWeb, email: string): Promise<{ used_at: Date | null }> {
    return at.app.db
      .selectFrom('email_verification_tokens')
      .innerJoin('accounts', 'accounts.id', 'email_verification_tokens.account_id')
      .select('email_verification_tokens.used_at')
      .where('accounts.email', '=', email)
      .executeTakeFirstOrThrow();
  }

  async function keyCount(at: TestWeb, email: string): Promise<number> {
    const rows = await at.app.db
      .selectFrom('api_keys')
      .innerJoin('accounts', 'accounts.id', 'api_keys.account_id')
      .select('api_keys.id')
      .where('accounts.email', '=', email)
      .execute();
    return rows.length;
  }

  before(async () => {
    await mkdir(SHOTS, { recursive: true });
    web = await startOnOwnPort();
    idpWeb = await startOnOwnPort({
      JWT_JWKS_URL: 'http://127.0.0.1:9/jwks.json',
      JWT_ISSUER: 'https://idp.example.test/',
      JWT_AUDIENCE: 'completions-api',
    });
    browser = await launchBrowser({ permissions: ['clipboard-read', 'clipboard-write'] });
  });
  after(async () => {
    await browser?.close();
    await closeOutboxFor(web.app, used);
    await web?.close();
    await idpWeb?.close();
  });

  it('opens on a button; pressing it verifies, signs in and lands on the console, which gets the key once', async () => {
    const { email, url } = await emailedLink(web);
    const page = await browser.context.newPage();
    const opened = await page.goto(url);
    expect(opened!.status()).to.equal(200);
    expect(opened!.headers()['cache-control']).to.equal('no-store');
    expect(await page.content()).not.to.match(/sk-svc-/);
    await page.getByRole('button', { name: 'Verify and show my API key' }).click();
    await page.waitForURL(`${web.url}/console/key?new=1`);
    const cookies = await browser.context.cookies(web.url);
    expect(cookies.find((c) => c.name === 'svc_session')).to.include({ httpOnly: true, sameSite: 'Lax', path: '/' });
    // The console's key page reads the key once (GET /console/new-key) and shows it; a second read is refused.
    const key = (await page.locator('#api-key').textContent())!.trim();
    expect(key).to.match(/^sk-svc-[A-Za-z0-9_-]{43}[0-9A-Za-z]{6}$/);
    expect(sha256(key)).to.equal(await keyOf(web, email));
    const again = await page.evaluate<{ email: string; status: number }>(`(async () => {
      const session = await (await fetch('/console/session')).json();
      const again = await fetch('/console/new-key', { headers: { 'X-CSRF-Token': session.csrf_token } });
      return { email: session.account.email, status: again.status };
    })()`);
    expect(again).to.deep.equal({ email, status: 404 });
    await page.close();
  });

  it('after a link scanner fetched the link (*/* and HEAD), the person who opens it still reaches their key; the token is spent once', async () => {
    const { email, url } = await emailedLink(web);
    // What mail link scanners, chat previews and plain curl send.
    const scanned = await get(url, { headers: { accept: '*/*' } });
    expect(scanned.status).to.equal(200);
    expect(scanned.text).not.to.match(/sk-svc-/);
    expect((await request('HEAD', url)).status).to.equal(200);
    expect(await tokenOf(web, email)).to.deep.include({ used_at: null });

    const page = await browser.context.newPage();
    await page.goto(url);
    await page.getByRole('button', { name: 'Verify and show my API key' }).click();
    await page.waitForURL(`${web.url}/console/key?new=1`);
    const key = (await page.locator('#api-key').textContent())!.trim();
    expect(sha256(key)).to.equal(await keyOf(web, email));
    expect((await tokenOf(web, email)).used_at).to.be.an.instanceOf(Date);
    expect(await keyCount(web, email)).to.equal(1);
    await page.close();
  });

  it('shows the confirmation page readably at 375 and 1280 px (screenshots under var/verify-screenshots/)', async () => {
    const { url } = await emailedLink(web);
    const page = await browser.context.newPage();
    for (const width of [375, 1280]) {
      await page.setViewportSize({ width, height: 720 });
      await page.goto(url);
      const button = page.getByRole('button', { name: 'Verify and show my API key' });
      const box = (await button.boundingBox())!;
      expect(box.x + box.width, `the button fits at ${width} px`).to.be.at.most(width);
      expect(await page.evaluate('document.documentElement.scrollWidth'), `no sideways scroll at ${width} px`).to.equal(
        width,
      );
      await page.screenshot({ path: path.join(SHOTS, `verify-confirm-${width}.png`), fullPage: true });
    }
    await page.close();
  });

  it('shows a clear error page, and no key, when the link is used a second time', async () => {
    const { url } = await emailedLink(web);
    const page = await browser.context.newPage();
    await page.goto(url);
    await page.getByRole('button', { name: 'Verify and show my API key' }).click();
    await page.waitForURL(/\/console\/key\?new=1$/);
    const again = await page.goto(url);
    expect(again!.status()).to.equal(400);
    expect(await page.locator('h1').innerText()).to.equal('This link was already used');
    expect(await page.content()).not.to.match(/sk-svc-/);
    await page.close();
  });

  it('with the console off (JWKS only), shows the key once on its own page with a working copy button', async () => {
    const { email, url } = await emailedLink(idpWeb);
    const page = await browser.context.newPage();
    await page.goto(url);
    await page.getByRole('button', { name: 'Verify and show my API key' }).click();
    await page.locator('#api-key').waitFor();
    const key = (await page.locator('#api-key').textContent())!.trim();
    expect(sha256(key)).to.equal(await keyOf(idpWeb, email));
    expect(await page.locator('.warning').innerText()).to.match(/save it now: it will not be shown again/i);
    expect(await page.title()).to.equal('Your API key');
    expect(await page.locator('#copy-status').textContent()).to.equal('');
    await page.getByRole('button', { name: 'Copy key' }).click();
    await page.locator('#copy-status', { hasText: 'Copied' }).waitFor();
    expect(await page.evaluate('navigator.clipboard.readText()')).to.equal(key);
    await page.close();
  });

  it('runs no script other than the key page’s own (its Content-Security-Policy holds in the browser)', async () => {
    const { url } = await emailedLink(idpWeb);
    const page = await browser.context.newPage();
    const violations: string[] = [];
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) violations.push(m.text());
    });
    await page.goto(url);
    await page.getByRole('button', { name: 'Verify and show my API key' }).click();
    await page.getByRole('button', { name: 'Copy key' }).click();
    await page.locator('#copy-status', { hasText: 'Copied' }).waitFor();
    await page.evaluate(`{
      const s = document.createElement('script');
      s.textContent = 'document.title = "pwned"';
      document.body.appendChild(s);
    }`);
    expect(await page.title()).to.equal('Your API key');
    expect(violations.length).to.be.greaterThan(0);
    await page.close();
  });
});
