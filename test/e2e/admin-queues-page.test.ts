import { expect } from 'chai';
import type { Page } from 'playwright-core';
import { completionShards } from '../../src/infra/queues.js';
import { launchBrowser, type TestBrowser } from '../support/browser.js';
import { isolatedPrefix } from '../support/env.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const TOKEN = 'operator-token-0123456789abcdef0123456789';

describe('the queue dashboard in a real browser (headless Chromium)', function () {
  this.timeout(60_000);
  let web: TestWeb;
  let browser: TestBrowser;

  before(async () => {
    // A Redis prefix of its own: the jobs queued here are seen by no worker of another test.
    web = await startTestWeb({ env: { ADMIN_TOKEN: TOKEN, REDIS_PREFIX: isolatedPrefix() } });
    const shard0 = web.app.queue(completionShards(web.app.config)[0]!);
    await shard0.add('completion', { note: 'waiting for a worker' });
    await shard0.add('completion', { note: 'waiting for a worker' });
    await shard0.add('completion', { note: 'not due for an hour' }, { delay: 3_600_000 });
    browser = await launchBrowser();
  });
  // The profile is shared by the tests: each starts signed out.
  beforeEach(async () => browser.context.clearCookies());
  after(async () => {
    await browser?.close();
    await web?.close();
  });

  /** Opens the dashboard and signs in through its form with `token`. */
  async function signIn(page: Page, token: string): Promise<void> {
    const first = await page.goto(`${web.url}/admin/queues`);
    expect(first!.status()).to.equal(401);
    await page.getByLabel('Operator token').fill(token);
    await page.getByRole('button', { name: 'Sign in' }).click();
  }

  it('signs in through the page and shows the completion queue with its counts', async () => {
    const page = await browser.context.newPage();
    const elsewhere: string[] = [];
    const refusedByPolicy: string[] = [];
    page.on('request', (r) => {
      if (!r.url().startsWith(web.url)) elsewhere.push(r.url());
    });
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) refusedByPolicy.push(m.text());
    });
    await signIn(page, TOKEN);

    // The overview: a card per queue, with its total.
    const card = page.locator('main li', { has: page.getByRole('link', { name: 'completions.0', exact: true }) });
    await card.getByText('3 Jobs').waitFor();
    for (const other of ['scheduled', 'invoicing'])
      await page.locator('main').getByRole('link', { name: other, exact: true }).waitFor();

    // The queue's own page: its counts by status.
    await card.getByRole('link', { name: 'completions.0', exact: true }).click();
    await page.getByRole('link', { name: /^WAITING\s*2$/ }).waitFor();
    await page.getByRole('link', { name: /^DELAYED\s*1$/ }).waitFor();

    expect(refusedByPolicy).to.deep.equal([]);
    expect(elsewhere).to.deep.equal([]);
    await page.close();
  });

  it('shows the form again, with the reason, after a wrong token', async () => {
    const page = await browser.context.newPage();
    await signIn(page, 'not-the-operator-token-0123456789abcdef');
    await page.getByRole('alert').filter({ hasText: 'That is not the operator token.' }).waitFor();
    await page.getByLabel('Operator token').waitFor();
    await page.close();
  });
});
