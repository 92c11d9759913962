import { createHash } from 'node:crypto';
import { expect } from 'chai';
import { launchBrowser, type TestBrowser } from '../support/browser.js';
import { closeOutboxFor, latestEmailTo, verificationLinkIn } from '../support/accounts.js';
import { uniqueEmail } from '../support/env.js';
import { post } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

describe('the verification page in a real browser (headless Chromium)', function () {
  this.timeout(60_000);
  let web: TestWeb;
  let browser: TestBrowser;
  const used: string[] = [];

  /** Signs up and returns the link from the verification email, pointed at this test's server. */
  async function emailedLink(): Promise<{ email: string; url: string }> {
    const email = uniqueEmail('browser');
    used.push(email);
    expect((await post(`${web.url}/v1/auth/signup`, { name: 'Ada', email, organization: 'Engines' })).status).to.equal(
      200,
    );
    const { link } = verificationLinkIn((await latestEmailTo(web.app, email))!.text_body);
    expect(link.startsWith(web.url)).to.equal(true);
    return { email, url: link };
  }

  before(async () => {
    // A fixed port, so the links in the emails point at this very server, as in production.
    const probe = await startTestWeb();
    const port = new URL(probe.url).port;
    await probe.close();
    web = await startTestWeb({ env: { PORT: port, PUBLIC_BASE_URL: `http://127.0.0.1:${port}` } });
    browser = await launchBrowser({ permissions: ['clipboard-read', 'clipboard-write'] });
  });
  after(async () => {
    await browser?.close();
    await closeOutboxFor(web.app, used);
    await web?.close();
  });

  it('shows the key, the save-it-now warning, and a copy button that puts the key on the clipboard', async () => {
    const { email, url } = await emailedLink();
    const page = await browser.context.newPage();
    const response = await page.goto(url);
    expect(response!.status()).to.equal(200);
    expect(response!.headers()['cache-control']).to.equal('no-store');
    const key = (await page.locator('#api-key').textContent())!.trim();
    expect(key).to.match(/^sk-svc-[A-Za-z0-9_-]{43}[0-9A-Za-z]{6}$/);
    const account = await web.app.db
      .selectFrom('accounts')
      .select('id')
      .where('email', '=', email)
      .executeTakeFirstOrThrow();
    const stored = await web.app.db
      .selectFrom('api_keys')
      .select('key_hash')
      .where('account_id', '=', account.id)
      .executeTakeFirstOrThrow();
    expect(stored.key_hash).to.equal(sha256(key));
    expect(await page.locator('.warning').innerText()).to.match(/save it now: it will not be shown again/i);
    expect(await page.title()).to.equal('Your API key');

    expect(await page.locator('#copy-status').textContent()).to.equal('');
    await page.getByRole('button', { name: 'Copy key' }).click();
    await page.locator('#copy-status', { hasText: 'Copied' }).waitFor();
    // Page code, passed as a string: the test itself compiles without DOM types.
    expect(await page.evaluate('navigator.clipboard.readText()')).to.equal(key);
    await page.close();
  });

  it('runs no script other than the page’s own (its Content-Security-Policy holds in the browser)', async () => {
    const { url } = await emailedLink();
    const page = await browser.context.newPage();
    const violations: string[] = [];
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) violations.push(m.text());
    });
    await page.goto(url);
    // The page's own script is allowed by its hash: the button works.
    await page.getByRole('button', { name: 'Copy key' }).click();
    await page.locator('#copy-status', { hasText: 'Copied' }).waitFor();
    // Injected inline script is refused.
    await page.evaluate(`{
      const s = document.createElement('script');
      s.textContent = 'document.title = "pwned"';
      document.body.appendChild(s);
    }`);
    expect(await page.title()).to.equal('Your API key');
    expect(violations.length).to.be.greaterThan(0);
    await page.close();
  });

  it('shows a clear error page, and no key, when the link is opened a second time', async () => {
    const { url } = await emailedLink();
    const page = await browser.context.newPage();
    await page.goto(url);
    await page.locator('#api-key').waitFor();
    const again = await page.goto(url);
    expect(again!.status()).to.equal(400);
    expect(await page.locator('h1').innerText()).to.equal('This link was already used');
    expect(await page.content()).not.to.match(/sk-svc-/);
    await page.close();
  });
});
