import { mkdir, readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { expect } from 'chai';
import type { Page } from 'playwright-core';
import { FakeStripe } from '../fakes/stripe.js';
import { latestEmailTo } from '../support/accounts.js';
import { createBillingAccount, invoicesOf, recordUsage } from '../support/billing.js';
import { launchBrowser, type TestBrowser } from '../support/browser.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// Closing an account from the console's Account page in headless Chromium: the typed
// confirmation (a wrong one refused at the field, the right one submitted from the keyboard), the
// person signed out with a message, axe-core clean, screenshots at 375 and 1280 px outside the
// repository (CONSOLE_CLOSE_SHOTS, /tmp/console-shots-close by default).

const SHOTS = process.env.CONSOLE_CLOSE_SHOTS ?? '/tmp/console-shots-close';
const WIDTHS = [375, 1280] as const;
const AXE_SOURCE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');

interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: { target: string[] }[];
}

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

/** Screenshots and axe at both widths, of the page as it is now. */
async function record(page: Page, name: string): Promise<void> {
  await mkdir(SHOTS, { recursive: true });
  for (const width of WIDTHS) {
    await page.setViewportSize({ width, height: width === 375 ? 812 : 900 });
    await page.locator('main h1').waitFor();
    expect(await seriousViolations(page), `${name} at ${width} px`).to.deep.equal([]);
    // Nothing wider than the screen: a phone never scrolls sideways.
    expect(await page.evaluate('document.documentElement.scrollWidth'), `${name} at ${width} px`).to.be.at.most(width);
    await page.screenshot({ path: path.join(SHOTS, `${name}-${width}.png`), fullPage: true });
  }
}

describe('closing an account in the console (headless Chromium)', function () {
  this.timeout(120_000);
  let fake: FakeStripe;
  let web: TestWeb;
  let browser: TestBrowser;

  before(async () => {
    fake = await new FakeStripe().start();
    web = await startTestWeb({ env: fake.env() });
    browser = await launchBrowser();
  });
  after(async () => {
    await browser?.close();
    await web?.close();
    await fake?.close();
  });

  async function signedInPage(email: string): Promise<Page> {
    const page = await browser.context.newPage();
    await page.goto(`${web.url}/console/sign-in`);
    await page.getByLabel('Email address').fill(email);
    await page.getByRole('button', { name: 'Email me a sign-in link' }).click();
    await page.getByRole('heading', { name: 'Check your email' }).waitFor();
    const mail = (await latestEmailTo(web.app, email))!.text_body;
    const link = new URL(/https?:\/\/\S+\/console\/sign-in\/confirm\?token=[A-Za-z0-9_%-]+/.exec(mail)![0]);
    await page.goto(`${web.url}${link.pathname}${link.search}`);
    await page.getByRole('button').first().click();
    await page.waitForURL(/\/console\/(\?.*)?$/);
    return page;
  }

  it('closes the account after the typed confirmation, and lands signed out with a message', async () => {
    const who = await createBillingAccount(web.app, { tier: 'paid' });
    const at = new Date(web.app.clock.now().getTime() - 60_000);
    await recordUsage(web.app, [
      { accountId: who.account.id, model: 'gpt-4.1', tier: 'paid', prompt: 500_000, completion: 80_000, at },
    ]);
    const page = await signedInPage(who.account.email);
    await page.getByRole('link', { name: 'Account' }).click();
    await page.waitForURL(/\/console\/account$/);
    await page.getByRole('heading', { name: 'Close account' }).waitFor();
    await record(page, 'account');

    const field = page.getByLabel('To confirm, type your email address');
    await field.fill(`not-${who.account.email}`);
    await page.getByRole('button', { name: 'Close account' }).click();
    await page.getByText('That is not the address of this account').waitFor();
    expect(await field.getAttribute('aria-invalid')).to.equal('true');
    expect(await page.evaluate('document.activeElement?.id')).to.equal('confirm-email');
    await record(page, 'account-mismatch');
    expect(
      (
        await web.app.db
          .selectFrom('accounts')
          .select('closing_at')
          .where('id', '=', who.account.id)
          .executeTakeFirstOrThrow()
      ).closing_at,
    ).to.equal(null);

    // From the keyboard: the address typed, Enter submits.
    await field.fill(who.account.email);
    await field.press('Enter');
    await page.waitForURL(/\/console\/sign-in\?closed=1$/);
    await page.getByText('Your account is closed and you are signed out').waitFor();
    expect(await page.getByRole('button', { name: 'Email me a sign-in link' }).count()).to.equal(1);
    await record(page, 'closed-signed-out');

    const row = await web.app.db
      .selectFrom('accounts')
      .selectAll()
      .where('id', '=', who.account.id)
      .executeTakeFirstOrThrow();
    expect(row.closed_at).to.be.instanceOf(Date);
    expect(row.email).to.equal(`closed-${who.account.id}@closed.invalid`);
    expect(await invoicesOf(web.app, who.account.id)).to.have.length(1);
    // The session is over on the service's side too: reloading stays signed out.
    await page.goto(`${web.url}/console/account`);
    await page.waitForURL(/\/console\/sign-in/);
    await page.close();
  });
});
