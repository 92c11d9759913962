import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { expect } from 'chai';
import { sql } from 'kysely';
import type { Page } from 'playwright-core';
import { ManualClock } from '../../src/clock.js';
import { FakeStripe } from '../fakes/stripe.js';
import { closeOutboxFor, createTestAccount, latestEmailTo, type TestAccount } from '../support/accounts.js';
import { createBillingAccount, recordUsage, type UsageSpec } from '../support/billing.js';
import { launchBrowser, type TestBrowser } from '../support/browser.js';
import { recordPage, settled } from '../support/console-page.js';
import { get } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// Prompt caching in the console, in a real browser (Debian's Chromium through playwright-core) at
// 375 and 1280 px with axe-core: the Usage page's cached input, cache writes and what caching saved,
// per model too, and the Models page's cache prices. The service's clock stands in March 2031, a
// month no other test records usage in, so "this month" on the Usage page is that month; and it is
// after now, so no invoicing run elsewhere (each bills what was used before its month's end, the
// latest being last month's in scheduler-processes) meets these rows or their Stripe-less customers. Screenshots go to CONSOLE_SHOTS_DIR (var/console-screenshots/ by default).

const SHOTS = path.resolve(process.env.CONSOLE_SHOTS_DIR ?? path.join('var', 'console-screenshots'));
const NOW = '2031-03-20T12:00:00Z';
const march = (day: number) => new Date(Date.UTC(2031, 2, day, 12));

/** An exact decimal as a plain string ("0.767500" -> "0.7675", "-0.60" -> "-0.6"), for comparing amounts. */
const exact = (amount: string) => amount.replace(/(\.\d*?)0+$/, '$1').replace(/\.$/, '');

describe('prompt caching in the console (headless Chromium)', function () {
  this.timeout(120_000);
  let web: TestWeb;
  let stripe: FakeStripe;
  let browser: TestBrowser;
  const emails: string[] = [];

  before(async () => {
    stripe = await new FakeStripe().start();
    // A fixed port, so the sign-in links in the emails name this very server.
    const probe = await startTestWeb();
    const port = new URL(probe.url).port;
    await probe.close();
    web = await startTestWeb({
      clock: new ManualClock(NOW),
      env: { ...stripe.env(), PORT: port, PUBLIC_BASE_URL: `http://127.0.0.1:${port}` },
    });
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    await closeOutboxFor(web.app, emails);
    await web?.close();
    await stripe?.close();
  });

  /** A paid account (with its Stripe customer in the fake, as upgraded accounts have) and these rows in its ledger. */
  async function paidAccountWith(rows: Omit<UsageSpec, 'accountId' | 'tier'>[]): Promise<TestAccount> {
    const who = await createBillingAccount(web.app, { tier: 'paid' });
    emails.push(who.account.email);
    await recordUsage(
      web.app,
      rows.map((r) => ({ ...r, accountId: who.account.id, tier: 'paid' as const })),
    );
    return who;
  }

  /** A new page signed in as `email`, by the sign-in form and the link the outbox holds. */
  async function signedInPage(email: string): Promise<Page> {
    await browser.context.clearCookies();
    const page = await browser.context.newPage();
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

  /** The Usage page for this month, settled, its charts drawn. */
  async function usagePage(email: string): Promise<Page> {
    const page = await signedInPage(email);
    await page.goto(`${web.url}/console/usage`);
    await settled(page);
    await page.locator('section[aria-labelledby="tokens-chart"] .chart canvas').waitFor();
    return page;
  }

  /**
   * What caching saved on the account's paid rows, from the ledger alone: every prompt token at the
   * input price, less what each request cost.
   */
  async function ledgerSavings(accountId: string, model?: string): Promise<string> {
    const r = await sql<{ saved: string }>`
      select coalesce(sum(prompt_tokens * input_price_per_million / 1000000
                          + completion_tokens * output_price_per_million / 1000000 - cost_usd), 0)::text as saved
        from usage_events
       where account_id = ${accountId} and tier = 'paid' and (${model ?? null}::text is null or model = ${model ?? null})`.execute(
      web.app.db,
    );
    return exact(r.rows[0]!.saved);
  }

  describe('the Usage page of an account whose prompts were cached', () => {
    // 1.2M input tokens this month: gpt-4.1's 600K (400K cached at 0.50 instead of 2.00), Claude
    // Haiku's 300K (200K read at 0.10 instead of 1.00, 50K written for 5 minutes at 1.25) and
    // Gemini's 300K uncached. Saved: 0.60 + 0.18 - 0.0125 = 0.7675 USD.
    let who: TestAccount;
    before(async () => {
      who = await paidAccountWith([
        { model: 'gpt-4.1', prompt: 400_000, cached: 300_000, completion: 2_000, at: march(3) },
        { model: 'gpt-4.1', prompt: 200_000, cached: 100_000, completion: 1_000, at: march(10), api: 'responses' },
        {
          model: 'claude-haiku-4-5',
          prompt: 300_000,
          cached: 200_000,
          cacheWrite: 50_000,
          completion: 1_000,
          at: march(5),
        },
        { model: 'gemini-2.5-flash', prompt: 300_000, completion: 3_000, reasoning: 1_200, at: march(7) },
      ]);
    });

    it('shows the month’s input with how much of it was cached, at a glance and exactly', async () => {
      const page = await usagePage(who.account.email);
      await recordPage(page, SHOTS, 'usage-caching');
      const headline = page.locator('#cache-headline');
      expect(await headline.locator('[aria-hidden="true"]').innerText()).to.equal('1.2M input · 600K cached (50%)');
      // What a screen reader reads instead: the exact counts, the period named.
      expect(await headline.locator('.sr-only').textContent()).to.equal(
        '1,200,000 input tokens this month, of which 600,000 cached (50%)',
      );
      const legend = await page.getByRole('list', { name: 'Input tokens by part' }).locator('li').allInnerTexts();
      expect(legend.map((l) => l.trim())).to.deep.equal([
        'Cached: 600,000 (50%)',
        'Written to the cache: 50,000 (4%)',
        'At the input price: 550,000 (46%)',
      ]);
      const ledger = await sql<{ prompt: string; cached: string; written: string }>`
        select sum(prompt_tokens)::text as prompt, sum(cached_tokens)::text as cached, sum(cache_write_tokens)::text as written
          from usage_events where account_id = ${who.account.id}`.execute(web.app.db);
      expect(ledger.rows[0]).to.deep.equal({ prompt: '1200000', cached: '600000', written: '50000' });
      await page.close();
    });

    it('says what caching saved this month, to the cent, from the ledger’s exact amount', async () => {
      const page = await usagePage(who.account.email);
      const savings = page.locator('#cache-savings');
      expect(await savings.getAttribute('data-savings')).to.equal('saved');
      expect(await savings.locator('dt').innerText()).to.equal('Saved by caching this month');
      expect(await savings.locator('dd').innerText()).to.equal('$0.77');
      const shown = exact((await savings.locator('dd').getAttribute('data-usd'))!);
      expect(shown).to.equal(await ledgerSavings(who.account.id));
      expect(shown).to.equal('0.7675');
      await page.close();
    });

    it('shows each model’s input, cached part and savings, the most cached first', async () => {
      const page = await usagePage(who.account.email);
      const rows = page.locator('#cache-by-model tbody tr');
      expect(await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-model')))).to.deep.equal([
        'gpt-4.1',
        'claude-haiku-4-5',
        'gemini-2.5-flash',
      ]);
      const field = (model: string, name: string) =>
        page.locator(`#cache-by-model tr[data-model="${model}"] [data-field="${name}"]`).innerText();
      const expected = {
        'gpt-4.1': ['600,000', '400,000', '67%', '0', '$0.60'],
        'claude-haiku-4-5': ['300,000', '200,000', '67%', '50,000', '$0.1675'],
        'gemini-2.5-flash': ['300,000', '0', '0%', '0', '$0.00'],
      };
      for (const [model, values] of Object.entries(expected)) {
        const shown = [];
        for (const name of ['prompt_tokens', 'cached_tokens', 'share', 'cache_write_tokens', 'cache_savings_usd'])
          shown.push((await field(model, name)).trim());
        expect(shown, model).to.deep.equal(values);
        // Each model's savings is the ledger's.
        expect(exact(values[4]!.replace('$', '')), model).to.equal(await ledgerSavings(who.account.id, model));
      }
      await page.close();
    });

    it('puts cached tokens in the daily table and the recent requests, and the cache and reasoning counts in the CSV', async () => {
      const page = await usagePage(who.account.email);
      expect(await page.locator('#usage-numbers [data-total="cached_tokens"]').innerText()).to.equal('600,000');
      // Newest first: the 10th's, Gemini's on the 7th, Claude's on the 5th, the 3rd's.
      expect(await page.locator('#recent-requests [data-field="cached_tokens"]').allInnerTexts()).to.deep.equal([
        '100,000',
        '0',
        '200,000',
        '300,000',
      ]);
      const [download] = await Promise.all([
        page.waitForEvent('download'),
        page.getByRole('button', { name: 'Download CSV' }).click(),
      ]);
      const [header, ...lines] = (await readFile(await download.path(), 'utf8')).trim().split('\n');
      expect(header).to.equal(
        'date,model,api,requests,prompt_tokens,completion_tokens,total_tokens,cost_usd,cached_tokens,cache_write_tokens,reasoning_tokens,cache_savings_usd',
      );
      const byModel = (model: string) => lines.filter((l) => l.split(',')[1] === JSON.stringify(model));
      const haiku = byModel('claude-haiku-4-5')[0]!.split(',');
      expect(haiku.slice(0, 3)).to.deep.equal(['2031-03-05', '"claude-haiku-4-5"', 'chat.completions']);
      expect(haiku.slice(8, 11)).to.deep.equal(['200000', '50000', '0']);
      expect(exact(haiku[11]!)).to.equal('0.1675');
      expect(byModel('gemini-2.5-flash')[0]!.split(',')[10]).to.equal('1200');
      await page.close();
    });
  });

  it('says plainly when cache writes cost more than the reads saved', async () => {
    // 400K tokens written to Claude Sonnet's cache (half for an hour) and never read back: 200K at
    // 3.75 and 200K at 6.00 instead of 3.00, so caching cost 0.15 + 0.60 = 0.75 USD more.
    const who = await paidAccountWith([
      {
        model: 'claude-sonnet-4-5',
        prompt: 450_000,
        cacheWrite: 400_000,
        cacheWrite1h: 200_000,
        completion: 2_000,
        at: march(12),
      },
    ]);
    const page = await usagePage(who.account.email);
    await recordPage(page, SHOTS, 'usage-caching-cost-more');
    const savings = page.locator('#cache-savings');
    expect(await savings.getAttribute('data-savings')).to.equal('negative');
    expect(await savings.locator('dt').innerText()).to.equal('Caching cost more than it saved this month');
    expect(await savings.locator('dd').innerText()).to.equal('$0.75 more');
    expect(await savings.locator('p').innerText()).to.match(
      /^Writing a prompt to the cache is billed above the input price/,
    );
    expect(exact((await savings.locator('dd').getAttribute('data-usd'))!)).to.equal('-0.75');
    expect(await ledgerSavings(who.account.id)).to.equal('-0.75');
    await page.close();
  });

  it('says how caching comes about when none of the month’s input was cached', async () => {
    const who = await paidAccountWith([{ model: 'gpt-4.1', prompt: 5_000, completion: 500, at: march(15) }]);
    const page = await usagePage(who.account.email);
    await recordPage(page, SHOTS, 'usage-caching-none');
    const none = page.locator('#caching-none');
    const text = await none.innerText();
    expect(text).to.match(/^None of the input this month came from a prompt cache\./);
    expect(text).to.include('1,024 tokens or more');
    expect(text).to.match(/Anthropic models cache only what a request marks with cache_control/);
    expect(await none.getByRole('link', { name: 'Models' }).getAttribute('href')).to.equal('/console/models');
    expect(await page.locator('#cache-savings').count()).to.equal(0);
    await page.close();
  });

  it('says a free account’s cached input saved nothing, as free requests cost nothing', async () => {
    const who = await createTestAccount(web.app, { tier: 'free' });
    emails.push(who.account.email);
    await recordUsage(web.app, [
      {
        accountId: who.account.id,
        model: 'gemini-2.5-flash',
        tier: 'free',
        prompt: 4_000,
        cached: 2_048,
        completion: 200,
        at: march(18),
      },
    ]);
    const page = await usagePage(who.account.email);
    await recordPage(page, SHOTS, 'usage-caching-free');
    expect(await page.locator('#cache-headline [aria-hidden="true"]').innerText()).to.equal(
      '4K input · 2K cached (51%)',
    );
    const savings = page.locator('#cache-savings');
    expect(await savings.getAttribute('data-savings')).to.equal('free');
    expect(await savings.innerText()).to.match(/^Nothing to save this month: free-tier requests cost nothing\./);
    await page.close();
  });

  it('shows each model’s cached-input price, and cache-write prices per TTL where they differ from the input price', async () => {
    const who = await createTestAccount(web.app, { tier: 'paid' });
    emails.push(who.account.email);
    const listed = await get(`${web.url}/v1/models`, { bearer: who.apiKey });
    expect(listed.status, listed.text).to.equal(200);
    const page = await signedInPage(who.account.email);
    await page.goto(`${web.url}/console/models`);
    await settled(page);
    await recordPage(page, SHOTS, 'models-cache-prices');
    const cell = (model: string, field: string) =>
      page.locator(`#model-list tr[data-model="${model}"] [data-field="${field}"]`);
    // Every model's figures are the API's.
    type Price = Record<
      | 'input_price_per_million'
      | 'cached_input_price_per_million'
      | 'cache_write_price_per_million'
      | 'cache_write_1h_price_per_million',
      string
    >;
    for (const m of listed.body.data as { id: string; pricing: { paid: Price } }[]) {
      const p = m.pricing.paid;
      const dollars = (s: string) => Number(s.replace(/^\$/, ''));
      expect(dollars(await cell(m.id, 'paid-cached-input').innerText()), m.id).to.equal(
        Number(p.cached_input_price_per_million),
      );
      const writes = (await cell(m.id, 'paid-cache-writes').innerText()).trim();
      if (Number(p.cache_write_price_per_million) === Number(p.input_price_per_million))
        expect(writes, m.id).to.equal('As input');
      else
        expect(writes.split('\n'), m.id).to.deep.equal([
          `$${Number(p.cache_write_price_per_million).toFixed(2)} 5 minutes`,
          `$${Number(p.cache_write_1h_price_per_million).toFixed(2)} 1 hour`,
        ]);
    }
    // The catalog's figures, as the providers publish them.
    expect(await cell('gpt-4.1', 'paid-cached-input').innerText()).to.equal('$0.50');
    expect(await cell('gpt-4.1', 'paid-cache-writes').innerText()).to.equal('As input');
    expect(await cell('claude-haiku-4-5', 'paid-cached-input').innerText()).to.equal('$0.10');
    expect((await cell('claude-haiku-4-5', 'paid-cache-writes').innerText()).split('\n')).to.deep.equal([
      '$1.25 5 minutes',
      '$2.00 1 hour',
    ]);
    expect(await cell('gemini-2.5-flash', 'paid-cached-input').innerText()).to.equal('$0.03');
    await page.close();
  });
});
