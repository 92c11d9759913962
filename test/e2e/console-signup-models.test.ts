import { createHash } from 'node:crypto';
import path from 'node:path';
import { expect } from 'chai';
import type { Page } from 'playwright-core';
import { FakeStripe } from '../fakes/stripe.js';
import { closeOutboxFor, createTestAccount, latestEmailTo, verificationLinkIn } from '../support/accounts.js';
import { launchBrowser, type TestBrowser } from '../support/browser.js';
import { pageReads, recordPage, settled } from '../support/console-page.js';
import { uniqueEmail } from '../support/env.js';
import { captureLogs } from '../support/log-capture.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// Sign-up and the Models page in a real browser (Debian's Chromium through playwright-core), at
// 375 and 1280 px with axe-core. Screenshots go to CONSOLE_SHOTS_DIR (var/console-screenshots/ by default).

const SHOTS = path.resolve(process.env.CONSOLE_SHOTS_DIR ?? path.join('var', 'console-screenshots'));
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

describe('sign-up and the models page in a real browser (headless Chromium)', function () {
  this.timeout(120_000);
  let web: TestWeb;
  let stripe: FakeStripe;
  let browser: TestBrowser;
  const emails: string[] = [];
  // Everything the web tier logs, down to debug: no link's token and no key may be in it.
  const logs = captureLogs('debug');

  before(async () => {
    // Billing configured (the fake Stripe), so the billing page offers the upgrade and its prices.
    stripe = await new FakeStripe().start();
    // A fixed port, so the links in the emails name this very server, as in production.
    const probe = await startTestWeb();
    const port = new URL(probe.url).port;
    await probe.close();
    web = await startTestWeb({
      logger: logs.logger,
      env: { ...stripe.env(), PORT: port, PUBLIC_BASE_URL: `http://127.0.0.1:${port}` },
    });
    browser = await launchBrowser({ permissions: ['clipboard-read', 'clipboard-write'] });
  });
  after(async () => {
    await browser?.close();
    await closeOutboxFor(web.app, emails);
    await web?.close();
    await stripe?.close();
  });

  async function freshPage(): Promise<Page> {
    await browser.context.clearCookies();
    return browser.context.newPage();
  }

  /** A new page signed in as `email`, by the sign-in form and the link the outbox holds. */
  async function signedInPage(email: string): Promise<Page> {
    const page = await freshPage();
    await page.goto(`${web.url}/console/sign-in`);
    await page.getByLabel('Email address').fill(email);
    await page.getByRole('button', { name: 'Email me a sign-in link' }).click();
    await page.getByRole('heading', { name: 'Check your email' }).waitFor();
    const mail = (await latestEmailTo(web.app, email))!.text_body;
    const link = new URL(/https?:\/\/\S+\/console\/sign-in\/confirm\?token=[A-Za-z0-9_%-]+/.exec(mail)![0]);
    await page.goto(`${web.url}${link.pathname}${link.search}`);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(/\/console\/(\?.*)?$/);
    return page;
  }

  describe('sign-up', () => {
    it('signs up by keyboard from the sign-in page, and the emailed link lands signed in with the key shown once', async () => {
      const email = uniqueEmail('signup');
      emails.push(email);
      const page = await freshPage();
      await page.goto(`${web.url}/console/sign-in`);
      await recordPage(page, SHOTS, 'sign-in');
      await page.getByRole('link', { name: 'Sign up' }).click();
      await page.waitForURL(`${web.url}/console/sign-up`);
      // Focus moves to the new page's heading, so a screen reader starts there.
      await pageReads(page, 'document.activeElement?.tagName', 'H1');
      await recordPage(page, SHOTS, 'sign-up');
      await page.getByLabel('Your name').focus();
      await page.keyboard.type('Ada Lovelace');
      await page.keyboard.press('Tab');
      await page.keyboard.type(email);
      await page.keyboard.press('Tab');
      await page.keyboard.type('Analytical Engines');
      await page.keyboard.press('Enter');
      await page.getByRole('heading', { name: 'Check your email' }).waitFor();
      expect(await page.getByRole('status').filter({ hasText: email }).count()).to.equal(1);
      await recordPage(page, SHOTS, 'sign-up-sent');

      const account = await web.app.db
        .selectFrom('accounts')
        .select(['id', 'name', 'organization', 'verified_at'])
        .where('email', '=', email)
        .executeTakeFirstOrThrow();
      expect(account).to.deep.include({ name: 'Ada Lovelace', organization: 'Analytical Engines', verified_at: null });

      // The emailed link (from the outbox, where the dev set-up keeps mail), opened in the same browser.
      const { link, token } = verificationLinkIn((await latestEmailTo(web.app, email))!.text_body);
      await page.goto(link);
      await page.getByRole('button', { name: 'Verify and show my API key' }).click();
      await page.waitForURL(/\/console\/key/);
      const key = (await page.locator('#api-key').textContent())!.trim();
      const stored = await web.app.db
        .selectFrom('api_keys')
        .select('key_hash')
        .where('account_id', '=', account.id)
        .executeTakeFirstOrThrow();
      expect(sha256(key)).to.equal(stored.key_hash);
      const session = await page.evaluate<{ signed_in: boolean; account: { email: string } }>(
        'fetch("/console/session").then((r) => r.json())',
      );
      expect(session).to.deep.include({ signed_in: true });
      expect(session.account.email).to.equal(email);
      expect(await page.locator('header').innerText()).to.include('Sign out');

      // Shown once: a reload, or the link followed again, never shows it.
      await page.reload();
      await settled(page);
      expect(await page.locator('#api-key').count()).to.equal(0);
      await page.goto(link);
      expect(await page.locator('body').innerText()).to.match(/already used/);
      expect(await page.content()).not.to.include(key);
      await page.close();

      // The link's token and the key never reached the logs, though every request was logged.
      const logged = JSON.stringify(logs.lines);
      expect(logs.lines.filter((l) => l.msg === 'request').length).to.be.greaterThan(5);
      expect(logged).not.to.include(token);
      expect(logged).not.to.include(key);
    });

    it("shows each of the API's field errors at its field, and moves focus to the first", async () => {
      const page = await freshPage();
      await page.goto(`${web.url}/console/sign-up`);
      await settled(page);
      await page.getByLabel('Your name').fill('   ');
      await page.getByLabel('Email address').fill('not an address');
      await page.getByLabel('Organisation').fill('Engines');
      await page.getByRole('button', { name: 'Sign up' }).click();
      await page.locator('#name-error').waitFor();
      await pageReads(page, 'document.activeElement?.id', 'name');
      for (const field of ['name', 'email']) {
        const input = page.locator(`#${field}`);
        expect(await input.getAttribute('aria-invalid'), field).to.equal('true');
        expect(await input.getAttribute('aria-describedby'), field).to.include(`${field}-error`);
        expect((await page.locator(`#${field}-error`).innerText()).length, field).to.be.greaterThan(5);
      }
      expect(await page.locator('#email-error').innerText()).to.match(/not a valid email address/);
      expect(await page.locator('#organization').getAttribute('aria-invalid')).to.equal(null);
      await recordPage(page, SHOTS, 'sign-up-errors');
      await page.getByRole('link', { name: 'Sign in' }).click();
      await page.waitForURL(`${web.url}/console/sign-in`);
      await page.close();
    });

    it('sends a signed-in person from the sign-up page to the console', async () => {
      const who = await createTestAccount(web.app);
      const page = await signedInPage(who.account.email);
      await page.goto(`${web.url}/console/sign-up`);
      await page.waitForURL(`${web.url}/console/`);
      await page.close();
    });
  });

  describe('the models page', () => {
    /** The rows of a models table, as the page shows them. */
    async function rows(page: Page, table: string) {
      return page.locator(`#${table} tbody tr`).evaluateAll((trs) =>
        trs.map((tr) => {
          const cell = (f: string) => tr.querySelector(`[data-field="${f}"]`)!.textContent!.trim();
          return {
            id: tr.getAttribute('data-model'),
            context: cell('context'),
            accepts: cell('accepts'),
            free: cell('free'),
            input: cell('paid-input'),
            cachedInput: cell('paid-cached-input'),
            cacheWrites: cell('paid-cache-writes'),
            output: cell('paid-output'),
          };
        }),
      );
    }

    /** What the page should say of a catalog entry. */
    const expected = (id: string) => {
      const m = web.app.catalog.find(id)!;
      return {
        id,
        context: m.context_length!.toLocaleString('en-US'),
        accepts: ['Text, images', 'tools', ...(m.reasoning ? ['reasoning effort'] : [])].join('; '),
        free: m.tiers.includes('free') ? 'Free' : 'Paid tier only',
        input: `$${m.input_price_per_million}`,
        cachedInput: `$${m.cached_input_price_per_million}`,
        // A write's price per TTL where it is not the input price (Anthropic's), one line each.
        cacheWrites:
          m.cache_write_price_per_million === m.input_price_per_million &&
          m.cache_write_1h_price_per_million === m.input_price_per_million
            ? 'As input'
            : `$${m.cache_write_price_per_million} 5 minutes$${m.cache_write_1h_price_per_million} 1 hour`,
        output: `$${m.output_price_per_million}`,
      };
    };

    it("shows a free account its three models and what the paid tier adds, with the catalog's figures", async () => {
      const who = await createTestAccount(web.app, { tier: 'free' });
      const page = await signedInPage(who.account.email);
      await page.getByRole('link', { name: 'Models' }).click();
      await page.waitForURL(`${web.url}/console/models`);
      await settled(page);
      expect(await rows(page, 'model-list')).to.deep.equal(web.app.catalog.forTier('free').map((m) => expected(m.id)));
      expect(await rows(page, 'paid-model-list')).to.deep.equal(
        web.app.catalog
          .forTier('paid')
          .filter((m) => !m.tiers.includes('free'))
          .map((m) => expected(m.id)),
      );
      expect(await page.locator('main').innerText()).to.include('your models cost nothing, within its rate limits');
      await recordPage(page, SHOTS, 'models-free');
      await page.close();
    });

    it('shows a paid account every model of its tier and no upgrade section', async () => {
      const who = await createTestAccount(web.app, { tier: 'paid' });
      const page = await signedInPage(who.account.email);
      await page.goto(`${web.url}/console/models`);
      await settled(page);
      expect(await rows(page, 'model-list')).to.deep.equal(web.app.catalog.forTier('paid').map((m) => expected(m.id)));
      expect(await page.locator('#paid-model-list').count()).to.equal(0);
      await recordPage(page, SHOTS, 'models-paid');
      await page.close();
    });

    it("shows a free account the paid tier's prices on the billing page, before upgrading", async () => {
      const who = await createTestAccount(web.app, { tier: 'free' });
      const page = await signedInPage(who.account.email);
      await page.goto(`${web.url}/console/billing`);
      await page.locator('#paid-prices-list').waitFor();
      const prices = await page.locator('#paid-prices-list tbody tr').allInnerTexts();
      expect(prices.map((r) => r.split('\t'))).to.deep.equal(
        web.app.catalog
          .forTier('paid')
          .map((m) => [m.id, `$${m.input_price_per_million}`, `$${m.output_price_per_million}`]),
      );
      await recordPage(page, SHOTS, 'billing-free-prices');
      await page.getByRole('link', { name: 'Models page' }).click();
      await page.waitForURL(`${web.url}/console/models`);
      await page.close();
    });
  });
});
