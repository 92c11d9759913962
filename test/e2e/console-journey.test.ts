import { createHash } from 'node:crypto';
import { mkdir, readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { expect } from 'chai';
import OpenAI from 'openai';
import type { Page } from 'playwright-core';
import { FakePostmark } from '../fakes/postmark.js';
import { FakeStripe } from '../fakes/stripe.js';
import { closeOutboxFor, createTestAccount, latestEmailTo, verificationLinkIn } from '../support/accounts.js';
import { createBillingAccount, recordUsage } from '../support/billing.js';
import { launchBrowser, type TestBrowser } from '../support/browser.js';
import { uniqueEmail } from '../support/env.js';
import { eventually, get, post, request } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// The console in a real browser (Debian's Chromium through playwright-core): every page at phone
// (375 px) and desktop (1280 px) width, screenshots under var/console-screenshots/, axe-core on
// every page with no serious or critical violation, and the whole journey of issue 23 through the
// real web tier, a completion worker and the fake Stripe.

const SHOTS = path.resolve('var', 'console-screenshots');
const WIDTHS = [375, 1280] as const;
const FAST = { LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '5000' };
const AXE_SOURCE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: { target: string[] }[];
}

/** axe-core run inside the page (its source evaluated there: the page's CSP allows no injected script tag). */
async function seriousViolations(page: Page): Promise<string[]> {
  if (!(await page.evaluate('typeof window.axe !== "undefined"')))
    await page.evaluate(await readFile(AXE_SOURCE, 'utf8'));
  const violations = await page.evaluate<AxeViolation[]>(
    'axe.run(document, { resultTypes: ["violations"] }).then((r) => r.violations)',
  );
  return violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
}

/** Waits for the page to settle: its heading, and no "Loading…" left. */
async function settled(page: Page): Promise<void> {
  await page.locator('main h1').waitFor();
  await page.locator('main').filter({ hasText: 'Loading' }).waitFor({ state: 'detached' });
  if (await page.locator('.chart').count()) await page.locator('.chart canvas').first().waitFor();
}

/**
 * Columns whose header is aligned other than their cells (numbers sit right, under a right-aligned
 * header), in every table whose cells stand in columns. In-page source as a string, as for axe: the tests compile without the DOM library.
 */
const MISALIGNED_HEADERS = `[...document.querySelectorAll('table')].flatMap((table) => {
  const row = table.tBodies[0]?.rows[0];
  const head = table.tHead;
  // Only where cells stand in columns: a table stacked into labelled lines on a phone has none.
  if (!row || !head || getComputedStyle(row.cells[0]).display !== 'table-cell') return [];
  return [...head.rows[0].cells].flatMap((th, i) => {
    const td = row.cells[i];
    const [a, b] = [getComputedStyle(th).textAlign, td && getComputedStyle(td).textAlign];
    return td && a !== b ? [(table.id || 'table') + ' "' + th.textContent.trim() + '": header ' + a + ', cells ' + b] : [];
  });
})`;

/** Screenshots at both widths and axe at both, of the page as it is now. */
async function record(page: Page, name: string): Promise<void> {
  await mkdir(SHOTS, { recursive: true });
  for (const width of WIDTHS) {
    await page.setViewportSize({ width, height: width === 375 ? 812 : 900 });
    await settled(page);
    expect(await seriousViolations(page), `${name} at ${width} px`).to.deep.equal([]);
    expect(await page.evaluate<string[]>(MISALIGNED_HEADERS), `${name} at ${width} px`).to.deep.equal([]);
    await page.screenshot({ path: path.join(SHOTS, `${name}-${width}.png`), fullPage: true });
  }
}

describe('the console in a real browser (headless Chromium)', function () {
  this.timeout(180_000);
  let fake: FakeStripe;
  let postmark: FakePostmark;
  let web: TestWeb;
  let browser: TestBrowser;
  const emails: string[] = [];

  before(async () => {
    fake = await new FakeStripe().start();
    postmark = await new FakePostmark().start();
    // A fixed port, so the links in emails and Stripe's return URLs name this very server.
    const probe = await startTestWeb();
    const port = new URL(probe.url).port;
    await probe.close();
    web = await startTestWeb({
      env: { ...fake.env(), ...FAST, PORT: port, PUBLIC_BASE_URL: `http://127.0.0.1:${port}` },
    });
    browser = await launchBrowser({ permissions: ['clipboard-read', 'clipboard-write'] });
  });
  after(async () => {
    await browser?.close();
    await closeOutboxFor(web.app, emails);
    await web?.close();
    await fake?.close();
    await postmark?.close();
  });

  /**
   * The text of the newest email to `email`, once it carries a link to `path`: from the outbox
   * while it waits there, or as the fake Postmark received it once the worker has sent it (a sent
   * row keeps no usable link).
   */
  async function mailWithLink(email: string, path: string, on: TestWeb = web): Promise<string> {
    return eventually(async () => {
      const queued = await latestEmailTo(on.app, email);
      if (!queued?.text_body.includes(path)) return undefined;
      if (queued.status === 'pending') return queued.text_body;
      return postmark.accepted(email).at(-1)?.TextBody;
    }, `the email with a link to ${path}`);
  }

  /** A new page signed in as `email` through the sign-in form and the emailed link. */
  async function signedInPage(email: string, on: TestWeb = web): Promise<Page> {
    // One browser profile for the whole file (and one database behind both servers): whoever
    // signed in before is signed out first.
    await browser.context.clearCookies();
    const page = await browser.context.newPage();
    await signInByLink(page, email, on);
    return page;
  }

  /** The sign-in page's form, then the emailed link (pointed at `on`) and its confirm button. */
  async function signInByLink(page: Page, email: string, on: TestWeb = web): Promise<void> {
    await page.goto(`${on.url}/console/sign-in`);
    await page.getByLabel('Email address').fill(email);
    await page.getByRole('button', { name: 'Email me a sign-in link' }).click();
    await page.getByRole('heading', { name: 'Check your email' }).waitFor();
    const mail = await mailWithLink(email, '/console/sign-in/confirm', on);
    const link = new URL(/https?:\/\/\S+\/console\/sign-in\/confirm\?token=[A-Za-z0-9_%-]+/.exec(mail)![0]);
    await page.goto(`${on.url}${link.pathname}${link.search}`);
    await page.getByRole('button').first().click();
    await page.waitForURL(/\/console\/(\?.*)?$/);
  }

  describe('every page, at 375 and 1280 px, with axe-core', () => {
    it('shows a new account’s empty pages, each saying what to do next', async () => {
      const who = await createTestAccount(web.app);
      const page = await signedInPage(who.account.email);
      await page.goto(`${web.url}/console/`);
      await record(page, 'overview-empty');
      expect(await page.locator('#base-url').textContent()).to.equal(`${web.url}/v1`);
      await page.getByRole('link', { name: 'Usage', exact: true }).click();
      await page.waitForURL(/\/console\/usage$/);
      // Focus moves to the new page's heading, so a screen reader starts there.
      expect(await page.evaluate('document.activeElement?.tagName')).to.equal('H1');
      await record(page, 'usage-empty');
      expect(await page.locator('main').innerText()).to.match(/No usage from .*Make a request with your key/);
      await page.getByRole('link', { name: 'Keys' }).click();
      await record(page, 'keys');
      await page.getByRole('link', { name: 'Billing' }).click();
      await record(page, 'billing-free');
      expect(await page.locator('main').innerText()).to.include('No invoices yet');
      await page.close();
    });

    it('signs every browser out from the account page', async () => {
      const who = await createTestAccount(web.app);
      const page = await signedInPage(who.account.email);
      await page.goto(`${web.url}/console/account`);
      await settled(page);
      await page.getByRole('button', { name: 'Sign out everywhere' }).click();
      await page.waitForURL(/\/console\/sign-in/);
      const sessions = await web.app.db
        .selectFrom('console_sessions')
        .select('id')
        .where('account_id', '=', who.account.id)
        .where('revoked_at', 'is', null)
        .execute();
      expect(sessions).to.deep.equal([]);
      await page.close();
    });

    it('charts and tables a paid account’s usage, Chat Completions and Responses side by side, by key, its limit and invoice', async () => {
      const who = await createBillingAccount(web.app, { tier: 'paid' });
      // Two named keys besides the default one: one program's requests on each, and the Responses
      // requests recorded with no key (as before keys were); the second key revoked afterwards.
      const makeKey = async (name: string) => {
        const r = await post(`${web.url}/v1/keys`, { name }, { bearer: who.jwt });
        expect(r.status, r.text).to.equal(201);
        return r.body as { id: string; redacted_value: string };
      };
      const [batch, site] = [await makeKey('Batch job'), await makeKey('Website')];
      const today = new Date();
      const day = (n: number) =>
        new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() - n, 12));
      await recordUsage(
        web.app,
        [0, 1, 2, 4, 7, 8].flatMap((n, i) => [
          {
            accountId: who.account.id,
            model: 'gpt-4.1-mini',
            tier: 'paid' as const,
            prompt: 1200 + 300 * i,
            completion: 800 + 150 * i,
            at: day(n),
            keyId: batch.id,
          },
          {
            accountId: who.account.id,
            model: 'claude-sonnet-4-5',
            tier: 'paid' as const,
            prompt: 900 * (i + 1),
            completion: 400,
            at: day(n),
            stream: true,
            keyId: site.id,
          },
          {
            accountId: who.account.id,
            model: 'gpt-4.1-mini',
            tier: 'paid' as const,
            prompt: 2500 + 500 * i,
            completion: 1200,
            at: day(n),
            api: 'responses' as const,
          },
        ]),
      );
      expect((await post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: who.apiKey })).status).to.equal(
        200,
      );
      const jwt = who.jwt;
      expect(
        (
          await fetch(`${web.url}/v1/billing/spend-limit`, {
            method: 'PUT',
            headers: { authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
            body: JSON.stringify({ monthly_limit_usd: '5.00' }),
          })
        ).status,
      ).to.equal(200);
      expect((await request('DELETE', `${web.url}/v1/keys/${site.id}`, { bearer: who.jwt })).status).to.equal(200);
      const page = await signedInPage(who.account.email);
      await page.goto(`${web.url}/console/`);
      await record(page, 'overview');
      expect(await page.locator('meter#spend-gauge').count()).to.equal(1);
      await page.goto(`${web.url}/console/usage?range=30d`);
      await record(page, 'usage');
      expect(await page.locator('.chart canvas').count()).to.be.greaterThan(1);
      // Each API's card says what the ledger holds for it.
      const perApi = await web.app.db
        .selectFrom('usage_events')
        .select((eb) => ['api', eb.fn.countAll<string>().as('requests')])
        .where('account_id', '=', who.account.id)
        .groupBy('api')
        .orderBy('api')
        .execute();
      expect(perApi.map((r) => [r.api, r.requests])).to.deep.equal([
        ['chat.completions', '12'],
        ['responses', '6'],
      ]);
      for (const [name, requests] of [
        ['Chat Completions', '12'],
        ['Responses', '6'],
      ] as const) {
        const card = page.getByRole('region', { name, exact: true });
        expect(await card.locator('[data-api-total="requests"]').textContent()).to.equal(requests);
      }
      const apis = await page.locator('#recent-requests tbody tr td:nth-child(3)').allTextContents();
      expect(new Set(apis)).to.deep.equal(new Set(['Chat Completions', 'Responses']));
      // By key: a row per key with the ledger's requests and tokens, the costliest first, the
      // revoked key marked, and the usage of no recorded key named as such.
      const perKey = await web.app.db
        .selectFrom('usage_events')
        .select((eb) => [
          'key_id',
          eb.fn.countAll<string>().as('requests'),
          eb.fn.sum<string>(eb('prompt_tokens', '+', eb.ref('completion_tokens'))).as('tokens'),
        ])
        .where('account_id', '=', who.account.id)
        .groupBy('key_id')
        .execute();
      const keyRows = page.locator('#usage-by-key tbody tr');
      expect(await keyRows.evaluateAll((rows) => rows.map((r) => r.getAttribute('data-key-id')))).to.have.members([
        batch.id,
        site.id,
        '',
      ]);
      for (const k of perKey) {
        const row = page.locator(`#usage-by-key tr[data-key-id="${k.key_id ?? ''}"]`);
        expect(await row.locator('[data-field="requests"]').textContent()).to.equal(k.requests);
        expect((await row.locator('[data-field="total_tokens"]').textContent())!.replace(/,/g, '')).to.equal(k.tokens);
      }
      const siteRow = page.locator(`#usage-by-key tr[data-key-id="${site.id}"]`);
      expect(await siteRow.locator('[data-field="name"]').innerText()).to.match(/^Website\s*Revoked$/);
      expect(await siteRow.locator('[data-field="value"]').innerText()).to.equal(site.redacted_value);
      expect(await page.locator('#usage-by-key tr[data-key-id=""] [data-field="name"]').innerText()).to.equal(
        'Before keys were recorded',
      );
      // Recent requests name the key of each.
      const keyNames = await page.locator('#recent-requests tbody tr td:nth-child(4)').allTextContents();
      expect(new Set(keyNames)).to.deep.equal(new Set(['Batch job', 'Website', '—']));
      // The CSV has a line per day, model and API, the API in a column of its own.
      const [download] = await Promise.all([
        page.waitForEvent('download'),
        page.getByRole('button', { name: 'Download CSV' }).click(),
      ]);
      const csv = (await readFile(await download.path(), 'utf8')).trim().split('\n');
      expect(csv[0]).to.equal(
        'date,model,api,requests,prompt_tokens,completion_tokens,total_tokens,cost_usd,cached_tokens,cache_write_tokens,reasoning_tokens,cache_savings_usd',
      );
      const apiColumn = csv.slice(1).map((line) => line.split(',')[2]);
      expect(apiColumn.filter((a) => a === 'chat.completions')).to.have.length(12);
      expect(apiColumn.filter((a) => a === 'responses')).to.have.length(6);
      await page.goto(`${web.url}/console/billing`);
      await record(page, 'billing-paid');
      expect(await page.locator('#invoice-list a', { hasText: 'PDF' }).count()).to.equal(1);
      await page.close();
    });

    it('says the upgrade came back, and that billing is off where Stripe is not configured', async () => {
      const who = await createTestAccount(web.app);
      const page = await signedInPage(who.account.email);
      await page.goto(`${web.url}/console/billing?upgrade=cancelled`);
      await record(page, 'billing-upgrade-cancelled');
      expect(await page.locator('main').innerText()).to.include('Checkout cancelled: nothing was changed.');
      expect(new URL(page.url()).search).to.equal('');
      await page.close();

      const plain = await startTestWeb({ env: { ...FAST } });
      try {
        const other = await createTestAccount(plain.app);
        const p = await signedInPage(other.account.email, plain);
        await p.goto(`${plain.url}/console/billing`);
        await settled(p);
        // Said from the start (the session tells the console), with nothing offered that would fail.
        await p.getByText('Billing is not configured on this service').waitFor();
        expect(await p.getByRole('button', { name: 'Upgrade to paid' }).count()).to.equal(0);
        await record(p, 'billing-not-configured');
        await p.close();
      } finally {
        await plain.close();
      }
    });

    it('shows the sign-in page, its “check your email” state, and the console switched off for JWKS set-ups', async () => {
      await browser.context.clearCookies();
      const page = await browser.context.newPage();
      await page.goto(`${web.url}/console/usage`);
      await page.waitForURL(/\/console\/sign-in\?return_to=%2Fconsole%2Fusage$/);
      await record(page, 'sign-in');
      const email = uniqueEmail('nobody');
      emails.push(email);
      await page.getByLabel('Email address').fill(email);
      await page.getByRole('button', { name: 'Email me a sign-in link' }).click();
      await page.getByRole('heading', { name: 'Check your email' }).waitFor();
      await record(page, 'sign-in-sent');
      await page.close();

      // An operator with an outside identity provider: JWTs verified against its JWKS, none issued here.
      const jwks = await startTestWeb({
        env: {
          JWT_JWKS_URL: 'http://127.0.0.1:9/jwks.json',
          JWT_ISSUER: 'https://idp.example.test/',
          JWT_AUDIENCE: 'completions-api',
        },
      });
      try {
        const off = await browser.context.newPage();
        await off.goto(`${jwks.url}/console/`);
        await off.getByText('The console is off on this service').waitFor();
        await record(off, 'console-off');
        await off.close();
      } finally {
        await jwks.close();
      }
    });
  });

  describe('the small things', () => {
    it('asks for nothing that is not there (no 404) on any page, and every page names the icon served from this origin', async () => {
      const who = await createTestAccount(web.app);
      const page = await signedInPage(who.account.email);
      const missing: string[] = [];
      page.on('response', (r) => {
        if (r.status() === 404) missing.push(r.url());
      });
      page.on('console', (m) => {
        if (m.type() === 'error' && /404|not found/i.test(m.text())) missing.push(m.text());
      });
      const email = uniqueEmail('icon');
      emails.push(email);
      await post(`${web.url}/v1/auth/signup`, { name: 'Ada', email, organization: 'Engines' });
      const { link } = verificationLinkIn((await latestEmailTo(web.app, email))!.text_body);
      const pages = [
        '/console/',
        '/console/usage',
        '/console/keys',
        '/console/billing',
        '/docs',
        new URL(link).pathname + new URL(link).search,
        '/v1/auth/verify?token=' + 'A'.repeat(43),
        '/console/sign-in/confirm?token=' + 'A'.repeat(43),
      ];
      for (const p of pages) {
        await page.goto(`${web.url}${p}`);
        await page.locator('h1, #ui').first().waitFor();
        const icons = await page.evaluate<string[]>(
          `[...document.querySelectorAll('link[rel~="icon"]')].map((l) => l.getAttribute('href'))`,
        );
        expect(icons, p).to.deep.equal(['/favicon.svg', '/favicon.ico']);
      }
      for (const [icon, type] of [
        ['/favicon.svg', 'image/svg+xml'],
        ['/favicon.ico', 'image/x-icon'],
      ] as const) {
        const r = await page.request.get(`${web.url}${icon}`);
        expect(r.status(), icon).to.equal(200);
        expect(r.headers()['content-type'], icon).to.equal(type);
        expect((await r.body()).length, icon).to.be.greaterThan(100);
      }
      expect(missing).to.deep.equal([]);
      await page.close();
    });

    it('fits a long address into the header at 375 px, broken only at its @ and cut with an ellipsis', async () => {
      const email = `ada.augusta.king.countess.of.lovelace.${Date.now()}@analytical-engine-society.example.com`;
      const who = await createTestAccount(web.app, { email });
      const page = await signedInPage(who.account.email);
      await page.setViewportSize({ width: 375, height: 812 });
      await page.goto(`${web.url}/console/`);
      await settled(page);
      const address = page.locator('header .email');
      expect(await address.getAttribute('title')).to.equal(email);
      expect(await address.textContent()).to.equal(email);
      // In-page source as a string, as for axe: the tests compile without the DOM library.
      const parts = await page.evaluate<{ text: string; right: number; lines: number }[]>(
        `[...document.querySelectorAll('header .email > span')].map((s) => ({
          text: s.textContent,
          right: s.getBoundingClientRect().right,
          lines: s.getBoundingClientRect().height < 2 * parseFloat(getComputedStyle(s).fontSize) ? 1 : 2,
        }))`,
      );
      expect(parts.map((p) => p.text)).to.deep.equal([
        email.slice(0, email.indexOf('@')),
        email.slice(email.indexOf('@')),
      ]);
      for (const part of parts) {
        expect(part.right, part.text).to.be.at.most(375);
        expect(part.lines, part.text).to.equal(1);
      }
      expect(await page.evaluate('document.documentElement.scrollWidth')).to.equal(375);
      await mkdir(SHOTS, { recursive: true });
      await page.locator('header').screenshot({ path: path.join(SHOTS, 'header-long-address-375.png') });
      await page.close();
    });

    it('says a free account’s costs are zero instead of drawing an empty cost chart', async () => {
      const who = await createTestAccount(web.app);
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gemini-2.5-flash',
          tier: 'free',
          prompt: 1200,
          completion: 300,
          at: new Date(),
        },
      ]);
      const page = await signedInPage(who.account.email);
      await page.goto(`${web.url}/console/usage`);
      await record(page, 'usage-free');
      const costs = page.locator('section[aria-labelledby="cost-chart"]');
      expect(await costs.innerText()).to.match(
        /Costs are zero: every request from .* cost \$0\.00\. The free tier costs nothing/,
      );
      expect(await costs.locator('.chart').count()).to.equal(0);
      expect(await page.locator('section[aria-labelledby="tokens-chart"] .chart canvas').count()).to.equal(1);
      await page.close();
    });

    it('labels the cost axis in dollars and cents ("$0.80"), not "$0.800"', async () => {
      const who = await createBillingAccount(web.app, { tier: 'paid' });
      const today = new Date();
      // About $0.30 to $0.90 a day: an axis in steps of ten or twenty cents.
      await recordUsage(
        web.app,
        [0, 1, 2, 3].map((n) => ({
          accountId: who.account.id,
          model: 'claude-sonnet-4-5',
          tier: 'paid' as const,
          prompt: 100_000 * (n + 1),
          completion: 0,
          at: new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() - n, 12)),
        })),
      );
      const page = await signedInPage(who.account.email);
      // What the charts draw on their canvases: uPlot writes its axis labels with fillText.
      await page.addInitScript(`{
        window.drawnTexts = [];
        const fillText = CanvasRenderingContext2D.prototype.fillText;
        CanvasRenderingContext2D.prototype.fillText = function (text, ...rest) {
          window.drawnTexts.push(String(text));
          return fillText.call(this, text, ...rest);
        };
      }`);
      await page.goto(`${web.url}/console/usage?range=30d`);
      await settled(page);
      await page.locator('section[aria-labelledby="cost-chart"] .chart canvas').waitFor();
      const money = (await page.evaluate<string[]>('window.drawnTexts')).filter((t) => t.startsWith('$'));
      expect(money).to.include('$0.00');
      expect(money.length).to.be.greaterThan(2);
      for (const label of money) expect(label).to.match(/^\$\d+\.\d\d$/);
      await page.close();
    });
  });

  describe('the whole journey', () => {
    let worker: RoleProcess;
    before(async () => {
      worker = await startRole('worker', { ...fake.env(), ...postmark.env(), ...FAST });
    });
    after(async () => {
      await worker?.stop();
    });

    it('signs up, verifies, uses the key, reads usage, regenerates, signs out and in, limits, upgrades, is invoiced and downgrades', async () => {
      const email = uniqueEmail('journey');
      emails.push(email);
      await browser.context.clearCookies();
      const page = await browser.context.newPage();

      // Sign up, then verify in the browser: it lands signed in on the Keys page, the key shown once.
      expect(
        (await post(`${web.url}/v1/auth/signup`, { name: 'Ada', email, organization: 'Engines' })).status,
      ).to.equal(200);
      const { link } = verificationLinkIn(await mailWithLink(email, '/v1/auth/verify'));
      await page.goto(link);
      await page.getByRole('button').first().click();
      await page.waitForURL(/\/console\/key/);
      const key = (await page.locator('#api-key').textContent())!.trim();
      const account = await web.app.db
        .selectFrom('accounts')
        .select('id')
        .where('email', '=', email)
        .executeTakeFirstOrThrow();
      const stored = await web.app.db
        .selectFrom('api_keys')
        .select('key_hash')
        .where('account_id', '=', account.id)
        .where('revoked_at', 'is', null)
        .executeTakeFirstOrThrow();
      expect(stored.key_hash).to.equal(sha256(key));
      await record(page, 'key-after-verification');
      await page.reload();
      await settled(page);
      expect(await page.locator('#api-key').count(), 'the key is shown once').to.equal(0);

      // Completions with that key through the openai SDK, on two models.
      const client = new OpenAI({ apiKey: key, baseURL: `${web.url}/v1`, maxRetries: 0 });
      const models = ['claude-haiku-4-5', 'gemini-2.5-flash'];
      for (const model of models)
        await client.chat.completions.create({
          model,
          messages: [{ role: 'user', content: 'Say hi.' }],
          max_tokens: 16,
        });
      await eventually(async () => {
        const r = await get(`${web.url}/v1/billing/requests`, { bearer: key });
        return r.body?.data?.length === 2 ? true : undefined;
      }, 'both requests in the ledger');

      // The usage page: both models on today's bars, the table's totals equal to the ledger's.
      await page.goto(`${web.url}/console/usage`);
      await record(page, 'usage-journey');
      const ledger = await web.app.db
        .selectFrom('usage_events')
        .select((eb) => [
          eb.fn.countAll<string>().as('requests'),
          eb.fn.sum<string>('prompt_tokens').as('prompt'),
          eb.fn.sum<string>('completion_tokens').as('completion'),
        ])
        .where('account_id', '=', account.id)
        .executeTakeFirstOrThrow();
      const total = async (k: string) =>
        Number((await page.locator(`[data-total="${k}"]`).textContent())!.replace(/,/g, ''));
      expect(await total('requests')).to.equal(Number(ledger.requests));
      expect(await total('prompt_tokens')).to.equal(Number(ledger.prompt));
      expect(await total('completion_tokens')).to.equal(Number(ledger.completion));
      expect(await total('total_tokens')).to.equal(Number(ledger.prompt) + Number(ledger.completion));
      const today = new Date().toISOString().slice(0, 10);
      const rows = await page.locator('#usage-numbers tbody tr').allInnerTexts();
      expect(rows.map((r) => r.split('\t').slice(0, 2).join(' ')).sort()).to.deep.equal(
        models.map((m) => `${today} ${m}`).sort(),
      );
      const legend = await page.locator('.chart').first().innerText();
      for (const model of models) expect(legend).to.include(model);

      // Regenerate after the confirmation: the old key is refused at once.
      await page.getByRole('link', { name: 'Keys' }).click();
      await page.getByRole('button', { name: 'Regenerate…' }).click();
      await page.getByRole('dialog').getByRole('button', { name: 'Regenerate' }).click();
      await page.locator('#api-key').waitFor();
      const newKey = (await page.locator('#api-key').textContent())!.trim();
      expect(newKey).not.to.equal(key);
      expect((await get(`${web.url}/v1/models`, { bearer: key })).status).to.equal(401);
      expect((await get(`${web.url}/v1/models`, { bearer: newKey })).status).to.equal(200);
      await page.locator('#next-allowed').waitFor();
      await record(page, 'key-regenerated');

      // Sign out, then in again by the emailed link.
      await page.getByRole('button', { name: 'Sign out', exact: true }).click();
      await page.waitForURL(/\/console\/sign-in/);
      expect(
        await page.evaluate<{ signed_in: boolean }>('fetch("/console/session").then((r) => r.json())'),
      ).to.deep.include({ signed_in: false });
      await signInByLink(page, email);

      // Upgrade through the fake Stripe's hosted checkout and back.
      await page.goto(`${web.url}/console/billing`);
      await settled(page);
      await page.getByRole('button', { name: 'Upgrade to paid' }).click();
      // The browser leaves for Stripe's hosted checkout page (the fake serves none: the test plays the person there).
      await page.waitForURL(/\/c\/pay\//, { waitUntil: 'commit' });
      const checkoutUrl = page.url();
      const sessionId = checkoutUrl.split('/c/pay/')[1]!;
      const paid = fake.completeCheckoutSession(sessionId, { last4: '4242' });
      const back = new URL(paid.returnUrl);
      await page.goto(`${web.url}${back.pathname}${back.search}`);
      await page.waitForURL(/\/console\/billing$/);
      await page.getByText('You are on the paid tier now').waitFor();
      expect(await page.locator('#tier').textContent()).to.equal('Paid');
      await record(page, 'billing-upgraded');

      // A spending limit.
      await page.getByLabel(/Set a limit/).fill('25.00');
      await page.getByRole('button', { name: 'Save limit' }).click();
      await page.getByText('Spending limit set to $25.00 a month.').waitFor();
      const limit = await web.app.db
        .selectFrom('accounts')
        .selectAll()
        .where('id', '=', account.id)
        .executeTakeFirstOrThrow();
      expect(limit.monthly_spend_limit_usd).to.equal('25.00');

      // Paid usage, invoiced on demand: listed with Stripe's links.
      await new OpenAI({ apiKey: newKey, baseURL: `${web.url}/v1`, maxRetries: 0 }).chat.completions.create({
        // A long prompt on a dear model: over half a cent, so the invoice has a line.
        model: 'claude-sonnet-4-5',
        messages: [{ role: 'user', content: 'Summarise this. '.repeat(2000) }],
        max_tokens: 50,
      });
      await eventually(async () => {
        const r = await get(`${web.url}/v1/billing/requests`, { bearer: newKey });
        return r.body?.data?.length === 3 ? true : undefined;
      }, 'the paid request in the ledger');
      const invoiced = await post(`${web.url}/v1/billing/generate-invoice`, undefined, { bearer: newKey });
      expect(invoiced.status).to.equal(200);
      expect(invoiced.body.status).to.equal('invoiced');
      await page.reload();
      await settled(page);
      expect(await page.locator('#invoice-list a', { hasText: 'View' }).getAttribute('href')).to.equal(
        invoiced.body.invoice.hosted_invoice_url,
      );
      expect(await page.locator('#invoice-list a', { hasText: 'PDF' }).getAttribute('href')).to.equal(
        invoiced.body.invoice.invoice_pdf,
      );
      await record(page, 'billing-invoiced');
      // On a phone each invoice is a block of labelled lines: nothing to scroll sideways for.
      await page.setViewportSize({ width: 375, height: 812 });
      const fits = await page
        .locator('#invoice-list')
        .evaluate((table) => table.scrollWidth <= table.parentElement!.clientWidth);
      expect(fits, 'the invoice table fits a 375 px screen').to.equal(true);
      await page.setViewportSize({ width: 1280, height: 900 });

      // Downgrade after the confirmation.
      await page.getByRole('button', { name: 'Downgrade to free…' }).click();
      await page.getByRole('dialog').getByRole('button', { name: 'Downgrade' }).click();
      await eventually(
        async () => ((await page.locator('#tier').textContent()) === 'Free' ? true : undefined),
        'the free tier',
      );
      const after = await web.app.db
        .selectFrom('accounts')
        .select('tier')
        .where('id', '=', account.id)
        .executeTakeFirstOrThrow();
      expect(after.tier).to.equal('free');
      await page.close();
    });
  });
});
